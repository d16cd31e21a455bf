"""Tenants: a ``tenant_id`` on deployments, definitions, instances, hold rows,
incidents, messages and the REST API's jobs (docs/tenants.md).

Every column is NOT NULL with ``<default>`` as its server default, so every row written
before this migration belongs to the default tenant (PostgreSQL 11+ adds such a column
without rewriting the table). Subscriptions are looked up by tenant with their name and
key, and a message id is unique within its tenant: the messages' primary key takes the
tenant, so one tenant's message id never makes another tenant's message a duplicate.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_DEFAULT = sa.text("'<default>'")
_TABLES = (
    "deployments",
    "definitions",
    "instances",
    "subscriptions",
    "user_tasks",
    "incidents",
    "unmatched_messages",
    "api_jobs",
)


def _column() -> sa.Column[str]:
    return sa.Column("tenant_id", sa.String(31), nullable=False, server_default=_DEFAULT)


def upgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(_column())
    op.create_index(
        "ix_instances_tenant_id_created_at_id", "instances", ["tenant_id", "created_at", "id"]
    )
    op.drop_index("ix_subscriptions_kind_name_key", table_name="subscriptions")
    op.create_index(
        "ix_subscriptions_kind_name_key_tenant",
        "subscriptions",
        ["kind", "name", "correlation_key", "tenant_id"],
    )
    op.create_index("ix_user_tasks_tenant_id", "user_tasks", ["tenant_id"])
    op.create_index("ix_incidents_tenant_id", "incidents", ["tenant_id"])
    with op.batch_alter_table("messages") as batch:
        batch.add_column(_column())
        batch.drop_constraint("pk_messages", type_="primary")
        batch.create_primary_key("pk_messages", ["message_id", "tenant_id"])


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_constraint("pk_messages", type_="primary")
        batch.create_primary_key("pk_messages", ["message_id"])
        batch.drop_column("tenant_id")
    op.drop_index("ix_incidents_tenant_id", table_name="incidents")
    op.drop_index("ix_user_tasks_tenant_id", table_name="user_tasks")
    op.drop_index("ix_subscriptions_kind_name_key_tenant", table_name="subscriptions")
    op.create_index(
        "ix_subscriptions_kind_name_key", "subscriptions", ["kind", "name", "correlation_key"]
    )
    op.drop_index("ix_instances_tenant_id_created_at_id", table_name="instances")
    for table in reversed(_TABLES):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("tenant_id")

"""Fewer index entries per write.

Every INSERT of an instance, and every UPDATE that moves a token (not HOT), writes an
entry in each index of ``instances`` whose predicate the row satisfies, and every job
an entry in each index of ``outbox``. This migration drops the entries no query reads:

- ``ix_instances_status`` and ``ix_instances_business_key`` (from 0001) are the leading
  column of ``ix_instances_status_created_at_id`` and
  ``ix_instances_business_key_created_at_id`` (from 0007), which answer every query
  they did;
- ``ix_instances_key_start_key`` (from 0001): the one lookup by start key asks for a
  running instance, which ``uq_instances_running_start_key`` answers;
- the business-key list and the parent lookup keep only rows that have a business key
  or a parent (a filter on the column implies it is not null);
- the GIN index of live tokens' nodes keeps only rows that have a live token: an ended
  instance adds no entry. It keeps PostgreSQL's pending list (``fastupdate``): with it
  off, every instance at a common node rewrote that node's growing posting list
  (measured: 636 WAL bytes per start at 1,000 instances, against 158 with it on);
- ``ix_outbox_created_at``: the outbox sweep reads the oldest rows first in id order,
  which the primary key gives.

bench/README.md ("Issue 25: WAL per brokered one-job instance") has the measured effect.

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def _partial(name: str, columns: list[str], where: str) -> None:
    op.create_index(
        name,
        "instances",
        columns,
        postgresql_where=sa.text(where),
        sqlite_where=sa.text(where),
    )


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.drop_index("ix_instances_status", table_name="instances")
    op.drop_index("ix_instances_business_key", table_name="instances")
    op.drop_index("ix_instances_key_start_key", table_name="instances")
    op.drop_index("ix_instances_business_key_created_at_id", table_name="instances")
    _partial(
        "ix_instances_business_key_created_at_id",
        ["business_key", "created_at", "id"],
        "business_key IS NOT NULL",
    )
    op.drop_index("ix_instances_parent_id", table_name="instances")
    _partial("ix_instances_parent_id", ["parent_id"], "parent_id IS NOT NULL")
    op.drop_index("ix_instances_waiting_nodes", table_name="instances")
    if postgres:
        op.execute(
            "CREATE INDEX ix_instances_waiting_nodes ON instances USING gin (waiting_nodes) "
            "WHERE waiting_nodes <> '[]'::jsonb"
        )
    else:
        _partial("ix_instances_waiting_nodes", ["waiting_nodes"], "waiting_nodes <> '[]'")
    op.drop_index("ix_outbox_created_at", table_name="outbox")


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_index("ix_outbox_created_at", "outbox", ["created_at"])
    op.drop_index("ix_instances_waiting_nodes", table_name="instances")
    if postgres:
        op.execute("CREATE INDEX ix_instances_waiting_nodes ON instances USING gin (waiting_nodes)")
    else:
        op.create_index("ix_instances_waiting_nodes", "instances", ["waiting_nodes"])
    op.drop_index("ix_instances_parent_id", table_name="instances")
    op.create_index("ix_instances_parent_id", "instances", ["parent_id"])
    op.drop_index("ix_instances_business_key_created_at_id", table_name="instances")
    op.create_index(
        "ix_instances_business_key_created_at_id",
        "instances",
        ["business_key", "created_at", "id"],
    )
    op.create_index("ix_instances_key_start_key", "instances", ["key", "start_key"])
    op.create_index("ix_instances_business_key", "instances", ["business_key"])
    op.create_index("ix_instances_status", "instances", ["status"])

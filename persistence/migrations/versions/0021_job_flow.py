"""Flow control of job types: counts, slots and waiting jobs (persistence/job_flow.py).

A job of a limited type takes a slot in the transaction that writes its dispatch, or
waits as a row; the transaction that ends its wait gives the slot back and grants the
next waiting job, round-robin across keys (docs/flow-control.md).

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import JsonDoc, UtcDateTime

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_flow_types",
        sa.Column("job_type", sa.String(255), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.Column("waiting", sa.Integer(), nullable=False),
        sa.Column("grants", sa.BigInteger(), nullable=False),
        sa.Column("paused_until", UtcDateTime()),
        sa.Column("tokens", sa.Float()),
        sa.Column("tokens_at", UtcDateTime()),
        sa.Column("limits", JsonDoc()),
        sa.Column("limits_set_at", UtcDateTime()),
        sa.PrimaryKeyConstraint("job_type", name="pk_job_flow_types"),
    )
    op.create_table(
        "job_flow_keys",
        sa.Column("job_type", sa.String(255), nullable=False),
        sa.Column("flow_key", sa.String(255), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.Column("waiting", sa.Integer(), nullable=False),
        sa.Column("last_grant", sa.BigInteger(), nullable=False),
        sa.Column("paused_until", UtcDateTime()),
        sa.Column("tokens", sa.Float()),
        sa.Column("tokens_at", UtcDateTime()),
        sa.PrimaryKeyConstraint("job_type", "flow_key", name="pk_job_flow_keys"),
    )
    op.create_table(
        "job_flow_slots",
        sa.Column("instance_id", sa.String(255), nullable=False),
        sa.Column("wait_id", sa.String(255), nullable=False),
        sa.Column("job_type", sa.String(255), nullable=False),
        sa.Column("flow_key", sa.String(255), nullable=False),
        sa.Column("payload", JsonDoc(), nullable=False),
        sa.Column("granted_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("instance_id", "wait_id", name="pk_job_flow_slots"),
    )
    op.create_table(
        "job_flow_waiting",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True),
        sa.Column("job_type", sa.String(255), nullable=False),
        sa.Column("flow_key", sa.String(255), nullable=False),
        sa.Column("instance_id", sa.String(255), nullable=False),
        sa.Column("wait_id", sa.String(255), nullable=False),
        sa.Column("payload", JsonDoc(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_job_flow_waiting"),
    )
    op.create_index("job_flow_waiting_key", "job_flow_waiting", ["job_type", "flow_key", "id"])
    op.create_index("job_flow_waiting_wait", "job_flow_waiting", ["instance_id", "wait_id"])


def downgrade() -> None:
    op.drop_index("job_flow_waiting_wait", table_name="job_flow_waiting")
    op.drop_index("job_flow_waiting_key", table_name="job_flow_waiting")
    op.drop_table("job_flow_waiting")
    op.drop_table("job_flow_slots")
    op.drop_table("job_flow_keys")
    op.drop_table("job_flow_types")

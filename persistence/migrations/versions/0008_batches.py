"""Bulk operations: the ``batches`` table and one ``batch_items`` row per target; paused
job types and the jobs they hold.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import JsonDoc, UtcDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("operation", sa.String(32), nullable=False),
        sa.Column("selector", JsonDoc(), nullable=False),
        sa.Column("params", JsonDoc(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("selected", sa.Integer(), nullable=False),
        sa.Column("applied", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("refused", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("finished_at", UtcDateTime(), nullable=True),
        sa.Column("claimed_until", UtcDateTime(), nullable=True),
        sa.Column("claim_token", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_batches"),
    )
    op.create_index("ix_batches_state", "batches", ["state"])
    op.create_table(
        "batch_items",
        sa.Column("batch_id", sa.String(64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("target_id", sa.String(320), nullable=False),
        sa.Column("instance_id", sa.String(255), nullable=True),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("done_at", UtcDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("batch_id", "seq", name="pk_batch_items"),
    )
    op.create_table(
        "job_type_pauses",
        sa.Column("job_type", sa.String(255), nullable=False),
        sa.Column("paused_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("job_type", name="pk_job_type_pauses"),
    )
    op.create_table(
        "held_jobs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True),
        sa.Column("job_type", sa.String(255), nullable=False),
        sa.Column("payload", JsonDoc(), nullable=False),
        sa.Column("held_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_held_jobs"),
    )
    op.create_index("ix_held_jobs_job_type", "held_jobs", ["job_type"])


def downgrade() -> None:
    op.drop_index("ix_held_jobs_job_type", table_name="held_jobs")
    op.drop_table("held_jobs")
    op.drop_table("job_type_pauses")
    op.drop_table("batch_items")
    op.drop_index("ix_batches_state", table_name="batches")
    op.drop_table("batches")

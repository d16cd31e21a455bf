"""``failed_triggers``: a trigger that could not be applied is kept for an operator
(list, retry, drop) instead of being acknowledged and lost.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import UtcDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "failed_triggers",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("task", sa.String(255), nullable=False),
        sa.Column("routing_key", sa.Text(), nullable=False),
        sa.Column("instance_id", sa.String(255)),
        sa.Column("trigger_id", sa.Text()),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("error_class", sa.String(255), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("first_at", UtcDateTime(), nullable=False),
        sa.Column("last_at", UtcDateTime(), nullable=False),
    )
    op.create_index("ix_failed_triggers_instance_id", "failed_triggers", ["instance_id"])
    op.create_index("ix_failed_triggers_last_at", "failed_triggers", ["last_at"])


def downgrade() -> None:
    op.drop_table("failed_triggers")

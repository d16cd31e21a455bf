"""Timer start events: the ``start_timers`` table (definition-level deadlines).

Written out by hand, like 0001; ``tests/integration/test_store.py`` checks that the
migrated schema agrees with ``persistence/tables.py``.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import UtcDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "start_timers",
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("node_id", sa.String(255), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("due_at", UtcDateTime(), nullable=False),
        sa.Column("cycle_remaining", sa.Integer()),
        sa.Column("interval_seconds", sa.Float()),
        sa.Column("claimed_until", UtcDateTime()),
        sa.Column("claim_token", sa.String(64)),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("last_error", sa.Text()),
        sa.PrimaryKeyConstraint("key", "node_id", name="pk_start_timers"),
    )
    op.create_index("ix_start_timers_due_at", "start_timers", ["due_at"])


def downgrade() -> None:
    op.drop_table("start_timers")

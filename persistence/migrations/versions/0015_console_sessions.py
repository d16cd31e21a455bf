"""The console's signed-in sessions, so that signing out ends a session everywhere.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import UtcDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("started_at", UtcDateTime(), nullable=False),
        sa.Column("ends_at", UtcDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("console_sessions")

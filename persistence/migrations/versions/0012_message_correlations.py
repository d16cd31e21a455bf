"""The processes each message has correlated to: a buffered message is taken once per
process id, not once in all (Zeebe's message cardinality).

Messages buffered before this migration keep the older rule: one already consumed
stays consumed, one not yet consumed is open to every process.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import UtcDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "message_correlations",
        sa.Column("message_id", sa.String(255), primary_key=True),
        sa.Column("process_key", sa.String(255), primary_key=True),
        sa.Column("instance_id", sa.String(255), nullable=False),
        sa.Column("at", UtcDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("message_correlations")

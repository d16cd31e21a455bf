"""A partial index over the inbox rows not yet processed.

The inbox keeps every processed row (it is the producer's record), so the sweep's
"unprocessed and older than" query and the backlog gauge would otherwise read the whole
table; this index holds only the rows still waiting, which stays small.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_inbox_unprocessed",
        "inbox",
        ["created_at"],
        postgresql_where=sa.text("processed_at IS NULL"),
        sqlite_where=sa.text("processed_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_inbox_unprocessed", table_name="inbox")

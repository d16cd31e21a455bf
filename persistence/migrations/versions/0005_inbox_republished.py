"""The inbox remembers when the sweep last re-published a row, so it re-sends each
stuck trigger once per redelivery window instead of on every sweep.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import UtcDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("inbox") as batch:
        batch.add_column(sa.Column("republished_at", UtcDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("inbox") as batch:
        batch.drop_column("republished_at")

"""Parked sweep rows: an inbox or outbox row a sweep could not process keeps its error.

A sweep that failed on one row used to stop there, every tick, so every later row
waited behind it (issue 24, head-of-line blocking). Now the row is parked with its
error and when, the sweep goes on, and an operator lists, retries or drops it
(persistence/parked.py, ``dormant triggers parked``). Existing rows start unparked.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import UtcDateTime

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

TABLES = ("inbox", "outbox")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("parked_at", UtcDateTime(), nullable=True))
            batch.add_column(sa.Column("parked_error", sa.Text(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("parked_error")
            batch.drop_column("parked_at")

"""Delivery accounting: a trigger that kept ending its worker stops being delivered.

A trigger whose work passes the hard time limit (or is killed by a signal, or runs out
of memory) never returns, so no failure path of its task sees it; it was delivered again
for ever, holding a worker slot each time (issue 24, row 1). Only a delivery that may
follow one that died is counted, never a first one (a first delivery's writes stay at
two, tests/integration/test_write_counts.py):

- ``inbox.redeliveries``: the Client's triggers, counted by the inbox sweep in the write
  that marks its re-send, and by the worker on a delivery the broker flags as redelivered;
- ``trigger_redeliveries``: a trigger with no inbox row (a plain Celery producer's, an
  outbox follow-up), keyed by its trigger id, written only on such a redelivery and
  swept with the processed trigger ids.

Each keeps the last error known of a delivery that died (``last_error``): Celery reports
a hard time limit to the worker's main process, which writes it there, so a poison
trigger is kept with it. Existing inbox rows start at 0, with none.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import UtcDateTime

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("inbox") as batch:
        batch.add_column(
            sa.Column("redeliveries", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("last_error", sa.Text()))
    op.create_table(
        "trigger_redeliveries",
        sa.Column("trigger_id", sa.String(255), primary_key=True),
        sa.Column("redeliveries", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text()),
        sa.Column("updated_at", UtcDateTime(), nullable=False, index=True),
    )


def downgrade() -> None:
    op.drop_table("trigger_redeliveries")
    with op.batch_alter_table("inbox") as batch:
        batch.drop_column("last_error")
        batch.drop_column("redeliveries")

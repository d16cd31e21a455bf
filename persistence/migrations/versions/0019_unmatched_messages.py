"""Messages that went nowhere are recorded: a bounded, expiring list an operator reads.

A message no instance waits for and without a TTL is dropped (Zeebe's behaviour); only
a metric used to say so (issue 28). The Router now writes a row for each drop in the
transaction that drops it, and trims the table there (persistence/unmatched.py). The
``messages`` row also keeps how many processes a message reached, so a producer's
receipt can say "correlated to N" (rows written before this migration have none).

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import UtcDateTime

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def _id() -> Any:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "unmatched_messages",
        sa.Column("id", _id(), primary_key=True, autoincrement=True),
        sa.Column("message_id", sa.String(255), nullable=False, index=True),
        sa.Column("name", sa.String(255), nullable=False, index=True),
        sa.Column("correlation_key", sa.String(255)),
        sa.Column("at", UtcDateTime(), nullable=False, index=True),
    )
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("correlations", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("correlations")
    op.drop_table("unmatched_messages")

"""Delivery accounting: each Client trigger counts the deliveries that started.

A trigger whose work ends its worker (a hard time limit, a signal, memory) was
redelivered for ever, holding a worker slot each time (issue 24, row 1). The count is
written in a commit of its own before the trigger is applied, so a delivery that never
returns counts too; past ``DORMANT_MAX_DELIVERIES`` the trigger is kept as a failed
trigger classified ``PoisonTrigger`` (tasks/triggers.py). Existing rows start at 0.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("inbox") as batch:
        batch.add_column(sa.Column("deliveries", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("inbox") as batch:
        batch.drop_column("deliveries")

"""The audit trail of operator actions: who did what, from where, when, with what outcome.

Issue 27 ("An audit trail") and issue 28 (operator actions with their actor): an
operator's retry, cancel or migration used to leave no record of who did it. One
append-only table (persistence/audit.py); its retention is ``DORMANT_AUDIT_RETENTION_DAYS``
(docs/limits.md).

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import JsonDoc, UtcDateTime

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True),
        sa.Column("command_id", sa.String(64), nullable=False),
        sa.Column("at", UtcDateTime(), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(320), nullable=True),
        sa.Column("instance_id", sa.String(255), nullable=True),
        sa.Column("params", JsonDoc(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
    )
    for column in ("command_id", "at", "actor", "instance_id"):
        op.create_index(f"ix_audit_log_{column}", "audit_log", [column])


def downgrade() -> None:
    op.drop_table("audit_log")

"""Camunda Forms deployed beside processes and decisions: the ``forms`` table
(persistence/forms.py), one row per form id and version.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import UtcDateTime

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def _id() -> Any:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "forms",
        sa.Column("form_id", sa.String(255), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("checksum", sa.String(64), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("deployed_at", UtcDateTime(), nullable=False),
        sa.Column("deployment_key", _id()),
        sa.PrimaryKeyConstraint("form_id", "version", name="pk_forms"),
    )
    op.create_index("ix_forms_deployment_key", "forms", ["deployment_key"])


def downgrade() -> None:
    op.drop_index("ix_forms_deployment_key", table_name="forms")
    op.drop_table("forms")

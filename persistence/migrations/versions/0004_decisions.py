"""DMN decisions: the ``decisions`` table (one row per decision id and version).

Written out by hand, like 0001; ``tests/integration/test_store.py`` checks that the
migrated schema agrees with ``persistence/tables.py``.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import UtcDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "decisions",
        sa.Column("decision_id", sa.String(255), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255)),
        sa.Column("checksum", sa.String(64), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("dmn_checksum", sa.String(64), nullable=False),
        sa.Column("deployed_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("decision_id", "version", name="pk_decisions"),
    )


def downgrade() -> None:
    op.drop_table("decisions")

"""The ``incidents`` projection: operators query incidents without decoding every
checkpoint. Existing instances' incidents are projected from their checkpoints.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import UtcDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "incidents",
        sa.Column("id", sa.String(320), primary_key=True),
        sa.Column("instance_id", sa.String(255), nullable=False),
        sa.Column("process_key", sa.String(255), nullable=False),
        sa.Column("node_id", sa.String(255), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("cause_class", sa.String(255), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("first_at", UtcDateTime(), nullable=False),
        sa.Column("last_at", UtcDateTime(), nullable=False),
        sa.Column("retry_at", UtcDateTime()),
    )
    op.create_index("ix_incidents_instance_id", "incidents", ["instance_id"])
    op.create_index("ix_incidents_process_key", "incidents", ["process_key"])
    op.create_index("ix_incidents_state", "incidents", ["state"])
    _project_existing()


def _project_existing() -> None:
    from dormant.engine_core.checkpoint import decode
    from dormant.persistence.incident_rows import incident_rows

    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT checkpoint FROM instances")).scalars()
    table = sa.table(
        "incidents",
        *(
            sa.column(c)
            for c in (
                "id",
                "instance_id",
                "process_key",
                "node_id",
                "state",
                "cause_class",
                "attempts",
                "first_at",
                "last_at",
                "retry_at",
            )
        ),
    )
    for raw in rows:
        cp = decode(raw if isinstance(raw, dict) else json.loads(raw))
        values = incident_rows(cp)
        if values:
            conn.execute(table.insert(), values)


def downgrade() -> None:
    op.drop_table("incidents")

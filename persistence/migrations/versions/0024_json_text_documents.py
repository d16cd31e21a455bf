"""The documents written whole on every trigger are ``json``, not ``jsonb``.

``instances.checkpoint``, ``facts.details`` and ``outbox.payload`` are written whole
and read whole; no query looks inside them with an operator that needs ``jsonb``.
``json`` keeps the compact text the engine writes, about a fifth smaller than
``jsonb``'s binary form for such documents, so every trigger logs less WAL, and the
checkpoint is read back as text without being rendered again (tables.py ``JsonText``;
docs/internals.md, "The rows a step writes"). On SQLite both were text already.

On PostgreSQL the three columns are rewritten here: the tables are locked while it
runs (about six seconds per million rows on a 2-core machine); docs/guide.md,
"Upgrading", says so.

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

_COLUMNS = (("instances", "checkpoint"), ("facts", "details"), ("outbox", "payload"))


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column in _COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE json USING {column}::json")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column in _COLUMNS:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE jsonb USING {column}::jsonb")

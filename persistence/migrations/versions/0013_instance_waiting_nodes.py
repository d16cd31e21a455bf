"""The console's "waits at node" filter reads a narrow column, not the checkpoint.

Migration 0007 indexed an expression over ``instances.checkpoint`` (GIN over the live
tokens' node ids). Every trigger rewrites the checkpoint, and PostgreSQL updates a row
in place (a HOT update: no index entry written) only when no indexed column changed,
so that index made every checkpoint UPDATE a new tuple with an entry in each of the
table's ten indexes. The node ids now live in ``waiting_nodes`` (sorted, distinct,
written by the Store beside the checkpoint): a trigger whose tokens stay where they
were writes the same value, which PostgreSQL compares and keeps HOT. ``fillfactor``
leaves room on each page for the new version of a row (docs/console.md, "Measured,
and what it costs the engine").

Processed trigger ids are kept only as long as their trigger can be delivered again
(persistence/processed.py): the retention sweep reads them by ``at``, through a BRIN
index on PostgreSQL (a B-tree on SQLite).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import INSTANCES_FILLFACTOR, JsonDoc

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# 0007's expression, as it was created there.
_OLD_EXPRESSION = "jsonb_path_query_array(checkpoint, '$.tokens.*.node_id')"


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.add_column(
        "instances",
        sa.Column("waiting_nodes", JsonDoc(), nullable=False, server_default=sa.text("'[]'")),
    )
    if postgres:
        op.execute("DROP INDEX ix_instances_waiting_nodes")
        op.execute(
            "UPDATE instances SET waiting_nodes = COALESCE((SELECT jsonb_agg(DISTINCT n) "
            "FROM jsonb_path_query(checkpoint, '$.tokens.*.node_id') AS n), '[]'::jsonb)"
        )
        op.execute("CREATE INDEX ix_instances_waiting_nodes ON instances USING gin (waiting_nodes)")
        op.execute(f"ALTER TABLE instances SET (fillfactor = {INSTANCES_FILLFACTOR})")
    else:
        op.execute(
            "UPDATE instances SET waiting_nodes = COALESCE((SELECT json_group_array(DISTINCT "
            "json_extract(t.value, '$.node_id')) FROM json_each(instances.checkpoint, "
            "'$.tokens') AS t), '[]')"
        )
        # SQLite's filter scans (persistence/console_queries.py); the index only keeps
        # both schemas alike.
        op.execute("DROP INDEX IF EXISTS ix_instances_waiting_nodes")
        op.create_index("ix_instances_waiting_nodes", "instances", ["waiting_nodes"])

    op.create_index(
        "ix_processed_triggers_at", "processed_triggers", ["at"], postgresql_using="brin"
    )


def downgrade() -> None:
    op.drop_index("ix_processed_triggers_at", "processed_triggers")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE instances RESET (fillfactor)")
        op.execute("DROP INDEX ix_instances_waiting_nodes")
        op.execute(
            f"CREATE INDEX ix_instances_waiting_nodes ON instances USING gin ({_OLD_EXPRESSION})"
        )
    else:
        op.drop_index("ix_instances_waiting_nodes", "instances")
    op.drop_column("instances", "waiting_nodes")

"""Indexes for the console's lists: newest first, filtered, paginated by keyset.

Each list is ``ORDER BY created_at DESC, id DESC`` behind an optional equality filter,
so each filter gets a (filter..., created_at, id) index and a page is an index range
read, however many instances there are. On PostgreSQL a GIN index over the node ids of
the live tokens (a JSONB path of the checkpoint) answers "a token waits at node X"
without reading every checkpoint; SQLite (the embedded default) scans instead.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# Kept in step with persistence/console_queries.py, which queries this very expression.
WAITING_NODES = "jsonb_path_query_array(checkpoint, '$.tokens.*.node_id')"


def upgrade() -> None:
    op.create_index("ix_instances_created_at_id", "instances", ["created_at", "id"])
    op.create_index(
        "ix_instances_key_version_created_at_id",
        "instances",
        ["key", "version", "created_at", "id"],
    )
    op.create_index(
        "ix_instances_status_created_at_id", "instances", ["status", "created_at", "id"]
    )
    op.create_index(
        "ix_instances_business_key_created_at_id", "instances", ["business_key", "created_at", "id"]
    )
    op.create_index(
        "ix_incidents_state_process_key_node_id", "incidents", ["state", "process_key", "node_id"]
    )
    op.create_index("ix_incidents_last_at_id", "incidents", ["last_at", "id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"CREATE INDEX ix_instances_waiting_nodes ON instances USING gin ({WAITING_NODES})"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX ix_instances_waiting_nodes")
    op.drop_index("ix_incidents_last_at_id", "incidents")
    op.drop_index("ix_incidents_state_process_key_node_id", "incidents")
    op.drop_index("ix_instances_business_key_created_at_id", "instances")
    op.drop_index("ix_instances_status_created_at_id", "instances")
    op.drop_index("ix_instances_key_version_created_at_id", "instances")
    op.drop_index("ix_instances_created_at_id", "instances")

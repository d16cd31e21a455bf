"""The incident projection: rows derived from a checkpoint's incidents."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, delete, insert

from engine_core.checkpoint import Checkpoint
from persistence.tables import incidents

__all__ = ["incident_rows", "sync_incidents"]


def incident_rows(cp: Checkpoint) -> list[dict[str, Any]]:
    return [
        {
            "id": i.id,
            "instance_id": cp.instance_id,
            "process_key": cp.process_key,
            "node_id": i.node_id,
            "state": i.state.value,
            "cause_class": i.cause_class,
            "attempts": i.attempts,
            "first_at": i.first_at,
            "last_at": i.last_at,
            "retry_at": i.retry_at,
        }
        for i in cp.incidents.values()
    ]


def sync_incidents(conn: Connection, old: Checkpoint, new: Checkpoint) -> None:
    """Rewrite the instance's rows when its incidents changed (they are few)."""
    if old.incidents == new.incidents:
        return
    conn.execute(delete(incidents).where(incidents.c.instance_id == new.instance_id))
    rows = incident_rows(new)
    if rows:
        conn.execute(insert(incidents), rows)

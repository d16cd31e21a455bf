"""The incident projection: rows derived from a checkpoint's incidents."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete

from dormant.engine_core.checkpoint import Checkpoint, HoldState
from dormant.engine_core.tenants import DEFAULT_TENANT
from dormant.persistence.tables import incidents
from dormant.persistence.writes import Writes

__all__ = ["incident_rows", "sync_incidents"]


def incident_rows(cp: Checkpoint, tenant: str = DEFAULT_TENANT) -> list[dict[str, Any]]:
    return [
        {
            "tenant_id": tenant,
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


def sync_incidents(
    writes: Writes, old: Checkpoint | HoldState, new: Checkpoint, tenant: str = DEFAULT_TENANT
) -> None:
    """Rewrite the instance's rows when its incidents changed (they are few).

    The delete is sent before the insert that may re-use its keys (``Writes.flush``):
    one statement's CTEs would not see each other's rows."""
    if old.incidents == new.incidents:
        return
    writes.add(delete(incidents).where(incidents.c.instance_id == new.instance_id))
    rows = incident_rows(new, tenant)
    if rows:
        writes.flush()
        writes.add_rows(incidents, rows)

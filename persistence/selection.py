"""Which instances or incidents a bulk operation acts on: ids, or a filter.

A filter is data (``Selector``), stored with its batch so the batch row says what it
was asked to do. Selecting reads the projections (``instances``, ``incidents``); only
``node`` needs the checkpoints, and reads just the candidates the other criteria left.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Connection, select

from dormant.engine_core.errors import InvalidOperation
from dormant.persistence.instance_rows import checkpoint_of
from dormant.persistence.tables import ACTIVE_STATUSES, OPEN_INCIDENT_STATES, instances
from dormant.persistence.tables import incidents as incident_table

__all__ = [
    "INCIDENT_OPERATIONS",
    "INSTANCE_OPERATIONS",
    "Selector",
    "Target",
    "select_targets",
]

INCIDENT_OPERATIONS = ("incident_retry", "incident_resolve", "incident_drop")
INSTANCE_OPERATIONS = ("cancel", "suspend", "resume", "migrate", "set_variables")


class Selector(BaseModel):
    """Explicit ``ids``, or a filter that must name the process (``key``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ids: list[str] = Field(default_factory=list)
    key: str | None = None
    version: int | None = None
    node: str | None = None
    # Instances only.
    status: str | None = None
    business_key_like: str | None = None
    started_before: datetime | None = None
    started_after: datetime | None = None
    # Incidents only.
    cause_class: str | None = None
    # Only this tenant's (docs/tenants.md); with ``ids``, an id of another tenant is
    # refused at its item, as an unknown one.
    tenant: str | None = None

    def check(self, operation: str) -> None:
        if self.ids and self.key is not None:
            raise InvalidOperation("give ids or a filter (--process ...), not both")
        if not self.ids and self.key is None:
            raise InvalidOperation("nothing selected: give ids, or --process KEY with filters")
        on_incidents = operation in INCIDENT_OPERATIONS
        wrong = (
            ("status", "business_key_like", "started_before", "started_after")
            if on_incidents
            else ("cause_class",)
        )
        given = [name for name in wrong if getattr(self, name) is not None]
        if given:
            what = "incidents" if on_incidents else "instances"
            raise InvalidOperation(f"{', '.join(given)} do not filter {what}")


class Target(BaseModel):
    model_config = ConfigDict(frozen=True)

    target_id: str
    instance_id: str | None


def select_targets(conn: Connection, operation: str, selector: Selector) -> list[Target]:
    """The targets, in a stable order (ids as given; else oldest first)."""
    selector.check(operation)
    if operation in INCIDENT_OPERATIONS:
        return _incidents(conn, selector)
    if operation not in INSTANCE_OPERATIONS:
        raise InvalidOperation(f"no bulk operation {operation!r}")
    return _instances(conn, selector)


def _incidents(conn: Connection, s: Selector) -> list[Target]:
    q = select(incident_table.c.id, incident_table.c.instance_id)
    if s.tenant is not None:
        q = q.where(incident_table.c.tenant_id == s.tenant)
    if s.ids:
        rows = {r.id: r.instance_id for r in conn.execute(q.where(incident_table.c.id.in_(s.ids)))}
        return [Target(target_id=i, instance_id=rows.get(i)) for i in dict.fromkeys(s.ids)]
    q = q.where(
        incident_table.c.process_key == s.key, incident_table.c.state.in_(OPEN_INCIDENT_STATES)
    )
    if s.version is not None:
        q = q.join(instances, instances.c.id == incident_table.c.instance_id).where(
            instances.c.version == s.version
        )
    if s.node is not None:
        q = q.where(incident_table.c.node_id == s.node)
    if s.cause_class is not None:
        q = q.where(incident_table.c.cause_class == s.cause_class)
    q = q.order_by(incident_table.c.first_at, incident_table.c.id)
    return [Target(target_id=r.id, instance_id=r.instance_id) for r in conn.execute(q)]


def _instances(conn: Connection, s: Selector) -> list[Target]:
    if s.ids and s.tenant is not None:
        ids = list(dict.fromkeys(s.ids))
        mine = set(
            conn.execute(
                select(instances.c.id).where(
                    instances.c.id.in_(ids), instances.c.tenant_id == s.tenant
                )
            ).scalars()
        )
        return [Target(target_id=i, instance_id=i if i in mine else None) for i in ids]
    if s.ids:
        return [Target(target_id=i, instance_id=i) for i in dict.fromkeys(s.ids)]
    q = select(instances.c.id).where(instances.c.key == s.key)
    if s.tenant is not None:
        q = q.where(instances.c.tenant_id == s.tenant)
    if s.status is not None:
        q = q.where(instances.c.status == s.status)
    else:
        q = q.where(instances.c.status.in_(ACTIVE_STATUSES))
    if s.version is not None:
        q = q.where(instances.c.version == s.version)
    if s.business_key_like is not None:
        q = q.where(instances.c.business_key.like(s.business_key_like))
    if s.started_before is not None:
        q = q.where(instances.c.created_at < s.started_before)
    if s.started_after is not None:
        q = q.where(instances.c.created_at > s.started_after)
    q = q.order_by(instances.c.created_at, instances.c.id)
    if s.node is None:
        return [Target(target_id=i, instance_id=i) for i in conn.execute(q).scalars()]
    rows = conn.execute(q.add_columns(instances.c.key, instances.c.checkpoint))
    return [Target(target_id=r.id, instance_id=r.id) for r in rows if _at_node(r, s.node)]


def _at_node(row: Any, node: str) -> bool:
    try:
        cp = checkpoint_of(row)
    except Exception:  # an unreadable checkpoint is not "at" any node; it has its own incident
        return False
    return any(t.node_id == node for t in cp.tokens.values())

"""The console's reads: filtered lists paginated on the database, and per-page lookups.

Every list is ordered newest first by ``(created_at, id)`` (instances) or
``(last_at, id)`` (incidents) and paginated by keyset: the next page starts strictly
after the last row shown, so page 1,000 costs what page 1 costs and a row inserted
meanwhile never shifts a page. Migrations 0007 and 0013 hold the indexes each filter needs. The
list rows never carry a checkpoint: a page of 50 reads 50 narrow index-ordered rows.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Select,
    TextClause,
    and_,
    func,
    or_,
    select,
    text,
    tuple_,
)

from dormant.engine_core.checkpoint import Checkpoint, decode
from dormant.engine_core.errors import InvalidOperation, UnknownInstance
from dormant.engine_core.views import FactView
from dormant.persistence.db import read_only
from dormant.persistence.fact_rows import fact_views
from dormant.persistence.forms import latest_form
from dormant.persistence.tables import OPEN_INCIDENT_STATES, definitions, facts, instances
from dormant.persistence.tables import incidents as incident_table

__all__ = [
    "ConsoleQueries",
    "IncidentFilter",
    "IncidentRow",
    "InstanceFilter",
    "InstanceRow",
    "Page",
    "ProcessSummary",
]

T = TypeVar("T")

# ``waiting_nodes`` (the live tokens' node ids, written with each checkpoint) under its
# GIN index on PostgreSQL (migration 0013): containment is what the index answers.
_PG_TOKEN_NODES = "instances.waiting_nodes @> CAST(:waiting_node AS jsonb)"
_INSTANCE_COLUMNS = tuple(
    instances.c[n]
    for n in (
        "id", "key", "version", "status", "business_key", "created_at", "updated_at",
        "parent_id",
    )
)  # fmt: skip
_INCIDENT_COLUMNS = tuple(
    incident_table.c[n]
    for n in (
        "id", "instance_id", "process_key", "node_id", "state", "cause_class", "attempts",
        "first_at", "last_at", "retry_at",
    )
)  # fmt: skip
_SQLITE_TOKEN_NODES = (
    "EXISTS (SELECT 1 FROM json_each(instances.waiting_nodes) AS n WHERE n.value = :waiting_node)"
)


@dataclass(frozen=True, slots=True)
class InstanceFilter:
    key: str | None = None
    version: int | None = None
    status: str | None = None
    business_key: str | None = None
    has_open_incident: bool = False
    waiting_at: str | None = None
    started_from: datetime | None = None
    started_to: datetime | None = None


@dataclass(frozen=True, slots=True)
class IncidentFilter:
    key: str | None = None
    node_id: str | None = None
    cause_class: str | None = None
    state: str | None = None
    instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class InstanceRow:
    id: str
    key: str
    version: int
    status: str
    business_key: str | None
    created_at: datetime
    updated_at: datetime
    parent_id: str | None


@dataclass(frozen=True, slots=True)
class IncidentRow:
    id: str
    instance_id: str
    process_key: str
    node_id: str
    state: str
    cause_class: str
    attempts: int
    first_at: datetime
    last_at: datetime
    retry_at: datetime | None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    rows: list[T]
    # Opaque cursor of the page after this one; None on the last page.
    next_cursor: str | None


@dataclass(slots=True)
class ProcessSummary:
    key: str
    version: int
    deployed_at: datetime
    counts: dict[str, int] = field(default_factory=dict)


def encode_cursor(at: datetime, row_id: str) -> str:
    raw = json.dumps([at.isoformat(), row_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """A cursor back to its (timestamp, id); anything else is the caller's mistake."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, row_id = json.loads(raw)
        return datetime.fromisoformat(at), str(row_id)
    except (ValueError, TypeError) as exc:
        raise InvalidOperation(f"page cursor {cursor[:40]!r} is not one this console made") from exc


class ConsoleQueries:
    """Reads on the Store's engine, each in its own read-only transaction."""

    # Deployed versions never change, so their XML is cached for good; the key list (a
    # filter's choices) may be this many seconds behind a deploy.
    KEYS_FOR_SECONDS = 10.0

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"
        self._sources: dict[tuple[str, int], str] = {}
        self._keys: tuple[float, list[str]] = (-1e9, [])

    def _read(self) -> AbstractContextManager[Connection]:
        """Each read is one statement (or two that need not agree to the row)."""
        return read_only(self.engine)

    # -- processes ----------------------------------------------------------------

    def processes(self) -> list[ProcessSummary]:
        """Every deployed (key, version) with its instances counted by status."""
        with self._read() as conn:
            out = {
                (r.key, r.version): ProcessSummary(r.key, r.version, r.deployed_at)
                for r in conn.execute(
                    select(
                        definitions.c.key, definitions.c.version, definitions.c.deployed_at
                    ).order_by(definitions.c.key, definitions.c.version.desc())
                )
            }
            counted = conn.execute(
                select(
                    instances.c.key, instances.c.version, instances.c.status, func.count()
                ).group_by(instances.c.key, instances.c.version, instances.c.status)
            )
            for key, version, status, n in counted:
                summary = out.get((key, version))
                if summary is not None:
                    summary.counts[status] = int(n)
        return list(out.values())

    def open_incidents_by_node(self) -> dict[str, dict[str, int]]:
        """process key → node id → open (or retry-scheduled) incidents there."""
        t = incident_table
        out: dict[str, dict[str, int]] = {}
        with self._read() as conn:
            for key, node, n in conn.execute(
                select(t.c.process_key, t.c.node_id, func.count())
                .where(t.c.state.in_(OPEN_INCIDENT_STATES))
                .group_by(t.c.process_key, t.c.node_id)
            ):
                out.setdefault(key, {})[node] = int(n)
        return out

    def process_keys(self) -> list[str]:
        """Every deployed process key, for the filters' choices (definitions only)."""
        at, keys = self._keys
        if time.monotonic() - at < self.KEYS_FOR_SECONDS:
            return keys
        with self._read() as conn:
            keys = [
                str(k)
                for k in conn.execute(
                    select(definitions.c.key).distinct().order_by(definitions.c.key)
                ).scalars()
            ]
        self._keys = (time.monotonic(), keys)
        return keys

    def instance_processes(self, ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        """Each instance's process key and version (the tasklist's process column)."""
        wanted = sorted(set(ids))
        found: dict[str, tuple[str, int]] = {}
        with self._read() as conn:
            for start in range(0, len(wanted), 500):
                rows = conn.execute(
                    select(instances.c.id, instances.c.key, instances.c.version).where(
                        instances.c.id.in_(wanted[start : start + 500])
                    )
                )
                found.update({r.id: (r.key, r.version) for r in rows})
        return found

    def form_source(self, form_id: str) -> tuple[int, str] | None:
        """The latest deployed version of a Camunda Form and its JSON (the tasklist
        draws it for a task linked by ``formId``)."""
        with self._read() as conn:
            found = latest_form(conn, form_id)
        return None if found is None else (found[0], found[2])

    def definition_source(self, key: str, version: int) -> str | None:
        found = self._sources.get((key, version))
        if found is None:
            with self._read() as conn:
                raw = conn.execute(
                    select(definitions.c.source).where(
                        definitions.c.key == key, definitions.c.version == version
                    )
                ).scalar()
            if raw is None:
                return None
            if len(self._sources) > 256:
                self._sources.clear()
            found = self._sources[(key, version)] = str(raw)
        return found

    def instance_bundle(
        self, instance_id: str
    ) -> tuple[Checkpoint, list[FactView], list[InstanceRow]]:
        """The instance page's rows on one connection: checkpoint, facts, children.

        The Store's ``checkpoint`` and ``history`` read the same rows, one read
        transaction each; here they share one autocommit connection, a third of the
        round trips for a page polled every few seconds."""
        c = instances.c
        with self._read() as conn:
            raw = conn.execute(select(c.checkpoint).where(c.id == instance_id)).scalar()
            if raw is None:
                raise UnknownInstance(f"no instance has id {instance_id!r}")
            history = fact_views(
                conn.execute(
                    select(facts).where(facts.c.instance_id == instance_id).order_by(facts.c.id)
                )
            )
            children = [
                InstanceRow(**r._mapping)
                for r in conn.execute(
                    select(*_INSTANCE_COLUMNS)
                    .where(c.parent_id == instance_id)
                    .order_by(c.created_at, c.id)
                    .limit(500)
                )
            ]
        return decode(raw), history, children

    # -- instances ----------------------------------------------------------------

    def instance_query(
        self, f: InstanceFilter, cursor: str | None = None, limit: int = 50
    ) -> Select[Any]:
        """The list's one statement (``limit + 1`` rows: the extra one says "more")."""
        c = instances.c
        where: list[ColumnElement[bool] | TextClause] = []
        for column, value in (
            (c.key, f.key),
            (c.version, f.version),
            (c.status, f.status),
            (c.business_key, f.business_key),
        ):
            if value is not None:
                where.append(column == value)
        if f.started_from is not None:
            where.append(c.created_at >= f.started_from)
        if f.started_to is not None:
            where.append(c.created_at < f.started_to)
        if f.has_open_incident:
            # The engine keeps a running instance at 'active_incidents' exactly while one
            # of its incidents is open (or retry-scheduled), so the status index answers
            # it; an ended instance has nothing left to act on.
            where.append(c.status == "active_incidents")
        if f.waiting_at is not None:
            if self.is_postgres:
                where.append(
                    text(_PG_TOKEN_NODES).bindparams(waiting_node=json.dumps([f.waiting_at]))
                )
            else:
                where.append(text(_SQLITE_TOKEN_NODES).bindparams(waiting_node=f.waiting_at))
        if cursor is not None:
            at, last_id = decode_cursor(cursor)
            where.append(tuple_(c.created_at, c.id) < tuple_(at, last_id))
        return (
            select(*_INSTANCE_COLUMNS)
            .where(*where)
            .order_by(c.created_at.desc(), c.id.desc())
            .limit(limit + 1)
        )

    def instance_page(
        self, f: InstanceFilter, cursor: str | None = None, limit: int = 50
    ) -> Page[InstanceRow]:
        with self._read() as conn:
            rows = [
                InstanceRow(**r._mapping)
                for r in conn.execute(self.instance_query(f, cursor, limit))
            ]
        return _page(rows, limit, lambda r: (r.created_at, r.id))

    # -- incidents ----------------------------------------------------------------

    def incident_page(
        self, f: IncidentFilter, cursor: str | None = None, limit: int = 50
    ) -> Page[IncidentRow]:
        t = incident_table.c
        where: list[ColumnElement[bool]] = []
        for column, value in (
            (t.process_key, f.key),
            (t.node_id, f.node_id),
            (t.cause_class, f.cause_class),
            (t.instance_id, f.instance_id),
        ):
            if value is not None:
                where.append(column == value)
        if f.state == "unresolved":
            where.append(t.state.in_(OPEN_INCIDENT_STATES))
        elif f.state is not None:
            where.append(t.state == f.state)
        if cursor is not None:
            at, last_id = decode_cursor(cursor)
            where.append(or_(t.last_at < at, and_(t.last_at == at, t.id < last_id)))
        q = (
            select(*_INCIDENT_COLUMNS)
            .where(*where)
            .order_by(t.last_at.desc(), t.id.desc())
            .limit(limit + 1)
        )
        with self._read() as conn:
            rows = [IncidentRow(**r._mapping) for r in conn.execute(q)]
        return _page(rows, limit, lambda r: (r.last_at, r.id))

    def cause_classes(self) -> list[str]:
        """The distinct cause classes on record, for the incident filter's choices."""
        with self._read() as conn:
            return [
                str(v)
                for v in conn.execute(
                    select(incident_table.c.cause_class)
                    .distinct()
                    .order_by(incident_table.c.cause_class)
                    .limit(200)
                ).scalars()
            ]


def _page(rows: Sequence[T], limit: int, key: Any) -> Page[T]:
    """The first ``limit`` rows; a cursor after the last when one more row was there."""
    if len(rows) <= limit:
        return Page(list(rows), None)
    kept = list(rows[:limit])
    return Page(kept, encode_cursor(*key(kept[-1])))

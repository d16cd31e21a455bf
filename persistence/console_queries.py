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
from collections.abc import Iterable, Sequence
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

from dormant.engine_core.checkpoint import Checkpoint, InstanceStatus
from dormant.engine_core.errors import InvalidOperation, UnknownInstance
from dormant.engine_core.views import FactView
from dormant.persistence.db import read_only
from dormant.persistence.fact_rows import fact_views
from dormant.persistence.forms import latest_form
from dormant.persistence.instance_rows import checkpoint_of
from dormant.persistence.tables import (
    INSTANCES_WITH_TOKENS,
    OPEN_INCIDENT_STATES,
    definitions,
    facts,
    instances,
)
from dormant.persistence.tables import incidents as incident_table

__all__ = [
    "ConsoleQueries",
    "IncidentFilter",
    "IncidentRow",
    "InstanceFilter",
    "InstanceRow",
    "NodeCounts",
    "Page",
    "ProcessSummary",
]

T = TypeVar("T")

# ``waiting_nodes`` (the live tokens' node ids, written with each checkpoint) under its
# GIN index on PostgreSQL (migration 0013): containment is what the index answers, and
# the index's own predicate (migration 0023) is spelled out so the planner may use it.
_PG_TOKEN_NODES = (
    "instances.waiting_nodes @> CAST(:waiting_node AS jsonb) "
    f"AND instances.{INSTANCES_WITH_TOKENS}::jsonb"
)
_INSTANCE_COLUMNS = tuple(
    instances.c[n]
    for n in (
        "id", "key", "version", "status", "business_key", "created_at", "updated_at",
        "parent_id", "tenant_id",
    )
)  # fmt: skip
_INCIDENT_COLUMNS = tuple(
    incident_table.c[n]
    for n in (
        "id", "instance_id", "process_key", "node_id", "state", "cause_class", "attempts",
        "first_at", "last_at", "retry_at", "tenant_id",
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
    tenant: str | None = None
    # The tenants the reader may see (None: every one; docs/tenants.md "Authorizations").
    tenants: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class IncidentFilter:
    key: str | None = None
    node_id: str | None = None
    cause_class: str | None = None
    state: str | None = None
    instance_id: str | None = None
    tenant: str | None = None
    tenants: tuple[str, ...] | None = None


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
    tenant_id: str = "<default>"


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
    tenant_id: str = "<default>"


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


@dataclass(slots=True)
class NodeCount:
    """One element's numbers on the process page's diagram."""

    waiting: int = 0
    incidents: int = 0
    passed: int = 0

    def as_json(self) -> dict[str, int]:
        return {"waiting": self.waiting, "incidents": self.incidents, "passed": self.passed}


@dataclass(slots=True)
class NodeCounts:
    """Per element of one process version, as Operate draws them (docs/console.md):
    ``waiting`` — unended instances with a live token at it (of at most
    ``WAITING_SCANNED`` instances, the most recently started); ``incidents`` — open
    incidents at it (every one); ``passed`` — of the ``PASSED_SAMPLED`` most recently
    started instances, how many record the element reached and left (a fact names it
    and no live token of theirs is at it; a withdrawn token's element does not count).
    ``sampled``/``scanned``: how many instances each bound let in."""

    nodes: dict[str, NodeCount] = field(default_factory=dict)
    scanned: int = 0
    sampled: int = 0

    def at(self, node_id: str) -> NodeCount:
        return self.nodes.setdefault(node_id, NodeCount())


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

    # The process page's bounds (docs/limits.md): unended instances scanned for their
    # live tokens, and the recent instances whose facts are read for "passed".
    WAITING_SCANNED = 10_000
    PASSED_SAMPLED = 500

    def node_counts(self, key: str, version: int, node_keys: Sequence[str]) -> NodeCounts:
        """Per-element counts of ``key`` v``version`` (``NodeCounts``), in three
        bounded reads: live tokens from ``instances.waiting_nodes`` over the
        (key, version, created_at) index, open incidents grouped over the (state,
        process key, node) index, and the facts of the most recent instances by
        ``facts.instance_id``. ``node_keys``: the fact details that name an element
        (the instance page's, tasks/console/presenters.py)."""
        out = NodeCounts()
        ended = [s.value for s in InstanceStatus if s.ended]
        t, i = instances, incident_table
        recent = select(instances.c.id, instances.c.status, instances.c.waiting_nodes).where(
            instances.c.key == key, instances.c.version == version
        )
        newest = (instances.c.created_at.desc(), instances.c.id.desc())
        with self._read() as conn:
            live_rows = conn.execute(
                recent.where(t.c.status.notin_(ended)).order_by(*newest).limit(self.WAITING_SCANNED)
            ).all()
            for row in live_rows:
                for node in set(_nodes(row.waiting_nodes)):
                    out.at(node).waiting += 1
            out.scanned = len(live_rows)
            for node, n in conn.execute(
                select(i.c.node_id, func.count())
                .select_from(i.join(t, t.c.id == i.c.instance_id))
                .where(
                    i.c.state.in_(OPEN_INCIDENT_STATES),
                    i.c.process_key == key,
                    t.c.version == version,
                )
                .group_by(i.c.node_id)
            ):
                out.at(str(node)).incidents = int(n)
            sample = conn.execute(recent.order_by(*newest).limit(self.PASSED_SAMPLED)).all()
            out.sampled = len(sample)
            live = {r.id: set(_nodes(r.waiting_nodes)) for r in sample}
            reached: dict[str, set[str]] = {}
            ids = sorted(live)
            for start in range(0, len(ids), 250):
                rows = conn.execute(
                    select(facts.c.instance_id, facts.c.at, facts.c.kind)
                    .add_columns(facts.c.details, facts.c.revision)
                    .where(facts.c.instance_id.in_(ids[start : start + 250]))
                    .order_by(facts.c.id)
                ).all()
                by_instance: dict[str, list[Any]] = {}
                for r in rows:
                    by_instance.setdefault(r.instance_id, []).append(r)
                for instance_id, its_rows in by_instance.items():
                    done = reached.setdefault(instance_id, set())
                    for fact in fact_views(its_rows):
                        for name in node_keys:
                            named = fact.details.get(name)
                            if isinstance(named, str):
                                # A node's last word decides, as on the instance page.
                                if fact.kind == "Withdrawn":
                                    done.discard(named)
                                else:
                                    done.add(named)
        for instance_id, nodes in reached.items():
            for node in nodes - live.get(instance_id, set()):
                out.at(node).passed += 1
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

    def instance_tenants(self, ids: Iterable[str]) -> dict[str, str]:
        """Each known instance's tenant (the audit page's filter), in one statement."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        c = instances.c
        with self._read() as conn:
            rows = conn.execute(select(c.id, c.tenant_id).where(c.id.in_(wanted)))
            return {str(r.id): str(r.tenant_id) for r in rows}

    def instance_tenant(self, instance_id: str) -> str:
        """An instance's tenant (``UnknownInstance`` if there is none): what a page
        checks the reader's grants against before it reads anything else."""
        with self._read() as conn:
            found = conn.execute(
                select(instances.c.tenant_id).where(instances.c.id == instance_id)
            ).scalar()
        if found is None:
            raise UnknownInstance(f"no instance has id {instance_id!r}")
        return str(found)

    def instance_bundle(
        self, instance_id: str
    ) -> tuple[Checkpoint, list[FactView], list[InstanceRow]]:
        """The instance page's rows on one connection: checkpoint, facts, children.

        The Store's ``checkpoint`` and ``history`` read the same rows, one read
        transaction each; here they share one autocommit connection, a third of the
        round trips for a page polled every few seconds."""
        c = instances.c
        with self._read() as conn:
            row = conn.execute(select(c.id, c.key, c.checkpoint).where(c.id == instance_id)).first()
            if row is None:
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
        return checkpoint_of(row), history, children

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
            (c.tenant_id, f.tenant),
        ):
            if value is not None:
                where.append(column == value)
        if f.tenants is not None:
            where.append(c.tenant_id.in_(f.tenants))
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
            (t.tenant_id, f.tenant),
        ):
            if value is not None:
                where.append(column == value)
        if f.tenants is not None:
            where.append(t.tenant_id.in_(f.tenants))
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


def _nodes(document: Any) -> list[str]:
    """``waiting_nodes`` as read: a list of node ids (JSON text on some drivers)."""
    value = json.loads(document) if isinstance(document, str) else document
    return [str(n) for n in value] if isinstance(value, list) else []


def _page(rows: Sequence[T], limit: int, key: Any) -> Page[T]:
    """The first ``limit`` rows; a cursor after the last when one more row was there."""
    if len(rows) <= limit:
        return Page(list(rows), None)
    kept = list(rows[:limit])
    return Page(kept, encode_cursor(*key(kept[-1])))

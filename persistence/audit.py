"""The audit trail of operator actions (issue 27 "An audit trail", issue 28).

Every operator action (a retry, resolve or drop of an incident, a cancel, suspend,
resume, variables set, modification, migration, batch, job-type pause or resume,
failed-trigger retry or drop, deploy) is recorded here: who (``actor``), from where
(``source``: ``cli``, ``console``, ``api``, ``client``, or ``celery`` for a management
task sent by hand), when, on what (``target``, ``instance_id``), the operation and its
parameters, and the outcome.

Append-only: nothing in dormant updates a row, and the only delete is the retention
sweep (``sweep``; docs/limits.md). An action is one ``command_id`` with one row when it
is accepted (``accepted``, committed with the Client's inbox row: ``inbox.record_many``'s
``also``) and one row with its outcome (``applied`` or ``refused``), the second written
by the worker in the same transaction as the action's effect on the instance
(``Store.apply``'s ``also``) or, for a refusal, in its own. An action done on the spot
(a job type paused, a failed trigger dropped, a deploy, a batch created) has one row,
``done``, inserted by the write that does the action, in its transaction (``done_row``).

A variable's value is never written: ``hide`` keeps its name and replaces its value
(docs/internals.md: no value in the history; the same holds here).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, Select, delete, select

from dormant.engine_core.errors import InvalidOperation
from dormant.engine_core.states import AUDIT_OUTCOMES, AUDIT_SOURCES
from dormant.persistence.tables import audit_log

__all__ = [
    "HIDDEN",
    "OUTCOMES",
    "SOURCES",
    "UNKNOWN_ACTOR",
    "AuditEntry",
    "AuditFilter",
    "accept",
    "by_hand",
    "command",
    "done_row",
    "entries",
    "export",
    "hide",
    "new_command_id",
    "outcome_row",
    "record",
    "row",
    "sweep",
]

SOURCES = AUDIT_SOURCES
# The actor of a management task sent by hand (Flower, ``send_task``): nobody is known.
UNKNOWN_ACTOR = "(unknown)"
OUTCOMES = AUDIT_OUTCOMES
HIDDEN = "***"
# Parameters that hold variables by name -> value (hidden), and the longest detail kept.
_VALUE_PARAMS = frozenset({"variables"})
DETAIL_CHARS = 2000
SWEEP_SLICE = 1000
# How many rows an export reads at a time.
EXPORT_PAGE = 1000


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    command_id: str
    at: datetime
    actor: str
    source: str
    action: str
    target: str | None
    instance_id: str | None
    params: dict[str, Any]
    outcome: str
    detail: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "command_id": self.command_id,
            "at": self.at.isoformat(),
            "actor": self.actor,
            "source": self.source,
            "action": self.action,
            "target": self.target,
            "instance_id": self.instance_id,
            "params": self.params,
            "outcome": self.outcome,
            "detail": self.detail,
        }


def new_command_id() -> str:
    return uuid.uuid4().hex


def hide(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with every variable's value replaced by ``***`` (its name kept)."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        if name in _VALUE_PARAMS and isinstance(value, Mapping):
            out[name] = dict.fromkeys(sorted(value), HIDDEN)
        else:
            out[name] = value
    return out


def row(
    *,
    command_id: str,
    at: datetime,
    actor: str,
    source: str,
    action: str,
    outcome: str,
    target: str | None = None,
    instance_id: str | None = None,
    params: Mapping[str, Any] | None = None,
    detail: str | None = None,
) -> dict[str, Any]:
    """One row to insert, its parameters' values hidden; for ``Writes.add_rows`` (the
    worker's outcome, in the action's own transaction) and ``record``."""
    return {
        "command_id": command_id,
        "at": at,
        "actor": actor,
        "source": source,
        "action": action,
        "target": target,
        "instance_id": instance_id,
        "params": hide(params or {}),
        "outcome": outcome,
        "detail": None if detail is None else detail[:DETAIL_CHARS],
    }


def record(bind: Engine | Connection, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` (from ``row``): in ``bind``'s transaction when it is a connection,
    else in one of their own."""
    if not rows:
        return
    if isinstance(bind, Connection):
        bind.execute(audit_log.insert(), rows)
        return
    with bind.begin() as conn:
        conn.execute(audit_log.insert(), rows)


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """What ``entries`` and ``export`` select: every field given must match (the CLI's
    and the console's filters, docs/audit.md); ``since`` inclusive, ``until`` exclusive."""

    actor: str | None = None
    source: str | None = None
    action: str | None = None
    instance_id: str | None = None
    outcome: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        if self.source is not None and self.source not in SOURCES:
            raise InvalidOperation(
                f"unknown audit source {self.source!r}; one of {', '.join(SOURCES)}"
            )
        if self.outcome is not None and self.outcome not in OUTCOMES:
            raise InvalidOperation(
                f"unknown audit outcome {self.outcome!r}; one of {', '.join(OUTCOMES)}"
            )

    def where(self, query: Select[Any]) -> Select[Any]:
        c = audit_log.c
        for column, value in (
            (c.actor, self.actor),
            (c.source, self.source),
            (c.action, self.action),
            (c.instance_id, self.instance_id),
            (c.outcome, self.outcome),
        ):
            if value is not None:
                query = query.where(column == value)
        if self.since is not None:
            query = query.where(c.at >= self.since)
        if self.until is not None:
            query = query.where(c.at < self.until)
        return query


def _entry(r: Any) -> AuditEntry:
    return AuditEntry(
        int(r.id),
        r.command_id,
        r.at,
        r.actor,
        r.source,
        r.action,
        r.target,
        r.instance_id,
        dict(r.params or {}),
        r.outcome,
        r.detail,
    )


def entries(
    engine: Engine,
    *,
    actor: str | None = None,
    instance_id: str | None = None,
    since: datetime | None = None,
    limit: int = 200,
    where: AuditFilter | None = None,
) -> list[AuditEntry]:
    """The newest rows first, filtered (``where``, or the older keywords alone)."""
    if where is None:
        where = AuditFilter(actor=actor, instance_id=instance_id, since=since)
    query = where.where(select(audit_log)).order_by(audit_log.c.id.desc()).limit(limit)
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    return [_entry(r) for r in rows]


def export(engine: Engine, where: AuditFilter, page: int = EXPORT_PAGE) -> Iterator[AuditEntry]:
    """Every row ``where`` selects, oldest first, read ``page`` rows at a time (by id,
    each page its own short read: an export of a year holds no transaction open and no
    more than a page in memory). No cap: the retention bounds it (docs/audit.md)."""
    after = 0
    while True:
        query = where.where(select(audit_log)).where(audit_log.c.id > after)
        with engine.connect() as conn:
            rows = conn.execute(query.order_by(audit_log.c.id).limit(page)).all()
        for r in rows:
            yield _entry(r)
        if len(rows) < page:
            return
        after = int(rows[-1].id)


def sweep(engine: Engine, now: datetime, retention_days: float, limit: int = SWEEP_SLICE) -> int:
    """Delete up to ``limit`` rows older than the retention; how many went. The one
    delete of this table (docs/limits.md)."""
    cutoff = now - timedelta(days=retention_days)
    with engine.begin() as conn:
        ids = (
            conn.execute(
                select(audit_log.c.id)
                .where(audit_log.c.at < cutoff)
                .order_by(audit_log.c.id)
                .limit(limit)
            )
            .scalars()
            .all()
        )
        if ids:
            conn.execute(delete(audit_log).where(audit_log.c.id.in_(ids)))
    return len(ids)


def command(
    actor: str,
    source: str,
    action: str,
    *,
    target: str | None = None,
    instance_id: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One operator action as it travels with its trigger (the task's ``audit``
    keyword): JSON, its values already hidden, so a failed trigger kept for a retry
    holds no value either."""
    return {
        "command_id": new_command_id(),
        "actor": actor,
        "source": source,
        "action": action,
        "target": target,
        "instance_id": instance_id,
        "params": hide(params or {}),
    }


def outcome_row(
    cmd: Mapping[str, Any],
    outcome: str,
    at: datetime,
    *,
    detail: str | None = None,
    instance_id: str | None = None,
) -> dict[str, Any]:
    """The row of ``cmd`` (from ``command``) with ``outcome``."""
    return row(
        command_id=str(cmd["command_id"]),
        at=at,
        actor=str(cmd["actor"]),
        source=str(cmd["source"]),
        action=str(cmd["action"]),
        outcome=outcome,
        target=cmd.get("target"),
        instance_id=instance_id or cmd.get("instance_id"),
        params=cmd.get("params") or {},
        detail=detail,
    )


def done_row(
    cmd: Mapping[str, Any],
    at: datetime,
    *,
    target: str | None = None,
    instance_id: str | None = None,
    more: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``done`` row of an on-the-spot action, for the action's own transaction to
    insert (``record`` on its connection): ``target``, ``instance_id`` and the
    parameters in ``more`` are what only the action learns (a batch's id, how many it
    selected)."""
    if target is not None or more:
        cmd = {
            **cmd,
            "target": target if target is not None else cmd.get("target"),
            "params": {**(cmd.get("params") or {}), **(more or {})},
        }
    return outcome_row(cmd, "done", at, instance_id=instance_id)


def accept(engine: Engine, cmd: Mapping[str, Any], at: datetime, outcome: str = "accepted") -> None:
    """Record ``cmd`` as accepted (an enqueued action: the worker records its outcome)
    or, with ``outcome="done"``, as done on the spot."""
    record(engine, [outcome_row(cmd, outcome, at)])


def by_hand(
    action: str,
    *,
    target: str | None = None,
    instance_id: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The command of a management task sent by hand (Flower's "send task",
    ``send_task``): no Client took it, so nobody is known; from ``celery``
    (docs/audit.md)."""
    return command(
        UNKNOWN_ACTOR, "celery", action, target=target, instance_id=instance_id, params=params
    )

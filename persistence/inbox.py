"""The inbox: a producer's trigger is durable before the Client returns.

Redis as shipped keeps its queues in memory; a broker restart between ``send_task``
and a worker's pick-up would lose the trigger. So the Client first writes the trigger
(task name + keyword arguments) into the ``inbox`` table, then publishes the task
with ``inbox_id``. The trigger's own transaction marks the row processed (the Store
queues the mark into its one write; a trigger that took another path is marked after);
the beat sweep (``dormant.relay_outbox``) re-publishes rows left unprocessed for a
while, each at most once per redelivery window (a broker outage must not turn every
sweep into a storm of duplicates). The inbox id is also the trigger id, so a
re-published row that was in fact applied is recognised by the Store as a duplicate:
at-least-once publishing, exactly-once effect.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, Update, bindparam, func, insert, or_, select, update

from dormant.engine_core.errors import StoredDataError
from dormant.engine_core.tenants import DEFAULT_TENANT
from dormant.persistence import clock, round_trips
from dormant.persistence.tables import inbox
from dormant.persistence.writes import Writes

__all__ = [
    "InboxRow",
    "QueuedStart",
    "mark_processed",
    "mark_processed_statement",
    "mark_republished",
    "queue_mark_processed",
    "queued_start",
    "queued_starts",
    "record",
    "record_many",
    "unprocessed",
    "waiting",
]


@dataclass(frozen=True, slots=True)
class InboxRow:
    """An unprocessed row as stored; ``routing_key`` and ``kwargs`` are read from its
    payload when asked, so one malformed row raises in the sweep's handling of that row
    (where it is parked: tasks/sweeps.py), not in the query that found them all."""

    id: str
    task: str
    payload: Any
    created_at: datetime
    # Deliveries after the first counted so far (persistence/deliveries.py).
    redeliveries: int = 0

    @property
    def routing_key(self) -> str:
        key = self._field("routing_key") or "trigger.default"
        if not isinstance(key, str):
            raise StoredDataError(f"inbox row {self.id}: routing_key is not a string")
        return key

    @property
    def kwargs(self) -> dict[str, Any]:
        kwargs = self._field("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise StoredDataError(f"inbox row {self.id}: kwargs is not a JSON object")
        return dict(kwargs)

    def _field(self, name: str) -> Any:
        if not isinstance(self.payload, dict):
            raise StoredDataError(f"inbox row {self.id}: payload is not a JSON object")
        return self.payload.get(name)


def record(
    engine: Engine,
    task: str,
    routing_key: str,
    kwargs: dict[str, Any],
    inbox_id: str | None = None,
) -> str:
    """Write one trigger (the task to send, and how) and return its id (a uuid4 hex)."""
    return record_many(engine, [(task, routing_key, kwargs)], [inbox_id or uuid.uuid4().hex])[0]


# One trigger's row, for ``round_trips.last``: BEGIN, the INSERT and COMMIT in one round
# trip, where ``engine.begin()`` costs three (a Client's start or message, each).
_INSERT_ONE = insert(inbox).values(
    id=bindparam("id"),
    kind=bindparam("kind"),
    payload=bindparam("payload"),
    created_at=bindparam("created_at"),
)


def record_many(
    engine: Engine,
    triggers: Sequence[tuple[str, str, dict[str, Any]]],
    inbox_ids: list[str] | None = None,
    *,
    also: Callable[[Connection], None] | None = None,
) -> list[str]:
    """Write many triggers ``(task, routing_key, kwargs)`` in ONE transaction and one
    multi-row INSERT: a producer's batch costs one commit, not one per trigger.
    ``also``: more writes of the caller's in that transaction (an operator action's
    ``accepted`` row in the audit trail, persistence/audit.py)."""
    ids = inbox_ids or [uuid.uuid4().hex for _ in triggers]
    if not triggers:
        return []
    at = clock.now()
    rows = [
        {
            "id": row_id,
            "kind": task,
            "payload": {"routing_key": routing_key, "kwargs": kwargs},
            "created_at": at,
        }
        for row_id, (task, routing_key, kwargs) in zip(ids, triggers, strict=True)
    ]
    if also is None and len(rows) == 1 and engine.dialect.name == "postgresql":
        with engine.connect() as conn, round_trips.open_late(conn):
            round_trips.last(conn, _INSERT_ONE, rows[0])
        return ids
    with engine.begin() as conn:
        conn.execute(insert(inbox), rows)
        if also is not None:
            also(conn)
    return ids


def mark_processed_statement(inbox_id: str, at: datetime) -> Update:
    """The mark, for a caller's own transaction: the Store queues it into the trigger's
    one write, so applying a Client's trigger costs no second commit."""
    return (
        update(inbox)
        .where(inbox.c.id == inbox_id, inbox.c.processed_at.is_(None))
        .values(processed_at=at)
    )


# ``mark_processed_statement`` prebuilt for a trigger's one write statement
# (persistence/writes.py ``add_prebuilt``), with its parameters' names.
MARK_PROCESSED_PARAMS = ("inbox_id", "inbox_processed_at")
MARK_PROCESSED = (
    update(inbox)
    .where(inbox.c.id == bindparam("inbox_id"), inbox.c.processed_at.is_(None))
    .values(processed_at=bindparam("inbox_processed_at"))
)


def queue_mark_processed(writes: Writes, inbox_id: str, at: datetime) -> None:
    """Queue the mark into a trigger's one write statement."""
    writes.add_prebuilt(
        MARK_PROCESSED,
        dict(zip(MARK_PROCESSED_PARAMS, (inbox_id, at), strict=True)),
        lambda: mark_processed_statement(inbox_id, at),
    )


def mark_processed(engine: Engine, inbox_id: str) -> None:
    """Idempotent: a redelivered trigger marks an already-processed row again. Its own
    transaction: for the triggers whose apply did not mark it (a failed trigger kept,
    a duplicate found before any lock, a fan-out over several transactions)."""
    with engine.begin() as conn:
        conn.execute(mark_processed_statement(inbox_id, clock.now()))


def mark_republished(engine: Engine, inbox_ids: list[str]) -> None:
    """The sweep re-sent these: leave them alone for a redelivery window, and count
    the re-send as a delivery that may follow one that died, in this same write
    (persistence/deliveries.py)."""
    if not inbox_ids:
        return
    with engine.begin() as conn:
        conn.execute(
            update(inbox)
            .where(inbox.c.id.in_(inbox_ids))
            .values(republished_at=clock.now(), redeliveries=inbox.c.redeliveries + 1)
        )


def unprocessed(
    engine: Engine,
    older_than_seconds: float,
    limit: int = 500,
    *,
    redeliver_after_seconds: float = 60.0,
) -> list[InboxRow]:
    """Rows still unprocessed ``older_than_seconds`` after they were written, not
    parked, and not re-published by the sweep within the last ``redeliver_after_seconds``."""
    now = clock.now()
    cutoff = now - timedelta(seconds=older_than_seconds)
    again = now - timedelta(seconds=redeliver_after_seconds)
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                inbox.c.id,
                inbox.c.kind,
                inbox.c.payload,
                inbox.c.created_at,
                inbox.c.redeliveries,
            )
            .where(
                inbox.c.processed_at.is_(None),
                inbox.c.parked_at.is_(None),
                inbox.c.created_at <= cutoff,
                or_(inbox.c.republished_at.is_(None), inbox.c.republished_at <= again),
            )
            .order_by(inbox.c.created_at)
            .limit(limit)
        ).all()
    return [InboxRow(r.id, r.kind, r.payload, r.created_at, r.redeliveries) for r in rows]


def waiting(engine: Engine, written_by: datetime) -> int:
    """Unprocessed, unparked rows written by ``written_by``: the triggers the sweep is
    waiting for, lost or still in the broker (tasks/sweeps.py compares the two)."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count())
                .select_from(inbox)
                .where(
                    inbox.c.processed_at.is_(None),
                    inbox.c.parked_at.is_(None),
                    inbox.c.created_at <= written_by,
                )
            ).scalar_one()
        )


@dataclass(frozen=True, slots=True)
class QueuedStart:
    """A start the Client wrote that no worker has applied yet: listed as ``queued``
    (engine_core/states.py), with what the start names; no version until it applies."""

    id: str
    key: str
    business_key: str | None
    created_at: datetime
    status: str = "queued"
    version: int | None = None

    @property
    def updated_at(self) -> datetime:
        return self.created_at


def queued_starts(
    engine: Engine, task: str, limit: int, key: str | None = None, tenant: str | None = None
) -> list[QueuedStart]:
    """The unprocessed starts (``task``: tasks/wire.py ``START``), newest first, at most
    ``limit``; ``key``: of this process only; ``tenant``: of this tenant only (the
    default tenant's starts name none). Read from the inbox's unprocessed rows (the
    partial index the sweep reads), so a long processed history costs nothing."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(inbox.c.payload, inbox.c.created_at)
            .where(inbox.c.kind == task, inbox.c.processed_at.is_(None))
            .order_by(inbox.c.created_at.desc())
            .limit(limit * 4 if key is not None or tenant is not None else limit)
        ).all()
    out: list[QueuedStart] = []
    for payload, created_at in rows:
        kwargs = (payload or {}).get("kwargs") or {}
        if key is not None and kwargs.get("key") != key:
            continue
        if tenant is not None and (kwargs.get("tenant") or DEFAULT_TENANT) != tenant:
            continue
        out.append(
            QueuedStart(
                id=str(kwargs.get("instance_id")),
                key=str(kwargs.get("key")),
                business_key=kwargs.get("business_key"),
                created_at=created_at,
            )
        )
    return out[:limit]


def queued_start(engine: Engine, instance_id: str, task: str) -> datetime | None:
    """When a Client wrote the still unprocessed start of ``instance_id``, if it did:
    the instance does not exist yet because no worker has applied its start. ``task``:
    the start's task name, as the Client stored it (tasks/wire.py ``START``)."""
    with engine.connect() as conn:
        return conn.execute(
            select(inbox.c.created_at)
            .where(
                inbox.c.kind == task,
                inbox.c.processed_at.is_(None),
                inbox.c.payload["kwargs"]["instance_id"].as_string() == instance_id,
            )
            .limit(1)
        ).scalar()

"""Delivery accounting: how many times a trigger was delivered after its first.

A trigger whose work ends its worker (past the hard time limit, a signal, out of
memory) never returns, so no failure path of its task sees it; it was delivered again
for ever, holding a worker slot each time (issue 24, row 1). Counting every delivery
before applying it would cost every trigger a commit of its own, so only a delivery that
may follow one that died is counted, and a first delivery costs nothing:

- a message the broker flags as redelivered (``delivery_info["redelivered"]``: RabbitMQ
  on a requeue, kombu's Redis transport on the restore of an unacknowledged message):
  the worker counts it here (``count_redelivery``) in a commit of its own before
  applying it: on the Client's inbox row, or for a trigger without one (a plain Celery
  producer's, an outbox follow-up) on a row of its own keyed by its trigger id;
- an inbox row the sweep sent again (the broker no longer held it: a first publish
  lost, a broker restarted without its queue): the sweep counts it in the very write that
  marks the re-send (persistence/inbox.py ``mark_republished``), and names the
  delivery's number in the message it sends (tasks/sweeps.py), so the worker reads
  nothing.

The last error known of a delivery that died is kept beside the count
(``record_ending``): Celery reports a hard time limit to the worker's main process
(``task_failure``, tasks/triggers.py), which writes it only then; a pool process killed
by a signal or the OOM killer reports nothing Celery hands on, so none is known for it.
It is the *last* delivery's: a counted redelivery that goes on to be applied forgets
the error of the ones before it in the count's own write. A time limit is charged to the
task that ran it, which under batching was applying triggers it took from the queue
too (tasks/drain.py); a trigger that then kills its process on its own delivery would
otherwise be refused naming the time limit of a hang it once shared a batch with.

A delivery ended by a transient failure's retry is a new message, neither flagged nor
re-sent: it is never counted. The bound and what passing it does: tasks/triggers.py
``_run``; docs/limits.md, "What an operator sees: poison triggers".
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, case, delete, null, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from dormant.persistence.tables import inbox, trigger_redeliveries

__all__ = ["count_redelivery", "forget", "last_error", "record_ending", "sweep_redeliveries"]

# How much of a delivery's last error is kept (it is quoted in one line of a failed
# trigger's error).
LAST_ERROR_CHARS = 500


def count_redelivery(
    engine: Engine, inbox_id: str | None, trigger_id: str, at: datetime, *, bound: int
) -> int:
    """Count one more redelivery and return how many there were, this one included
    (the delivery's number is one more). 0 when the inbox row is processed or gone:
    the trigger applied, and the Store refuses it as a duplicate on its own. A delivery
    within ``bound`` (``DORMANT_MAX_DELIVERIES``) will be applied: the last error of
    the deliveries before it is forgotten in the same write; one past it is refused
    with that error, kept."""
    with engine.begin() as conn:
        if inbox_id:
            counted = inbox.c.redeliveries + 1
            found = conn.execute(
                update(inbox)
                .where(inbox.c.id == inbox_id, inbox.c.processed_at.is_(None))
                .values(redeliveries=counted, last_error=_kept_past(counted, bound, inbox))
                .returning(inbox.c.redeliveries)
            ).scalar()
            return int(found or 0)
        return _count_keyed(conn, trigger_id, at, bound)


def _kept_past(counted: Any, bound: int, table: Any) -> Any:
    """The last error, kept only when the delivery numbered ``counted`` + 1 is past
    ``bound`` and so refused with it."""
    return case((counted + 1 > bound, table.c.last_error), else_=null())


def _count_keyed(conn: Connection, trigger_id: str, at: datetime, bound: int) -> int:
    t = trigger_redeliveries
    statement = _insert(conn)(t).values(trigger_id=trigger_id, redeliveries=1, updated_at=at)
    counted = t.c.redeliveries + 1
    statement = statement.on_conflict_do_update(
        index_elements=[t.c.trigger_id],
        set_={
            "redeliveries": counted,
            "last_error": _kept_past(counted, bound, t),
            "updated_at": at,
        },
    )
    return int(conn.execute(statement.returning(t.c.redeliveries)).scalar_one())


def _insert(conn: Connection) -> Any:
    return pg_insert if conn.dialect.name == "postgresql" else sqlite_insert


def record_ending(
    engine: Engine, inbox_id: str | None, trigger_id: str, error: str, at: datetime
) -> None:
    """Keep the error a delivery died of, for the poison trigger it may become; written
    only when one died, never on a first delivery's path."""
    error = error[:LAST_ERROR_CHARS]
    with engine.begin() as conn:
        if inbox_id:
            conn.execute(
                update(inbox)
                .where(inbox.c.id == inbox_id, inbox.c.processed_at.is_(None))
                .values(last_error=error)
            )
            return
        t = trigger_redeliveries
        statement = _insert(conn)(t).values(
            trigger_id=trigger_id, redeliveries=0, last_error=error, updated_at=at
        )
        conn.execute(
            statement.on_conflict_do_update(
                index_elements=[t.c.trigger_id], set_={"last_error": error, "updated_at": at}
            )
        )


def last_error(engine: Engine, inbox_id: str | None, trigger_id: str) -> str | None:
    """The last error known of the trigger's deliveries that died, if one was reported."""
    with engine.connect() as conn:
        if inbox_id:
            found = conn.execute(select(inbox.c.last_error).where(inbox.c.id == inbox_id))
        else:
            t = trigger_redeliveries
            found = conn.execute(select(t.c.last_error).where(t.c.trigger_id == trigger_id))
        value = found.scalar()
    return value if isinstance(value, str) else None


def forget(conn: Connection, trigger_id: str) -> None:
    """An operator's retry gives the trigger its deliveries again: in the retry's own
    transaction (persistence/failed_triggers.py ``take_failed``; a retried inbox
    trigger gets a new inbox row, counted from zero)."""
    t = trigger_redeliveries
    conn.execute(delete(t).where(t.c.trigger_id == trigger_id))


def sweep_redeliveries(engine: Engine, now: datetime, retention_seconds: float, limit: int) -> int:
    """Delete up to ``limit`` counts not touched for ``retention_seconds``: a trigger
    that can still come again was redelivered within that time (the same retention as
    the processed trigger ids, persistence/processed.py, whose sweep calls this)."""
    t = trigger_redeliveries
    before = now - timedelta(seconds=retention_seconds)
    older = select(t.c.trigger_id).where(t.c.updated_at < before).limit(limit)
    with engine.begin() as conn:
        result = conn.execute(delete(t).where(t.c.trigger_id.in_(older)))
    return int(result.rowcount)

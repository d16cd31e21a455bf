"""The outbox seen from the shell: rows to publish after a commit, kept until
published (jobs) or until consumed (follow-up triggers). The Store's part ``store.outbox``.

A published job's row is deleted on PostgreSQL by the process's next write
transaction, as one more CTE of its one write statement, or by a timer within half a
second when none comes (``job_published``, persistence/published_jobs.py); on SQLite
at once. A follow-up's row is stamped published and kept until its consumer applied it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, delete, func, or_, select, text, update

from dormant.persistence import clock
from dormant.persistence.db import Transactions
from dormant.persistence.published_jobs import PublishedJobs
from dormant.persistence.tables import outbox

__all__ = ["OutboxQueue", "OutboxRow"]


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    kind: str
    payload: dict[str, Any]
    created_at: datetime
    # When it was published, if it was: a follow-up the broker may have lost.
    published_at: datetime | None = None


class OutboxQueue:
    """The outbox's rows after their commit (``store.outbox``). Owns
    ``published_jobs``: the ids of published job rows waiting for a write
    transaction of the Store's to carry their DELETE."""

    def __init__(self, db: Transactions, flush_after_seconds: float) -> None:
        self._db = db
        self.published_jobs = PublishedJobs(self.delete_published_jobs, flush_after_seconds)

    def outbox_rows(self, ids: list[int]) -> list[OutboxRow]:
        if not ids:
            return []
        with self._db.read() as conn:
            rows = conn.execute(select(outbox).where(outbox.c.id.in_(ids)).order_by(outbox.c.id))
            return [OutboxRow(int(r.id), r.kind, r.payload, r.created_at) for r in rows]

    def pending_outbox(
        self,
        older_than_seconds: float,
        limit: int = 100,
        *,
        now: datetime | None = None,
        redeliver_after_seconds: float | None = None,
    ) -> list[OutboxRow]:
        """The sweeper's work: rows a publisher left behind (it died after commit), and
        follow-ups published but not consumed within ``redeliver_after_seconds`` (the
        broker may have lost them: tasks/sweeps.py re-sends only as many as the broker
        cannot be holding). Parked rows are left out."""
        moment = now or clock.now()
        cutoff = moment - timedelta(seconds=older_than_seconds)
        unpublished = and_(outbox.c.created_at <= cutoff, outbox.c.published_at.is_(None))
        condition = unpublished
        if redeliver_after_seconds is not None:
            lost = outbox.c.published_at <= moment - timedelta(seconds=redeliver_after_seconds)
            condition = or_(unpublished, lost)
        with self._db.read() as conn:
            rows = conn.execute(
                select(outbox)
                .where(condition, outbox.c.parked_at.is_(None))
                .order_by(outbox.c.id)
                .limit(limit)
            )
            return [
                OutboxRow(int(r.id), r.kind, r.payload, r.created_at, r.published_at) for r in rows
            ]

    def unconsumed(self, published_by: datetime) -> int:
        """Follow-ups published by ``published_by`` and not yet consumed (nor parked):
        lost, or still in the broker (tasks/sweeps.py compares the two)."""
        with self._db.read() as conn:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(outbox)
                    .where(
                        outbox.c.published_at <= published_by,
                        outbox.c.parked_at.is_(None),
                    )
                ).scalar_one()
            )

    def mark_published(self, outbox_id: int, *, until_consumed: bool = False) -> None:
        """After a publish: delete the row, or (``until_consumed``) keep it, stamped,
        until its consumer applied it — a follow-up the broker loses is then published
        again by the sweep instead of stranding the instance that waits for it."""
        with self._db.transaction() as conn:
            self._no_flush_needed(conn)
            if until_consumed:
                conn.execute(
                    update(outbox).where(outbox.c.id == outbox_id).values(published_at=clock.now())
                )
            else:
                conn.execute(delete(outbox).where(outbox.c.id == outbox_id))

    def claim_job(self, outbox_id: int) -> bool:
        """Take a job's row before publishing it, deleting it in a transaction of its
        own: True if this caller took it, False if another publisher did (the sweep, or
        the trigger that wrote it). For a row old enough for the sweep to take it
        (tasks/outbox.py ``publish_row``), so that two publishers never both send it."""
        with self._db.transaction() as conn:
            self._no_flush_needed(conn)
            taken = conn.execute(
                delete(outbox)
                .where(outbox.c.id == outbox_id, outbox.c.published_at.is_(None))
                .returning(outbox.c.id)
            ).first()
        return taken is not None

    def job_published(self, outbox_id: int) -> None:
        """Row ``outbox_id``'s job was published: delete the row. On PostgreSQL not in a
        transaction of its own: the id waits (``published_jobs``) for the process's next
        write transaction, which carries the DELETE in its one write statement, or for
        the timer that deletes whatever no transaction took (persistence/published_jobs.py).
        SQLite, one local file with nothing to save, deletes it now."""
        if self._db.is_postgres:
            self.published_jobs.add(outbox_id)
        else:
            self.mark_published(outbox_id)

    def delete_published_jobs(self, ids: list[int]) -> None:
        """The timer's transaction: the published job rows no trigger's write took."""
        with self._db.transaction() as conn:
            self._no_flush_needed(conn)
            conn.execute(delete(outbox).where(outbox.c.id.in_(ids)))

    def _no_flush_needed(self, conn: Connection) -> None:
        """Marking a row published needs no flush to disk before we go on: if a crash
        loses it, the sweep publishes the row again, which is harmless (trigger ids,
        job idempotency keys). Saves one WAL fsync per effect (bench_triggers)."""
        if self._db.is_postgres:
            conn.execute(text("SET LOCAL synchronous_commit TO OFF"))

    def consume_outbox(self, outbox_id: int, trigger_id: str) -> None:
        """The consumer applied the follow-up of row ``outbox_id``: the row is done.

        Matched on the trigger id as well, because SQLite reuses the id of a deleted
        row: a late consumer must never delete somebody else's follow-up."""
        with self._db.transaction() as conn:
            row = conn.execute(select(outbox.c.payload).where(outbox.c.id == outbox_id)).first()
            if row is not None and (row.payload or {}).get("trigger_id") == trigger_id:
                conn.execute(delete(outbox).where(outbox.c.id == outbox_id))

"""One job type's flow-control counts inside one transaction (persistence/job_flow.py
says when each is used; engine_core/job_flow.py has the rules).

``TypeState`` locks the type's row first (every change to a type's rows happens under
that lock, so its counts are exact and its grants serialised), reads the counts of the
type and of each key it touches, and writes back only what changed (``save``). The
``FAST_*`` statements are PostgreSQL's one-statement path for a type limited by its
concurrency alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from dormant.engine_core.job_flow import FlowLimits, flow_key, refill, room
from dormant.persistence.tables import (
    job_flow_keys,
    job_flow_slots,
    job_flow_types,
    job_flow_waiting,
)

__all__ = ["FAST_ADMIT", "FAST_RELEASE", "TypeState", "fast_path", "lock_type"]


@dataclass(slots=True)
class _Counts:
    """A type's or a key's row, as read under the type's lock and written back once."""

    running: int
    waiting: int
    paused_until: datetime | None
    tokens: float | None
    tokens_at: datetime | None
    last_grant: int = 0
    grants: int = 0
    dirty: bool = False


def fast_path(limits: FlowLimits) -> bool:
    """A type limited by its concurrency alone: no key, no rate."""
    return (
        limits.concurrency is not None
        and limits.key is None
        and limits.rate is None
        and limits.key_rate is None
    )


# A job of a ``fast_path`` type takes a slot if the type has room, no job waiting and no
# pause: the count and the slot row in one statement; no row back means "not now", and
# the caller takes the general path (which writes the waiting row). PostgreSQL only.
FAST_ADMIT = text(
    "WITH up AS (UPDATE job_flow_types SET running = running + 1, grants = grants + 1 "
    "WHERE job_type = :t AND running < :lim AND waiting = 0 "
    "AND (paused_until IS NULL OR paused_until <= :now) RETURNING job_type) "
    "INSERT INTO job_flow_slots (instance_id, wait_id, job_type, flow_key, payload, granted_at) "
    "SELECT :i, :w, job_type, '', CAST(:payload AS JSONB), :now FROM up RETURNING 1"
)
# Its release: the slot row and the count in one statement; ``waiting`` says whether a
# grant is due, ``freed`` 0 means the job held no slot (it waited: the general path).
FAST_RELEASE = text(
    "WITH gone AS (DELETE FROM job_flow_slots WHERE instance_id = :i AND wait_id = :w "
    "RETURNING 1) UPDATE job_flow_types "
    "SET running = GREATEST(running - (SELECT count(*) FROM gone), 0) "
    "WHERE job_type = :t RETURNING waiting, (SELECT count(*) FROM gone) AS freed"
)


def _upsert(pg: bool) -> Any:
    return pg_insert if pg else sqlite_insert


def lock_type(conn: Connection, pg: bool, job_type: str) -> Any:
    """The type's row, locked for the rest of the transaction; created first if new
    (a plain ``FOR UPDATE`` in the common case: an upsert would write the row twice)."""
    locking = select(job_flow_types).where(job_flow_types.c.job_type == job_type).with_for_update()
    row = conn.execute(locking).first()
    if row is None:
        conn.execute(
            _upsert(pg)(job_flow_types)
            .values(job_type=job_type, running=0, waiting=0, grants=0)
            .on_conflict_do_nothing(index_elements=[job_flow_types.c.job_type])
        )
        row = conn.execute(locking).one()
    return row


class TypeState:
    """One type's counts under its row lock, for one transaction."""

    def __init__(
        self, conn: Connection, pg: bool, job_type: str, limits: FlowLimits, now: datetime
    ) -> None:
        self.conn, self.pg, self.job_type, self.limits, self.now = conn, pg, job_type, limits, now
        row = lock_type(conn, pg, job_type)
        self.type = _Counts(
            int(row.running),
            int(row.waiting),
            row.paused_until,
            row.tokens,
            row.tokens_at,
            grants=int(row.grants),
        )
        self.keys: dict[str, _Counts] = {}

    def _key(self, key: str) -> _Counts:
        found = self.keys.get(key)
        if found is None:
            stmt = _upsert(self.pg)(job_flow_keys).values(
                job_type=self.job_type, flow_key=key, running=0, waiting=0, last_grant=0
            )
            stmt = stmt.on_conflict_do_update(
                index_elements=[job_flow_keys.c.job_type, job_flow_keys.c.flow_key],
                set_={"flow_key": stmt.excluded.flow_key},
            ).returning(*job_flow_keys.c)
            row = self.conn.execute(stmt).one()
            found = _Counts(
                int(row.running),
                int(row.waiting),
                row.paused_until,
                row.tokens,
                row.tokens_at,
                last_grant=int(row.last_grant),
            )
            self.keys[key] = found
        return found

    def _paused(self, counts: _Counts) -> bool:
        return counts.paused_until is not None and counts.paused_until > self.now

    def _tokens(self, counts: _Counts, rate: int | None) -> bool:
        """Is there a token in this bucket (refilled to now)?"""
        if rate is None:
            return True
        counts.tokens = refill(
            counts.tokens, counts.tokens_at, self.now, rate, self.limits.rate_period_seconds
        )
        counts.tokens_at = self.now
        counts.dirty = True
        return counts.tokens >= 1.0

    def _may_start(self, key: _Counts, *, queued_ok: bool) -> bool:
        lim = self.limits
        return (
            not self._paused(self.type)
            and not self._paused(key)
            and (queued_ok or key.waiting == 0)
            and room(self.type.running, lim.concurrency)
            and room(key.running, lim.key_concurrency)
            and self._tokens(self.type, lim.rate)
            and self._tokens(key, lim.key_rate)
        )

    def _may_start_keyless(self) -> bool:
        lim = self.limits
        return (
            not self._paused(self.type)
            and self.type.waiting == 0
            and room(self.type.running, lim.concurrency)
            and self._tokens(self.type, lim.rate)
        )

    def _start(self, key_name: str, key: _Counts | None, payload: dict[str, Any]) -> None:
        """Count one job out: a slot row (if the type counts slots), a token each. A
        type without a key expression counts on its own row only (``key`` None, or the
        shared key's row, which then keeps only its waiting jobs and its turn)."""
        keyed = self.limits.key is not None
        if self.limits.counts_slots:
            self.conn.execute(
                insert(job_flow_slots).values(
                    instance_id=str(payload["instance_id"]),
                    wait_id=str(payload["wait_id"]),
                    job_type=self.job_type,
                    flow_key=key_name,
                    payload=payload,
                    granted_at=self.now,
                )
            )
            self.type.running += 1
            if keyed and key is not None:
                key.running += 1
        if self.limits.rate is not None:
            self.type.tokens = (self.type.tokens or 0.0) - 1.0
        if self.limits.key_rate is not None and key is not None:
            key.tokens = (key.tokens or 0.0) - 1.0
        self.type.grants += 1
        self.type.dirty = True
        if key is not None:
            key.last_grant = self.type.grants
            key.dirty = True

    def _wait(self, key_name: str, key: _Counts, payload: dict[str, Any]) -> None:
        self.conn.execute(
            insert(job_flow_waiting).values(
                job_type=self.job_type,
                flow_key=key_name,
                instance_id=str(payload["instance_id"]),
                wait_id=str(payload["wait_id"]),
                payload=payload,
                created_at=self.now,
            )
        )
        self.type.waiting += 1
        key.waiting += 1
        self.type.dirty = key.dirty = True

    def admit(self, payload: dict[str, Any], *, redispatch: bool) -> bool:
        """A job the step dispatches: True when it goes out now (its outbox row stays),
        False when it waits. A re-dispatch (a timeout) keeps its slot or its place."""
        instance_id, wait_id = str(payload["instance_id"]), str(payload["wait_id"])
        if redispatch:
            for table in (job_flow_slots, job_flow_waiting):
                changed = self.conn.execute(
                    update(table)
                    .where(table.c.instance_id == instance_id, table.c.wait_id == wait_id)
                    .values(payload=payload)
                ).rowcount
                if changed:
                    return table is job_flow_slots
        key_name = flow_key(self.limits, payload.get("variables") or {}, self.now)
        if self.limits.key is None and self._may_start_keyless():
            self._start(key_name, None, payload)  # the common case: the type's row only
            return True
        key = self._key(key_name)
        if self._may_start(key, queued_ok=False):
            self._start(key_name, key, payload)
            return True
        self._wait(key_name, key, payload)
        return False

    def release(self, instance_id: str, wait_id: str) -> None:
        """The job's wait ended: its slot is free (or its waiting row goes)."""
        for table, field in ((job_flow_slots, "running"), (job_flow_waiting, "waiting")):
            gone = self.conn.execute(
                delete(table)
                .where(table.c.instance_id == instance_id, table.c.wait_id == wait_id)
                .returning(table.c.flow_key)
            ).all()
            for (key_name,) in gone:
                setattr(self.type, field, getattr(self.type, field) - 1)
                self.type.dirty = True
                if field == "running" and self.limits.key is None:
                    continue  # a type without a key counts its jobs out on its own row
                key = self._key(str(key_name))
                setattr(key, field, getattr(key, field) - 1)
                key.dirty = True
            if gone:
                return

    def requeue(self, instance_id: str, wait_id: str, attempt: int, payload: dict[str, Any]) -> str:
        """A ``RateLimited`` job back to waiting (its slot freed); returns its key."""
        slot = self.conn.execute(
            select(job_flow_slots.c.flow_key, job_flow_slots.c.payload).where(
                job_flow_slots.c.instance_id == instance_id,
                job_flow_slots.c.wait_id == wait_id,
            )
        ).first()
        if slot is not None and int(slot.payload.get("attempt", 0)) == attempt:
            self.release(instance_id, wait_id)
            payload = dict(slot.payload)
            key_name = str(slot.flow_key)
        else:
            key_name = flow_key(self.limits, payload.get("variables") or {}, self.now)
        queued = self.conn.execute(
            select(job_flow_waiting.c.id).where(
                job_flow_waiting.c.instance_id == instance_id,
                job_flow_waiting.c.wait_id == wait_id,
            )
        ).first()
        if queued is None:
            self._wait(key_name, self._key(key_name), payload)
        return key_name

    def pause(self, key_name: str | None, until: datetime) -> None:
        counts = self.type if key_name is None else self._key(key_name)
        if counts.paused_until is None or counts.paused_until < until:
            counts.paused_until = until
            counts.dirty = True

    def grant(self, most: int) -> list[dict[str, Any]]:
        """Waiting jobs granted now, round-robin by key; their payloads."""
        granted: list[dict[str, Any]] = []
        lim = self.limits
        while len(granted) < most and self.type.waiting > 0:
            if self._paused(self.type) or not room(self.type.running, lim.concurrency):
                break
            if not self._tokens(self.type, lim.rate):
                break
            picked = self._next_key()
            if picked is None:
                break
            key_name, key = picked
            row = self.conn.execute(
                select(job_flow_waiting.c.id, job_flow_waiting.c.payload)
                .where(
                    job_flow_waiting.c.job_type == self.job_type,
                    job_flow_waiting.c.flow_key == key_name,
                )
                .order_by(job_flow_waiting.c.id)
                .limit(1)
            ).first()
            if row is None:  # counts and rows disagree: trust the rows
                self.type.waiting -= key.waiting
                key.waiting, key.dirty, self.type.dirty = 0, True, True
                continue
            self.conn.execute(delete(job_flow_waiting).where(job_flow_waiting.c.id == row.id))
            key.waiting -= 1
            self.type.waiting -= 1
            self._start(key_name, key, dict(row.payload))
            granted.append(dict(row.payload))
        return granted

    def _next_key(self) -> tuple[str, _Counts] | None:
        """The waiting key granted longest ago that may start a job now. The rows give
        the candidates; this transaction's own counts (not written yet) win over them."""
        lim = self.limits
        cond = [
            job_flow_keys.c.job_type == self.job_type,
            job_flow_keys.c.waiting > 0,
            (job_flow_keys.c.paused_until.is_(None)) | (job_flow_keys.c.paused_until <= self.now),
        ]
        if lim.key_concurrency is not None:
            cond.append(job_flow_keys.c.running < lim.key_concurrency)
        rows = self.conn.execute(
            select(job_flow_keys.c.flow_key, job_flow_keys.c.last_grant)
            .where(*cond)
            .order_by(job_flow_keys.c.last_grant, job_flow_keys.c.flow_key)
            .limit(len(self.keys) + 20)
        ).all()
        turns = {str(r.flow_key): int(r.last_grant) for r in rows}
        turns.update({k: c.last_grant for k, c in self.keys.items() if c.waiting > 0})
        for key_name in sorted(turns, key=lambda k: (turns[k], k)):
            key = self._key(key_name)
            if key.waiting <= 0 or self._paused(key):
                continue
            if not room(key.running, lim.key_concurrency):
                continue
            if not self._tokens(key, lim.key_rate):
                continue
            return key_name, key
        return None

    def save(self) -> None:
        """Write back the counts this transaction changed."""
        t = self.type
        if t.dirty:
            self.conn.execute(
                update(job_flow_types)
                .where(job_flow_types.c.job_type == self.job_type)
                .values(
                    running=max(t.running, 0),
                    waiting=max(t.waiting, 0),
                    grants=t.grants,
                    paused_until=t.paused_until,
                    tokens=t.tokens,
                    tokens_at=t.tokens_at,
                )
            )
        for key_name, k in self.keys.items():
            if k.dirty:
                self.conn.execute(
                    update(job_flow_keys)
                    .where(
                        job_flow_keys.c.job_type == self.job_type,
                        job_flow_keys.c.flow_key == key_name,
                    )
                    .values(
                        running=max(k.running, 0),
                        waiting=max(k.waiting, 0),
                        last_grant=k.last_grant,
                        paused_until=k.paused_until,
                        tokens=k.tokens,
                        tokens_at=k.tokens_at,
                    )
                )

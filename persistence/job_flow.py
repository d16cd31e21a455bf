"""Flow control of job types in the database: slots, waiting jobs, pauses and buckets.

The rules are engine_core/job_flow.py's; this module keeps the rows
(docs/flow-control.md has the user's view). The invariant: **a job of a limited type
is out (a slot row) or waiting (a waiting row), and which one changes only in a
transaction that also writes what the instance implies**:

* the Store's step transaction (``JobFlow.on_step``) takes a slot for each job it
  dispatches (or writes a waiting row instead of the job's outbox row), and gives the
  slot back for each job wait the step ended (a result, a failure waiting out its
  backoff, a cancel, a boundary), granting the freed slot to the next waiting job in
  the same transaction: that job's outbox row is written there too;
* a job that raised ``RateLimited`` moves from its slot back to waiting, and pauses
  its key or type (``rate_limited``); a job timeout re-dispatches the same wait, which
  keeps its slot (or its waiting row) for the new attempt;
* beat's sweep (``sweep``) grants what no release will: jobs behind a pause that has
  ended, behind an empty token bucket, or behind a limit an operator raised.

So no crash leaks a slot: a slot is released by the commit that ends its job's wait,
and a rolled-back step releases nothing. Every type's rows are changed under its
``job_flow_types`` row lock (taken first, types in name order): the counts on the type
and key rows are exact, and grants are serialised per type.

Fairness: a waiting job is granted by key, the key granted longest ago first
(``last_grant``, the type's grant count when it was last granted), so keys take turns
whatever their backlogs. A new job never overtakes a waiting job of its own key.

Which types are limited: ``DORMANT_JOB_TYPES``, overridden per type by an operator's
limits (``set_limits``), plus any type with flow rows (one a job paused with
``RateLimited``). The database's part is read at most once a second per process, off
the trigger's transaction; a step that touches no such type runs no statement here.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from dormant.engine_core.checkpoint import Wait, WaitKind
from dormant.engine_core.errors import InvalidOperation, InvalidSetting
from dormant.engine_core.job_flow import FlowLimits, flow_key, refill, room
from dormant.persistence.db import read_only
from dormant.persistence.tables import (
    job_flow_keys,
    job_flow_slots,
    job_flow_types,
    job_flow_waiting,
    outbox,
)

__all__ = ["LIMIT_FIELDS", "FlowRow", "JobFlow"]

log = logging.getLogger("dormant.flow")

_REFRESH_SECONDS = 1.0
# Grants one transaction makes at most (a sweep after a long pause comes back often).
_GRANTS_PER_TRANSACTION = 200
_JOB = "DispatchJob"
LIMIT_FIELDS = ("concurrency", "key", "key_concurrency", "rate", "key_rate", "rate_period_seconds")


@dataclass(frozen=True, slots=True)
class FlowRow:
    """One line of ``dormant job-types list`` / the console's page: a type (``key``
    None) or one key of it."""

    job_type: str
    key: str | None
    running: int
    waiting: int
    limit: int | None
    rate: str | None
    paused_until: datetime | None


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


_EVERY: weakref.WeakSet[JobFlow] = weakref.WeakSet()


def _after_fork() -> None:
    """A forked child has no refresher thread running, whatever its parent had."""
    for flow in list(_EVERY):
        flow._lock = threading.Lock()
        flow._refreshing = False


class JobFlow:
    """Flow control for one Store (``store.flow``)."""

    def __init__(self, engine: Engine, configured: Mapping[str, FlowLimits]) -> None:
        self._engine = engine
        self._pg = engine.dialect.name == "postgresql"
        self.configured = {t: lim for t, lim in configured.items() if lim.limited}
        self._lock = threading.Lock()
        self._stored: dict[str, FlowLimits] = {}
        self._read_at: float | None = None
        self._refreshing = False
        _EVERY.add(self)

    # -- which types are limited ---------------------------------------------------

    def limits_of(self, job_type: str) -> FlowLimits | None:
        """The type's limits, or None when its jobs bypass flow control entirely."""
        stored = self._current()
        found = stored.get(job_type)
        return found if found is not None else self.configured.get(job_type)

    def active(self) -> bool:
        return bool(self.configured) or bool(self._current())

    def forget(self) -> None:
        """Read the database's part again at the next look (after an operator's change)."""
        with self._lock:
            self._read_at = None

    def _current(self) -> dict[str, FlowLimits]:
        with self._lock:
            read_at, stored = self._read_at, self._stored
            stale = read_at is None or time.monotonic() - read_at > _REFRESH_SECONDS
            start = stale and read_at is not None and not self._refreshing
            if start:
                self._refreshing = True
        if read_at is None:
            self._refresh()  # the first look waits; every later one reads what it has
            with self._lock:
                return self._stored
        if start:
            threading.Thread(target=self._refresh, name="dormant-flow-limits", daemon=True).start()
        return stored

    def _refresh(self) -> None:
        try:
            with read_only(self._engine) as conn:
                rows = conn.execute(
                    select(job_flow_types.c.job_type, job_flow_types.c.limits)
                ).all()
            stored = {
                str(r.job_type): _stored_limits(r.limits, self.configured.get(str(r.job_type)))
                for r in rows
            }
        except Exception as exc:  # the database is away: keep what we had
            log.warning("job flow limits not read: %r", exc)
            with self._lock:
                self._refreshing = False
                if self._read_at is None:
                    self._read_at = time.monotonic()
            return
        with self._lock:
            self._stored, self._read_at, self._refreshing = stored, time.monotonic(), False

    # -- the step's transaction ----------------------------------------------------

    def on_step(
        self,
        conn: Connection,
        instance_id: str,
        old: Mapping[str, Wait],
        new: Mapping[str, Wait],
        rows: list[dict[str, Any]],
        now: datetime,
    ) -> list[dict[str, Any]]:
        """The outbox rows a step writes, after flow control: limited jobs over their
        limits leave the list (they wait), and jobs granted the slots this step freed
        join it. No statement when neither happens."""
        if not self.configured and not self._current():
            return rows
        ended: dict[str, list[tuple[str, str]]] = {}
        for wid, w in old.items():
            if w.kind != WaitKind.JOB or not w.job_running or not w.job_type:
                continue
            after = new.get(wid)
            if (after is None or not after.job_running) and self.limits_of(w.job_type):
                ended.setdefault(w.job_type, []).append((instance_id, wid))
        sent: dict[str, list[int]] = {}
        for i, row in enumerate(rows):
            if row["kind"] == _JOB and self.limits_of(str(row["payload"]["job_type"])):
                sent.setdefault(str(row["payload"]["job_type"]), []).append(i)
        if not ended and not sent:
            return rows
        keep = [True] * len(rows)
        granted: list[dict[str, Any]] = []
        for job_type in sorted(ended.keys() | sent.keys()):
            limits = self.limits_of(job_type)
            assert limits is not None
            # The common case of a type limited by concurrency alone takes one statement
            # per job on PostgreSQL (``_FAST_ADMIT`` / ``_FAST_RELEASE``); anything else,
            # and anything after the first case the fast path cannot settle, locks the
            # type's row and reads its counts (``_TypeState``).
            fast = self._pg and _fast_path(limits)
            state: _TypeState | None = None
            grant = False
            for instance_id, wait_id in ended.get(job_type, []):
                if fast and state is None:
                    freed = conn.execute(
                        _FAST_RELEASE, {"t": job_type, "i": instance_id, "w": wait_id}
                    ).first()
                    if freed is not None and freed.freed:
                        grant = grant or int(freed.waiting) > 0
                        continue
                state = state or _TypeState(conn, self._pg, job_type, limits, now)
                state.release(instance_id, wait_id)
                grant = True
            for i in sent.get(job_type, []):
                payload = rows[i]["payload"]
                again = old.get(str(payload["wait_id"]))
                redispatch = bool(again and again.job_running)
                if fast and state is None and not redispatch:
                    params = {
                        "t": job_type,
                        "lim": limits.concurrency,
                        "now": now,
                        "i": str(payload["instance_id"]),
                        "w": str(payload["wait_id"]),
                        "payload": json.dumps(payload),
                    }
                    if conn.execute(_FAST_ADMIT, params).first() is not None:
                        continue
                state = state or _TypeState(conn, self._pg, job_type, limits, now)
                keep[i] = state.admit(payload, redispatch=redispatch)
            if grant:
                state = state or _TypeState(conn, self._pg, job_type, limits, now)
                granted += state.grant(_GRANTS_PER_TRANSACTION)
            if state is not None:
                state.save()
        kept = [row for row, k in zip(rows, keep, strict=True) if k]
        return kept + [{"kind": _JOB, "payload": p, "created_at": now} for p in granted]

    # -- outside a step ------------------------------------------------------------

    def rate_limited(
        self,
        instance_id: str,
        wait_id: str,
        attempt: int,
        payload: dict[str, Any],
        retry_after: float,
        whole_type: bool,
        now: datetime,
    ) -> datetime:
        """A job raised ``RateLimited``: it waits again, with the same attempt (no
        retry consumed), and its key (or type) is paused until now + ``retry_after``.
        ``payload``: the job as dispatched, for a type that keeps no slot rows.
        Returns the end of the pause."""
        job_type = str(payload["job_type"])
        limits = self.limits_of(job_type) or FlowLimits()
        until = now + timedelta(seconds=retry_after)
        with self._engine.begin() as conn:
            state = _TypeState(conn, self._pg, job_type, limits, now)
            key = state.requeue(instance_id, wait_id, attempt, payload)
            state.pause(None if whole_type or not limits.key else key, until)
            state.save()
        self.forget()
        return until

    def sweep(self, now: datetime) -> list[tuple[int, dict[str, Any]]]:
        """Grant what waits and may go now (pauses over, buckets refilled, limits
        raised): one transaction per type, each writing its granted jobs' outbox rows.
        Returns those rows (id, payload), to publish."""
        with read_only(self._engine) as conn:
            types = list(
                conn.execute(
                    select(job_flow_types.c.job_type).where(job_flow_types.c.waiting > 0)
                ).scalars()
            )
        written: list[tuple[int, dict[str, Any]]] = []
        for job_type in sorted(types):
            limits = self.limits_of(job_type) or FlowLimits()
            try:
                with self._engine.begin() as conn:
                    state = _TypeState(conn, self._pg, job_type, limits, now)
                    payloads = state.grant(_GRANTS_PER_TRANSACTION)
                    state.save()
                    for payload in payloads:
                        row_id = conn.execute(
                            insert(outbox)
                            .values(kind=_JOB, payload=payload, created_at=now)
                            .returning(outbox.c.id)
                        ).scalar_one()
                        written.append((int(row_id), payload))
            except Exception:  # each type on its own: the next sweep tries again
                log.exception("job flow sweep of type %s failed", job_type)
        return written

    def set_limits(self, job_type: str, changes: Mapping[str, Any], now: datetime) -> FlowLimits:
        """An operator's limits for ``job_type``: ``changes`` over its current limits
        (a value None removes that limit); ``changes`` empty clears every override,
        back to ``DORMANT_JOB_TYPES``. Returns the limits now in force."""
        unknown = sorted(set(changes) - set(LIMIT_FIELDS))
        if unknown:
            raise InvalidOperation(f"unknown job type limit(s) {unknown}; known: {LIMIT_FIELDS}")
        if not job_type or len(job_type) > 255:
            raise InvalidOperation("a job type must be a non-empty string of at most 255 chars")
        current = self.limits_of(job_type) or FlowLimits()
        try:
            limits = replace(current, **changes) if changes else self.configured.get(job_type)
        except InvalidSetting as exc:
            raise InvalidOperation(f"job type {job_type!r}: {exc}") from exc
        stored = asdict(limits) if changes and limits is not None else None
        with self._engine.begin() as conn:
            _lock_type(conn, self._pg, job_type)
            conn.execute(
                update(job_flow_types)
                .where(job_flow_types.c.job_type == job_type)
                .values(limits=stored, limits_set_at=now if stored else None)
            )
        self.forget()
        return limits or FlowLimits()

    def rows(self, now: datetime) -> list[FlowRow]:
        """Every limited type and each of its keys with jobs out or waiting."""
        with read_only(self._engine) as conn:
            types = {str(r.job_type): r for r in conn.execute(select(job_flow_types))}
            keys = list(
                conn.execute(
                    select(job_flow_keys)
                    .where(
                        (job_flow_keys.c.running > 0)
                        | (job_flow_keys.c.waiting > 0)
                        | (job_flow_keys.c.paused_until > now)
                    )
                    .order_by(job_flow_keys.c.job_type, job_flow_keys.c.flow_key)
                )
            )
        out: list[FlowRow] = []
        for job_type in sorted(set(types) | set(self.configured)):
            t = types.get(job_type)
            configured = self.configured.get(job_type)
            # read now, not from this process's cache: an operator may just have set them
            limits = _stored_limits(t.limits, configured) if t is not None else configured
            limits = limits or FlowLimits()
            out.append(
                FlowRow(
                    job_type,
                    None,
                    int(t.running) if t is not None else 0,
                    int(t.waiting) if t is not None else 0,
                    limits.concurrency,
                    _rate(limits.rate, limits),
                    _future(t.paused_until if t is not None else None, now),
                )
            )
            for k in (k for k in keys if k.job_type == job_type):
                out.append(
                    FlowRow(
                        job_type,
                        str(k.flow_key),
                        int(k.running),
                        int(k.waiting),
                        limits.key_concurrency,
                        _rate(limits.key_rate, limits),
                        _future(k.paused_until, now),
                    )
                )
        return out


def _fast_path(limits: FlowLimits) -> bool:
    """A type limited by its concurrency alone: no key, no rate."""
    return (
        limits.concurrency is not None
        and limits.key is None
        and limits.rate is None
        and limits.key_rate is None
    )


# A job of a ``_fast_path`` type takes a slot if the type has room, no job waiting and no
# pause: the count and the slot row in one statement; no row back means "not now", and
# the caller takes the general path (which writes the waiting row). PostgreSQL only.
_FAST_ADMIT = text(
    "WITH up AS (UPDATE job_flow_types SET running = running + 1, grants = grants + 1 "
    "WHERE job_type = :t AND running < :lim AND waiting = 0 "
    "AND (paused_until IS NULL OR paused_until <= :now) RETURNING job_type) "
    "INSERT INTO job_flow_slots (instance_id, wait_id, job_type, flow_key, payload, granted_at) "
    "SELECT :i, :w, job_type, '', CAST(:payload AS JSONB), :now FROM up RETURNING 1"
)
# Its release: the slot row and the count in one statement; ``waiting`` says whether a
# grant is due, ``freed`` 0 means the job held no slot (it waited: the general path).
_FAST_RELEASE = text(
    "WITH gone AS (DELETE FROM job_flow_slots WHERE instance_id = :i AND wait_id = :w "
    "RETURNING 1) UPDATE job_flow_types "
    "SET running = GREATEST(running - (SELECT count(*) FROM gone), 0) "
    "WHERE job_type = :t RETURNING waiting, (SELECT count(*) FROM gone) AS freed"
)


def _rate(count: int | None, limits: FlowLimits) -> str | None:
    return None if count is None else f"{count}/{limits.rate_period_seconds:g}s"


def _future(at: datetime | None, now: datetime) -> datetime | None:
    return at if at is not None and at > now else None


def _stored_limits(value: Any, configured: FlowLimits | None) -> FlowLimits:
    if isinstance(value, dict):
        try:
            fields: dict[str, Any] = {k: value[k] for k in LIMIT_FIELDS if k in value}
            return FlowLimits(**fields)
        except (InvalidSetting, TypeError) as exc:
            log.error("stored job flow limits %r not usable (%s); using the configured", value, exc)
    return configured or FlowLimits()


def _upsert(pg: bool) -> Any:
    return pg_insert if pg else sqlite_insert


def _lock_type(conn: Connection, pg: bool, job_type: str) -> Any:
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


class _TypeState:
    """One type's counts under its row lock, for one transaction."""

    def __init__(
        self, conn: Connection, pg: bool, job_type: str, limits: FlowLimits, now: datetime
    ) -> None:
        self.conn, self.pg, self.job_type, self.limits, self.now = conn, pg, job_type, limits, now
        row = _lock_type(conn, pg, job_type)
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


os.register_at_fork(after_in_child=_after_fork)

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

from sqlalchemy import Connection, Engine, insert, select, update

from dormant.engine_core.checkpoint import Wait, WaitKind
from dormant.engine_core.errors import InvalidOperation, InvalidSetting
from dormant.engine_core.job_flow import FlowLimits
from dormant.persistence import audit
from dormant.persistence.db import read_only
from dormant.persistence.flow_counts import (
    FAST_ADMIT,
    FAST_RELEASE,
    TypeState,
    fast_path,
    lock_type,
)
from dormant.persistence.tables import (
    job_flow_keys,
    job_flow_types,
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
            # per job on PostgreSQL (``FAST_ADMIT`` / ``FAST_RELEASE``); anything else,
            # and anything after the first case the fast path cannot settle, locks the
            # type's row and reads its counts (``TypeState``).
            fast = self._pg and fast_path(limits)
            state: TypeState | None = None
            grant = False
            for instance_id, wait_id in ended.get(job_type, []):
                if fast and state is None:
                    freed = conn.execute(
                        FAST_RELEASE, {"t": job_type, "i": instance_id, "w": wait_id}
                    ).first()
                    if freed is not None and freed.freed:
                        grant = grant or int(freed.waiting) > 0
                        continue
                state = state or TypeState(conn, self._pg, job_type, limits, now)
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
                    if conn.execute(FAST_ADMIT, params).first() is not None:
                        continue
                state = state or TypeState(conn, self._pg, job_type, limits, now)
                keep[i] = state.admit(payload, redispatch=redispatch)
            if grant:
                state = state or TypeState(conn, self._pg, job_type, limits, now)
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
            state = TypeState(conn, self._pg, job_type, limits, now)
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
                    state = TypeState(conn, self._pg, job_type, limits, now)
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

    def set_limits(
        self,
        job_type: str,
        changes: Mapping[str, Any],
        now: datetime,
        audited: Mapping[str, Any] | None = None,
    ) -> FlowLimits:
        """An operator's limits for ``job_type``: ``changes`` over its current limits
        (a value None removes that limit); ``changes`` empty clears every override,
        back to ``DORMANT_JOB_TYPES``. Returns the limits now in force. ``audited``:
        the operator's command, its ``done`` row in the same transaction."""
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
            lock_type(conn, self._pg, job_type)
            conn.execute(
                update(job_flow_types)
                .where(job_flow_types.c.job_type == job_type)
                .values(limits=stored, limits_set_at=now if stored else None)
            )
            if audited is not None:
                audit.record(conn, [audit.done_row(audited, now)])
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


os.register_at_fork(after_in_child=_after_fork)

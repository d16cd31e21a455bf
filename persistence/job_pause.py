"""Pausing the dispatch of one job type (a downstream system is down, a bad release).

A paused type's jobs are not sent: when the outbox relay meets one, it moves the row
into ``held_jobs`` (one transaction, so the job is in exactly one of the two tables)
instead of publishing it. Resuming the type moves its held rows back into the outbox,
unpublished, in one transaction, and the relay sends them. Nothing about the
instances changes: each job still waits at its node, and its timeout still runs, so a
pause longer than the type's job timeout makes the engine dispatch a new attempt (held
too) and, on resume, the older attempt's result is stale. Set the type's timeout
(``DORMANT_JOB_TYPES``) above the pauses you expect.

Which types are paused is read at most once a second per process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, func, insert, select

from dormant.engine_core.errors import InvalidOperation
from dormant.persistence import audit
from dormant.persistence.tables import held_jobs, job_type_pauses, outbox

__all__ = ["hold", "is_paused", "pause", "paused", "resume"]

_CACHE_SECONDS = 1.0
_cache: dict[str, tuple[float, frozenset[str]]] = {}
_lock = threading.Lock()


def paused(engine: Engine) -> dict[str, int]:
    """Paused job types and how many jobs each holds."""
    with engine.connect() as conn:
        types = list(conn.execute(select(job_type_pauses.c.job_type)).scalars())
        counts: dict[str, int] = {
            str(t): int(n)
            for t, n in conn.execute(
                select(held_jobs.c.job_type, func.count()).group_by(held_jobs.c.job_type)
            ).all()
        }
    return {t: counts.get(t, 0) for t in sorted(types)}


def is_paused(engine: Engine, job_type: str) -> bool:
    key = str(engine.url)
    now = time.monotonic()
    with _lock:
        cached = _cache.get(key)
    if cached is None or now - cached[0] > _CACHE_SECONDS:
        with engine.connect() as conn:
            types = frozenset(conn.execute(select(job_type_pauses.c.job_type)).scalars())
        cached = (now, types)
        with _lock:
            _cache[key] = cached
    return job_type in cached[1]


def _forget(engine: Engine) -> None:
    with _lock:
        _cache.pop(str(engine.url), None)


def pause(
    engine: Engine, job_type: str, now: datetime, audited: Mapping[str, Any] | None = None
) -> None:
    """``audited``: the operator's command, its ``done`` row in the same transaction."""
    if not job_type:
        raise InvalidOperation("a job type to pause must be a non-empty string")
    with engine.begin() as conn:
        if conn.execute(
            select(job_type_pauses.c.job_type).where(job_type_pauses.c.job_type == job_type)
        ).first():
            raise InvalidOperation(f"job type {job_type!r} is already paused")
        conn.execute(insert(job_type_pauses).values(job_type=job_type, paused_at=now))
        if audited is not None:
            audit.record(conn, [audit.done_row(audited, now)])
    _forget(engine)


def resume(
    engine: Engine, job_type: str, now: datetime, audited: Mapping[str, Any] | None = None
) -> int:
    """Unpause and give the held jobs back to the outbox; returns how many.
    ``audited``: the operator's command, its ``done`` row (with how many) in the same
    transaction."""
    with engine.begin() as conn:
        gone = conn.execute(delete(job_type_pauses).where(job_type_pauses.c.job_type == job_type))
        if gone.rowcount != 1:
            raise InvalidOperation(f"job type {job_type!r} is not paused")
        rows = list(
            conn.execute(
                select(held_jobs.c.id, held_jobs.c.payload)
                .where(held_jobs.c.job_type == job_type)
                .order_by(held_jobs.c.id)
            )
        )
        if rows:
            conn.execute(
                insert(outbox),
                [{"kind": "DispatchJob", "payload": r.payload, "created_at": now} for r in rows],
            )
            conn.execute(delete(held_jobs).where(held_jobs.c.id.in_([r.id for r in rows])))
        if audited is not None:
            audit.record(conn, [audit.done_row(audited, now, more={"held": len(rows)})])
    _forget(engine)
    return len(rows)


def hold(engine: Engine, outbox_id: int, job_type: str, now: datetime) -> str:
    """Move one outbox job row into ``held_jobs`` if its type is (still) paused.

    Returns ``held``, ``gone`` (another relay took the row) or ``not paused``. The pause
    row is locked first, so a resume either sees this held row or runs before it and
    this finds the type unpaused; no job is left in ``held_jobs`` of an unpaused type.
    """
    with engine.begin() as conn:
        pause_row = conn.execute(
            select(job_type_pauses.c.job_type)
            .where(job_type_pauses.c.job_type == job_type)
            .with_for_update()
        ).first()
        if pause_row is None:
            _forget(engine)
            return "not paused"
        row = conn.execute(select(outbox.c.payload).where(outbox.c.id == outbox_id)).first()
        if row is None:
            return "gone"
        conn.execute(insert(held_jobs).values(job_type=job_type, payload=row.payload, held_at=now))
        conn.execute(delete(outbox).where(outbox.c.id == outbox_id))
    return "held"

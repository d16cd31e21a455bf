"""The deadline table: claim due rows, fire them, settle failures (beat-driven).

Three steps, and the order is the point (FIX-027):

1. ``claim_due`` marks due rows as taken for ``deadline_claim_seconds`` with a fresh
   claim token — it never deletes. A claimer that dies leaves a claim that simply
   expires, and the next scan claims the row again; nothing is lost.
2. ``fire`` applies ``TimerFired`` through ``Store.apply``. The deadline row is
   deleted ONLY by the transaction that applied the trigger (the hold sync removes it
   because the fired wait left the checkpoint, or moves it to the cycle's next due
   time). The claim token is checked inside that transaction, under the instance
   lock, so a fire whose claim was taken over by another scan does nothing.
3. If the apply FAILS (the pinned version is not deployed here, a checkpoint too new
   or corrupt, …) the row is kept and, in a separate transaction, unclaimed and
   pushed to ``now + wake_retry_backoff`` with ``attempts`` + 1, ``last_error`` and a
   ``WakeFailed`` fact. The irreversible step (losing the hold) never precedes the
   fallible one (applying the trigger); deploying the missing version heals the
   instance at the next retry, with no restart and no sweeper. The backoff keeps the
   retries at a bounded cadence instead of spinning on a row that is always due.

Regression canaries: ``test_failed_fire_keeps_the_row`` and
``test_failed_fire_backs_off`` in tests/integration/test_deadlines.py.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, and_, insert, select, tuple_, update

from engine_core.triggers import TimerFired
from persistence.store import Applied, Store
from persistence.tables import deadlines, facts, instances

__all__ = ["Claim", "FireOutcome", "claim_due", "fire"]

log = logging.getLogger("dormant.scheduler")


@dataclass(frozen=True, slots=True)
class Claim:
    instance_id: str
    wait_id: str
    claim_token: str
    due_at: datetime


@dataclass(frozen=True, slots=True)
class FireOutcome:
    """``status``: 'fired' (applied, or stale and acknowledged), 'skipped' (the row is
    gone or claimed by someone else), 'failed' (kept, backed off until ``retry_at``)."""

    instance_id: str
    wait_id: str
    status: str
    applied: Applied | None = None
    error: str | None = None
    retry_at: datetime | None = None


def claim_due(store: Store, now: datetime, limit: int = 100) -> list[Claim]:
    """Claim up to ``limit`` due rows whose claim is absent or expired.

    PostgreSQL: ``SELECT … FOR UPDATE SKIP LOCKED`` then UPDATE in one transaction, so
    concurrent scanners (two beats, a slow scan) never claim the same row. SQLite:
    one ``UPDATE … RETURNING`` under ``BEGIN IMMEDIATE`` (the database write lock).
    Cost is an index range scan on ``due_at``: flat in the number of waiting timers.
    """
    token = uuid.uuid4().hex
    until = now + timedelta(seconds=store.settings.deadline_claim_seconds)
    due = and_(
        deadlines.c.due_at <= now,
        (deadlines.c.claimed_until.is_(None)) | (deadlines.c.claimed_until <= now),
    )
    with store._tx() as conn:
        if store.is_postgres:
            picked = conn.execute(
                select(deadlines.c.instance_id, deadlines.c.wait_id, deadlines.c.due_at)
                .where(due)
                .order_by(deadlines.c.due_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            ).all()
            if not picked:
                return []
            conn.execute(
                update(deadlines)
                .where(
                    tuple_(deadlines.c.instance_id, deadlines.c.wait_id).in_(
                        [(r.instance_id, r.wait_id) for r in picked]
                    )
                )
                .values(claimed_until=until, claim_token=token)
            )
            rows = picked
        else:
            inner = (
                select(deadlines.c.instance_id, deadlines.c.wait_id)
                .where(due)
                .order_by(deadlines.c.due_at)
                .limit(limit)
            )
            rows = conn.execute(
                update(deadlines)
                .where(tuple_(deadlines.c.instance_id, deadlines.c.wait_id).in_(inner))
                .values(claimed_until=until, claim_token=token)
                .returning(deadlines.c.instance_id, deadlines.c.wait_id, deadlines.c.due_at)
            ).all()
    claims = [Claim(r.instance_id, r.wait_id, token, r.due_at) for r in rows]
    return sorted(claims, key=lambda c: (c.due_at, c.instance_id, c.wait_id))


def _holds_claim(instance_id: str, wait_id: str, claim_token: str):  # type: ignore[no-untyped-def]
    def check(conn: Connection) -> bool:
        return (
            conn.execute(
                select(deadlines.c.wait_id).where(
                    deadlines.c.instance_id == instance_id,
                    deadlines.c.wait_id == wait_id,
                    deadlines.c.claim_token == claim_token,
                )
            ).first()
            is not None
        )

    return check


def fire(
    store: Store, instance_id: str, wait_id: str, claim_token: str, now: datetime
) -> FireOutcome:
    """Apply the claimed deadline; on failure keep it and back off (module docstring)."""
    try:
        applied = store.apply(
            instance_id,
            TimerFired(wait_id=wait_id),
            now,
            precondition=_holds_claim(instance_id, wait_id, claim_token),
        )
    except Exception as exc:
        return _settle_failure(store, instance_id, wait_id, claim_token, now, exc)
    if applied.skipped:
        return FireOutcome(instance_id, wait_id, "skipped", applied)
    return FireOutcome(instance_id, wait_id, "fired", applied)


def _settle_failure(
    store: Store, instance_id: str, wait_id: str, claim_token: str, now: datetime, exc: Exception
) -> FireOutcome:
    """Keep the row, release the claim, push it out by the backoff, record why.

    A separate transaction from the failed apply (which rolled back): the failure must
    be recorded even though the trigger could not be. Matching on the claim token
    means a claim taken over meanwhile is left to its new owner.
    """
    retry_at = now + timedelta(seconds=store.settings.wake_backoff)
    cause = type(exc).__name__
    error = f"{cause}: {exc}"[:2000]
    with store._tx() as conn:
        row = conn.execute(
            update(deadlines)
            .where(
                deadlines.c.instance_id == instance_id,
                deadlines.c.wait_id == wait_id,
                deadlines.c.claim_token == claim_token,
            )
            .values(
                claimed_until=None,
                claim_token=None,
                due_at=retry_at,
                attempts=deadlines.c.attempts + 1,
                last_error=error,
            )
            .returning(deadlines.c.attempts)
        ).first()
        if row is None:
            return FireOutcome(instance_id, wait_id, "skipped", error=error)
        attempt = int(row.attempts)
        revision = conn.execute(
            select(instances.c.revision).where(instances.c.id == instance_id)
        ).scalar()
        conn.execute(
            insert(facts).values(
                instance_id=instance_id,
                revision=revision,
                at=now,
                kind="WakeFailed",
                details={"wait_id": wait_id, "cause_class": cause, "attempt": attempt},
            )
        )
    log.warning(
        "wake of instance %s (wait %s) failed, attempt %d: %s; the deadline is kept and "
        "retried at %s",
        instance_id,
        wait_id,
        attempt,
        cause,
        retry_at.isoformat(),
    )
    return FireOutcome(instance_id, wait_id, "failed", error=error, retry_at=retry_at)

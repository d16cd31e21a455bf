"""The deadline table: claim due rows, fire them, settle failures (beat-driven).

Three steps, and the order is the point (docs/waits.md, A failed wake keeps its hold):

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

Timer start events are definition-level deadlines (``start_timers``, see
persistence/start_timers.py), claimed by the same scan and fired through the same
``fire``: their claims are of kind ``ClaimKind.START_TIMER`` and carry the process key
and the start node where an instance deadline's carry the instance and the wait, so
the Celery shell needs no second task. Firing one
starts the instance AND arms the next repetition in one transaction; a failure keeps
the row and backs it off exactly like an instance deadline.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection, Table, and_, delete, insert, select, tuple_, update

from dormant.engine_core.arming import next_repetition
from dormant.engine_core.model import TimerSpec
from dormant.engine_core.triggers import TimerFired
from dormant.persistence.outbox_queue import OutboxRow
from dormant.persistence.results import outcome_word
from dormant.persistence.start_timers import START_TIMER_PREFIX, is_start_timer, start_instance_id
from dormant.persistence.store import Applied, NewInstance, Store, log_raised_incidents
from dormant.persistence.tables import deadlines, facts, instances, start_timers

__all__ = ["Claim", "ClaimKind", "FireOutcome", "FireStatus", "claim_due", "fire", "release"]

log = logging.getLogger("dormant.scheduler")


class ClaimKind(StrEnum):
    DEADLINE = "deadline"  # an instance's wait: (instance id, wait id)
    START_TIMER = "start_timer"  # a definition's timer start: (process key, start node id)


@dataclass(frozen=True, slots=True)
class Claim:
    """A claimed due row. For ``START_TIMER``, ``instance_id`` is the process key and
    ``wait_id`` the start node (no instance exists yet)."""

    instance_id: str
    wait_id: str
    claim_token: str
    due_at: datetime
    kind: ClaimKind = ClaimKind.DEADLINE


class FireStatus(StrEnum):
    FIRED = "fired"  # applied, or stale and acknowledged
    SKIPPED = "skipped"  # the row is gone or claimed by someone else
    FAILED = "failed"  # kept, backed off until retry_at


@dataclass(frozen=True, slots=True)
class FireOutcome:
    """``status``: 'fired' (applied, or stale and acknowledged), 'skipped' (the row is
    gone or claimed by someone else), 'failed' (kept, backed off until ``retry_at``)."""

    instance_id: str
    wait_id: str
    status: FireStatus
    applied: Applied | None = None
    error: str | None = None
    retry_at: datetime | None = None

    @property
    def outbox_ids(self) -> list[int]:
        return list(self.applied.outbox_ids) if self.applied is not None else []

    @property
    def outbox_rows(self) -> list[OutboxRow]:
        return self.applied.outbox_rows if self.applied is not None else []

    @property
    def inbox_marked(self) -> bool:
        return False  # a deadline has no inbox row

    @property
    def steps(self) -> list[Applied]:
        return [self.applied] if self.applied is not None else []

    @property
    def outcome(self) -> str:
        return outcome_word(
            self.steps,
            skipped=self.status == FireStatus.SKIPPED,
            failed=self.status == FireStatus.FAILED,
        )

    def summary(self) -> str:
        inner = (
            self.applied.summary() if self.applied is not None else f"instance={self.instance_id}"
        )
        return f"{inner} wait={self.wait_id} {self.status}" + (
            f" ({self.error})" if self.error else ""
        )


def claim_due(store: Store, now: datetime, limit: int = 100) -> list[Claim]:
    """Claim up to ``limit`` due rows whose claim is absent or expired.

    PostgreSQL: ``SELECT … FOR UPDATE SKIP LOCKED`` then UPDATE in one transaction, so
    concurrent scanners (two beats, a slow scan) never claim the same row. SQLite:
    one ``UPDATE … RETURNING`` under ``BEGIN IMMEDIATE`` (the database write lock).
    Cost is an index range scan on ``due_at``: flat in the number of waiting timers.
    """
    token = uuid.uuid4().hex
    until = now + timedelta(seconds=store.settings.deadline_claim_seconds)
    claims = [
        Claim(r.key, r.node_id, token, r.due_at, ClaimKind.START_TIMER)
        for r in _claim_rows(
            store,
            start_timers,
            (start_timers.c.key, start_timers.c.node_id),
            now,
            until,
            token,
            limit,
        )
    ]
    claims += [
        Claim(r.instance_id, r.wait_id, token, r.due_at)
        for r in _claim_rows(
            store,
            deadlines,
            (deadlines.c.instance_id, deadlines.c.wait_id),
            now,
            until,
            token,
            limit - len(claims),
        )
    ]
    return sorted(claims, key=lambda c: (c.due_at, c.instance_id, c.wait_id))


def _claim_rows(
    store: Store,
    table: Table,
    pk: tuple[Any, Any],
    now: datetime,
    until: datetime,
    token: str,
    limit: int,
) -> list[Any]:
    """Claim due, unclaimed rows of ``table`` (``deadlines`` or ``start_timers``)."""
    if limit <= 0:
        return []
    due = and_(
        table.c.due_at <= now,
        (table.c.claimed_until.is_(None)) | (table.c.claimed_until <= now),
    )
    with store.transaction() as conn:
        if store.is_postgres:
            picked = conn.execute(
                select(*pk, table.c.due_at)
                .where(due)
                .order_by(table.c.due_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            ).all()
            if not picked:
                return []
            conn.execute(
                update(table)
                .where(tuple_(*pk).in_([tuple(r)[:2] for r in picked]))
                .values(claimed_until=until, claim_token=token)
            )
            return list(picked)
        inner = select(*pk).where(due).order_by(table.c.due_at).limit(limit)
        return list(
            conn.execute(
                update(table)
                .where(tuple_(*pk).in_(inner))
                .values(claimed_until=until, claim_token=token)
                .returning(*pk, table.c.due_at)
            ).all()
        )


def release(store: Store, claims: Sequence[Claim]) -> int:
    """Give back claims whose fires were never sent (their batch's publish failed), so
    the next scan claims them at once rather than when the claims expire
    (``deadline_claim_seconds``, 30 s by default): a broker that refused one publish
    delays those timers by a scan period, not by the claim. Matched on the claim token,
    so a claim another scan has taken meanwhile is left to it. Returns the rows given
    back; a failure here (the database away too) leaves the claims to expire."""
    by_kind: dict[ClaimKind, list[Claim]] = {}
    for claim in claims:
        by_kind.setdefault(claim.kind, []).append(claim)
    released = 0
    with store.transaction() as conn:
        for kind, mine in by_kind.items():
            table = start_timers if kind is ClaimKind.START_TIMER else deadlines
            pk = (
                (start_timers.c.key, start_timers.c.node_id)
                if kind is ClaimKind.START_TIMER
                else (deadlines.c.instance_id, deadlines.c.wait_id)
            )
            for token in {c.claim_token for c in mine}:
                keys = [(c.instance_id, c.wait_id) for c in mine if c.claim_token == token]
                released += conn.execute(
                    update(table)
                    .where(tuple_(*pk).in_(keys), table.c.claim_token == token)
                    .values(claimed_until=None, claim_token=None)
                ).rowcount
    return released


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
    store: Store,
    instance_id: str,
    wait_id: str,
    claim_token: str,
    now: datetime,
    kind: ClaimKind = ClaimKind.DEADLINE,
) -> FireOutcome:
    """Apply the claimed deadline; on failure keep it and back off (module docstring)."""
    if is_start_timer(instance_id):  # a fire queued by a version that marked it in the id
        kind, instance_id = ClaimKind.START_TIMER, instance_id[len(START_TIMER_PREFIX) :]
    if kind is ClaimKind.START_TIMER:
        return _fire_start_timer(store, instance_id, wait_id, claim_token, now)
    try:
        applied = store.apply(
            instance_id,
            TimerFired(wait_id=wait_id),
            now,
            precondition=_holds_claim(instance_id, wait_id, claim_token),
        )
    except Exception as exc:
        return _settle_failure(store, kind, instance_id, wait_id, claim_token, now, exc)
    if applied.skipped:
        return FireOutcome(instance_id, wait_id, FireStatus.SKIPPED, applied)
    return FireOutcome(instance_id, wait_id, FireStatus.FIRED, applied)


def _settle_failure(
    store: Store,
    kind: ClaimKind,
    instance_id: str,
    wait_id: str,
    claim_token: str,
    now: datetime,
    exc: Exception,
) -> FireOutcome:
    """Keep the row, release the claim, push it out by the backoff, record why.

    A separate transaction from the failed apply (which rolled back): the failure must
    be recorded even though the trigger could not be. Matching on the claim token
    means a claim taken over meanwhile is left to its new owner.
    """
    retry_at = now + timedelta(seconds=store.settings.wake_backoff)
    cause = type(exc).__name__
    error = f"{cause}: {exc}"[:2000]
    start_timer = kind is ClaimKind.START_TIMER
    table = start_timers if start_timer else deadlines
    where = (
        and_(start_timers.c.key == instance_id, start_timers.c.node_id == wait_id)
        if start_timer
        else and_(deadlines.c.instance_id == instance_id, deadlines.c.wait_id == wait_id)
    )
    with store.transaction() as conn:
        row = conn.execute(
            update(table)
            .where(where, table.c.claim_token == claim_token)
            .values(
                claimed_until=None,
                claim_token=None,
                due_at=retry_at,
                attempts=table.c.attempts + 1,
                last_error=error,
            )
            .returning(table.c.attempts)
        ).first()
        if row is None:
            return FireOutcome(instance_id, wait_id, FireStatus.SKIPPED, error=error)
        attempt = int(row.attempts)
        if start_timer:
            # No instance exists to carry a fact: the row's attempts/last_error and
            # the log line below are the record.
            log.warning(
                "start timer %s (node %s) failed, attempt %d: %s; kept, retried at %s",
                instance_id,
                wait_id,
                attempt,
                cause,
                retry_at.isoformat(),
            )
            return FireOutcome(
                instance_id, wait_id, FireStatus.FAILED, error=error, retry_at=retry_at
            )
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
    return FireOutcome(instance_id, wait_id, FireStatus.FAILED, error=error, retry_at=retry_at)


def _fire_start_timer(
    store: Store, key: str, node_id: str, claim_token: str, now: datetime
) -> FireOutcome:
    """Start one instance for a claimed start timer and arm its next repetition.

    One transaction: the row is locked and its claim checked, the instance is created
    and started, and the row moves to the next repetition (or is deleted after the
    last) — so a crash leaves either both or neither. The instance id comes from the
    due time being fired, so even a fire repeated behind a lost claim starts nothing
    twice. An overdue cycle (beat was down) fires ONCE, then continues from now
    (``next_cycle_due``), never a burst of catch-up starts.
    """
    where = and_(
        start_timers.c.key == key,
        start_timers.c.node_id == node_id,
        start_timers.c.claim_token == claim_token,
    )
    try:
        with store.transaction() as conn:
            row = conn.execute(select(start_timers).where(where).with_for_update()).first()
            if row is None:
                return FireOutcome(key, node_id, FireStatus.SKIPPED)
            instance_id = start_instance_id(key, row.version, node_id, row.due_at)
            new = NewInstance(key, instance_id, version=row.version, start_node_id=node_id)
            applied = store.start_in(conn, new, now=now)
            definition, _ = store.deployments.definition(key, row.version, conn=conn)
            node = definition.nodes.get(node_id)
            _arm_next(conn, row, where, now, node.event.timer if node is not None else None)
    except Exception as exc:
        return _settle_failure(store, ClaimKind.START_TIMER, key, node_id, claim_token, now, exc)
    log_raised_incidents(applied)
    log.info("start timer %s/%s v%d started instance %s", key, node_id, row.version, instance_id)
    return FireOutcome(key, node_id, FireStatus.FIRED, applied)


def _arm_next(
    conn: Connection, row: Any, where: Any, now: datetime, spec: TimerSpec | None
) -> None:
    """The next repetition of a cycle, unclaimed and fresh; a one-shot timer is done.

    ``spec`` (the start event's timer) lets a cron cycle follow its own calendar; the
    rule is the core's, the same as for an instance's timer waits (``next_repetition``)."""
    repetition = next_repetition(
        row.due_at, row.interval_seconds, row.cycle_remaining, now, spec=spec
    )
    if repetition is None:
        conn.execute(delete(start_timers).where(where))
        return
    conn.execute(
        update(start_timers)
        .where(where)
        .values(
            due_at=repetition.due_at,
            cycle_remaining=repetition.cycle_remaining,
            claimed_until=None,
            claim_token=None,
            attempts=0,
            last_error=None,
        )
    )

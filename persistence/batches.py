"""Bulk operations: a durable batch, run one target at a time, each its own trigger.

A batch is a row (the operation, what selected it, the counts) and one item row per
selected target, all written in the transaction that creates it. Running it applies
each pending item's trigger through ``Store.apply`` (never one giant transaction), and
marks the item done IN THAT SAME TRANSACTION (``also``), so an item is either applied
and counted or neither. The item's trigger id (``batch:<id>:<seq>``) makes applying it
again a duplicate, which is how a re-run after a crash counts nothing twice.

A runner holds the batch by a claim with an expiry, renewed as it goes; it works for
at most ``budget_seconds`` and then hands over (the shell re-enqueues the next slice).
A runner killed in the middle leaves a claim that expires, and the sweep enqueues the
batch again: it survives a worker restart with exact counts.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import OperationalError

from dormant.engine_core.errors import (
    DormantError,
    InvalidOperation,
    UnknownIncident,
    UnknownInstance,
)
from dormant.engine_core.triggers import (
    Cancel,
    IncidentDrop,
    IncidentResolve,
    IncidentRetry,
    MigrateInstance,
    Resume,
    SetVariables,
    Suspend,
    Trigger,
)
from dormant.persistence import audit
from dormant.persistence.selection import INCIDENT_OPERATIONS, Selector, Target, select_targets
from dormant.persistence.store import Store
from dormant.persistence.tables import batch_items, batches

__all__ = [
    "BatchItemView",
    "BatchState",
    "BatchView",
    "ItemOutcome",
    "batch",
    "create",
    "list_batches",
    "run",
    "stalled",
]

log = logging.getLogger("dormant.batches")


class BatchState(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"


class ItemOutcome(StrEnum):
    """An item's outcome, recorded once; an item without one is still pending."""

    APPLIED = "applied"
    REFUSED = "refused"


_TRIGGERS: dict[str, Callable[[dict[str, Any], str], Trigger]] = {
    "incident_retry": lambda p, target: IncidentRetry(incident_id=target, actor=_actor(p)),
    "incident_resolve": lambda p, target: IncidentResolve(incident_id=target, actor=_actor(p)),
    "incident_drop": lambda p, target: IncidentDrop(incident_id=target, actor=_actor(p)),
    "cancel": lambda p, target: Cancel(actor=_actor(p)),
    "suspend": lambda p, target: Suspend(actor=_actor(p)),
    "resume": lambda p, target: Resume(actor=_actor(p)),
    "migrate": lambda p, target: MigrateInstance(**p),
    "set_variables": lambda p, target: SetVariables(**p),
}


def _actor(params: dict[str, Any]) -> str | None:
    """Who asked for the batch (the Client's actor, kept in its parameters): each item's
    trigger carries it, so every instance's history names them (docs/operations.md,
    "Audit trail")."""
    actor = params.get("actor")
    return actor if isinstance(actor, str) else None


# How a report names what was done.
DONE_WORD = {
    "incident_retry": "retried",
    "incident_resolve": "resolved",
    "incident_drop": "dropped",
    "cancel": "cancelled",
    "suspend": "suspended",
    "resume": "resumed",
    "migrate": "migrated",
    "set_variables": "changed",
}


@dataclass(frozen=True, slots=True)
class BatchItemView:
    seq: int
    target_id: str
    instance_id: str | None
    outcome: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class BatchView:
    id: str
    operation: str
    selector: dict[str, Any]
    params: dict[str, Any]
    state: str
    selected: int
    applied: int
    refused: int
    created_at: datetime
    finished_at: datetime | None
    # The refusals, by reason (each names its target), for an honest report.
    refusals: list[str] = field(default_factory=list)

    @property
    def done(self) -> int:
        return self.applied + self.refused

    def report(self) -> str:
        """``selected 15, retried 12, refused 3: <reasons>``."""
        word = DONE_WORD.get(self.operation, "applied")
        text = f"selected {self.selected}, {word} {self.applied}, refused {self.refused}"
        if self.state != BatchState.COMPLETED:
            text += f", pending {self.selected - self.done}"
        if self.refusals:
            text += ": " + summarise(self.refusals)
        return text


def summarise(reasons: list[str], shown: int = 3) -> str:
    """Refusals grouped by error class, with a few of the messages."""
    classes = Counter(r.partition(":")[0] for r in reasons)
    head = ", ".join(f"{n} {cls}" for cls, n in classes.most_common())
    examples = "; ".join(reasons[:shown])
    more = f"; ... {len(reasons) - shown} more" if len(reasons) > shown else ""
    return f"{head} ({examples}{more})"


def create(
    store: Store,
    operation: str,
    selector: Selector,
    params: dict[str, Any],
    now: datetime,
    audited: Mapping[str, Any] | None = None,
) -> BatchView:
    """Select the targets and write the batch with one item per target, in one commit;
    with ``audited`` (an operator's command, persistence/audit.py) its ``done`` row in
    that same commit, naming the batch and how many it selected."""
    if operation not in _TRIGGERS:
        raise InvalidOperation(f"no bulk operation {operation!r}; one of {', '.join(_TRIGGERS)}")
    try:  # the parameters are checked before anything is written
        _TRIGGERS[operation](params, "-")
    except ValidationError as exc:
        raise InvalidOperation(
            f"{operation}: parameters do not fit: {exc.errors()[0]['msg']}"
        ) from exc
    batch_id = uuid.uuid4().hex
    with store.transaction() as conn:
        targets = select_targets(conn, operation, selector)
        conn.execute(
            insert(batches).values(
                id=batch_id,
                operation=operation,
                selector=selector.model_dump(mode="json", exclude_defaults=True),
                params=params,
                state=(BatchState.RUNNING if targets else BatchState.COMPLETED).value,
                selected=len(targets),
                applied=0,
                refused=0,
                created_at=now,
                updated_at=now,
                finished_at=None if targets else now,
            )
        )
        if targets:
            conn.execute(
                insert(batch_items),
                [
                    {"batch_id": batch_id, "seq": i, "target_id": t.target_id}
                    | {"instance_id": t.instance_id}
                    for i, t in enumerate(targets)
                ],
            )
        if audited is not None:
            done = audit.done_row(
                audited, now, target=f"batch {batch_id}", more={"selected": len(targets)}
            )
            audit.record(conn, [done])
    found = batch(store, batch_id)
    assert found is not None
    return found


def preview(store: Store, operation: str, selector: Selector) -> list[Target]:
    """What a batch would select (a dry run): nothing is written."""
    with store.read() as conn:
        return select_targets(conn, operation, selector)


def _view(conn: Connection, row: Any) -> BatchView:
    refusals = list(
        conn.execute(
            select(batch_items.c.reason)
            .where(
                batch_items.c.batch_id == row.id, batch_items.c.outcome == ItemOutcome.REFUSED.value
            )
            .order_by(batch_items.c.seq)
            .limit(50)
        ).scalars()
    )
    return BatchView(
        id=row.id,
        operation=row.operation,
        selector=dict(row.selector),
        params=dict(row.params),
        state=row.state,
        selected=row.selected,
        applied=row.applied,
        refused=row.refused,
        created_at=row.created_at,
        finished_at=row.finished_at,
        refusals=[r or "" for r in refusals],
    )


def batch(store: Store, batch_id: str) -> BatchView | None:
    with store.read() as conn:
        row = conn.execute(select(batches).where(batches.c.id == batch_id)).first()
        return None if row is None else _view(conn, row)


def items(store: Store, batch_id: str) -> list[BatchItemView]:
    with store.read() as conn:
        rows = conn.execute(
            select(batch_items)
            .where(batch_items.c.batch_id == batch_id)
            .order_by(batch_items.c.seq)
        )
        return [BatchItemView(r.seq, r.target_id, r.instance_id, r.outcome, r.reason) for r in rows]


def list_batches(store: Store, limit: int = 100) -> list[BatchView]:
    with store.read() as conn:
        rows = list(
            conn.execute(select(batches).order_by(batches.c.created_at.desc()).limit(limit))
        )
        return [_view(conn, r) for r in rows]


def stalled(store: Store, now: datetime) -> list[str]:
    """Running batches nobody holds (never started, or their runner died)."""
    with store.read() as conn:
        return list(
            conn.execute(
                select(batches.c.id).where(
                    batches.c.state == BatchState.RUNNING.value,
                    (batches.c.claimed_until.is_(None)) | (batches.c.claimed_until <= now),
                )
            ).scalars()
        )


def _claim(store: Store, batch_id: str, token: str | None, now: datetime, seconds: float) -> bool:
    """Take (``token`` new) or renew the claim; False when someone else holds it."""
    held = batches.c.claim_token == token
    free = (batches.c.claimed_until.is_(None)) | (batches.c.claimed_until <= now)
    with store.transaction() as conn:
        done = conn.execute(
            update(batches)
            .where(
                batches.c.id == batch_id, batches.c.state == BatchState.RUNNING.value, held | free
            )
            .values(claimed_until=now + timedelta(seconds=seconds), claim_token=token)
        )
        return bool(done.rowcount == 1)


def _mark(
    conn: Connection,
    batch_id: str,
    seq: int,
    outcome: ItemOutcome,
    reason: str | None,
    now: datetime,
) -> None:
    """Record an item's outcome once; the counters move only with that first record."""
    done = conn.execute(
        update(batch_items)
        .where(
            batch_items.c.batch_id == batch_id,
            batch_items.c.seq == seq,
            batch_items.c.outcome.is_(None),
        )
        .values(outcome=outcome.value, reason=reason, done_at=now)
    )
    if done.rowcount != 1:
        return
    counter = batches.c.applied if outcome == ItemOutcome.APPLIED else batches.c.refused
    conn.execute(
        update(batches)
        .where(batches.c.id == batch_id)
        .values({counter.name: counter + 1, "updated_at": now})
    )


def _apply_item(
    store: Store, batch_id: str, operation: str, params: dict[str, Any], item: Any, now: datetime
) -> None:
    seq = int(item.seq)
    instance_id = item.instance_id
    try:
        if instance_id is None and operation in INCIDENT_OPERATIONS:
            raise UnknownIncident(f"no incident {item.target_id!r}")
        if instance_id is None:  # another tenant's, to a batch of one tenant
            raise UnknownInstance(f"no instance {item.target_id!r} in the batch's tenant")
        trigger = _TRIGGERS[operation](params, item.target_id)
        applied = store.apply(
            instance_id,
            trigger,
            now,
            trigger_id=f"batch:{batch_id}:{seq}",
            also=lambda writes: _mark(writes.conn, batch_id, seq, ItemOutcome.APPLIED, None, now),
        )
    except OperationalError:
        raise  # the database is away: stop; the claim expires and the sweep resumes
    except DormantError as exc:
        reason = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # never lose the item: it is refused with its cause, logged
        log.exception("batch %s item %s (%s) failed", batch_id, seq, item.target_id)
        reason = f"{type(exc).__name__}: {exc}"
    else:
        if applied.changed and not applied.duplicate:
            return  # marked in the apply's own transaction
        outcome = ItemOutcome.APPLIED if applied.duplicate else ItemOutcome.REFUSED
        stale = None if applied.duplicate else f"Stale: {item.target_id}: nothing to do"
        with store.transaction() as conn:
            _mark(conn, batch_id, seq, outcome, stale, now)
        return
    with store.transaction() as conn:
        _mark(conn, batch_id, seq, ItemOutcome.REFUSED, reason[:2000], now)


def run(
    store: Store,
    batch_id: str,
    clock: Callable[[], datetime],
    *,
    claim_seconds: float,
    budget_seconds: float = 20.0,
) -> bool:
    """Work on the batch for up to ``budget_seconds``; True when more is left to do.

    Returns False (nothing to do here) when another runner holds the batch or it is
    complete. Between items the claim is renewed; a runner that lost it stops.
    """
    token = uuid.uuid4().hex
    if not _claim(store, batch_id, token, clock(), claim_seconds):
        return False
    with store.read() as conn:
        row = conn.execute(select(batches).where(batches.c.id == batch_id)).first()
    if row is None:
        return False
    started = renewed = time.monotonic()
    while True:
        with store.read() as conn:
            pending = list(
                conn.execute(
                    select(batch_items)
                    .where(batch_items.c.batch_id == batch_id, batch_items.c.outcome.is_(None))
                    .order_by(batch_items.c.seq)
                    .limit(50)
                )
            )
        if not pending:
            _finish(store, batch_id, token, clock())
            return False
        for item in pending:
            if time.monotonic() - started > budget_seconds:
                _release(store, batch_id, token)
                return True
            if time.monotonic() - renewed > claim_seconds / 3:
                if not _claim(store, batch_id, token, clock(), claim_seconds):
                    return False
                renewed = time.monotonic()
            _apply_item(store, batch_id, row.operation, dict(row.params), item, clock())


def _finish(store: Store, batch_id: str, token: str, now: datetime) -> None:
    with store.transaction() as conn:
        conn.execute(
            update(batches)
            .where(batches.c.id == batch_id, batches.c.claim_token == token)
            .values(
                state=BatchState.COMPLETED.value,
                finished_at=now,
                updated_at=now,
                claimed_until=None,
                claim_token=None,
            )
        )


def _release(store: Store, batch_id: str, token: str) -> None:
    with store.transaction() as conn:
        conn.execute(
            update(batches)
            .where(batches.c.id == batch_id, batches.c.claim_token == token)
            .values(claimed_until=None, claim_token=None)
        )

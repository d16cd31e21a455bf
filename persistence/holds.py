"""The hold sync: project the checkpoint's armed waits into the hold tables.

Invariant (the reason this module exists): a wait is in ``checkpoint.waits`` iff its
hold rows exist. ``sync_holds`` runs inside the transaction that writes the checkpoint,
diffing the old and new wait sets BY WAIT ID, so a wait that disappeared loses its rows
whatever ended it (fired, cancelled by a boundary, withdrawn by a gateway race,
instance terminated) — withdrawal is total by construction, with no per-path cleanup.
Wait ids are never reused, so "same id" always means "same wait".

Nothing here knows BPMN: which rows a wait implies is read off its fields
(``due_at`` → deadline, message/signal → subscription, user_task → task row).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, any_, bindparam, delete, insert, select, text, update
from sqlalchemy.dialects.postgresql import ARRAY

from dormant.engine_core.checkpoint import Wait, WaitKind
from dormant.engine_core.effects import DeliverBuffered, encode_effect
from dormant.engine_core.tenants import DEFAULT_TENANT
from dormant.engine_core.triggers import MessageReceived
from dormant.persistence.outbox_queue import OutboxRow
from dormant.persistence.tables import (
    deadlines,
    message_correlations,
    messages,
    outbox,
    subscriptions,
    user_task_candidates,
    user_tasks,
)
from dormant.persistence.writes import Writes

__all__ = ["BufferedDelivery", "lock_message_key", "sync_holds"]


@dataclass(frozen=True, slots=True)
class BufferedDelivery:
    """A buffered message this transaction consumed for a new subscription; ``row``
    is the outbox row that carries it (published after the commit)."""

    row: OutboxRow
    message_id: str
    wait_id: str

    @property
    def outbox_id(self) -> int:
        return self.row.id


def lock_message_key(conn: Connection, name: str, correlation_key: str | None) -> None:
    """Serialise "a subscription appears" against "a message is buffered" for one
    (name, key) on PostgreSQL, so neither can miss the other under READ COMMITTED.

    Both the hold sync (before it looks in the buffer) and the router (before it decides
    to buffer) take this transaction-scoped advisory lock; whoever comes second sees the
    first's committed row. On SQLite ``BEGIN IMMEDIATE`` already serialises everything.
    """
    if conn.dialect.name != "postgresql":
        return
    lock_id = zlib.crc32(f"{name}\x00{correlation_key or ''}".encode()) - 2**31
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_id})


def _deadline_row(instance_id: str, w: Wait) -> dict[str, Any]:
    return {"instance_id": instance_id, "wait_id": w.id, "due_at": w.due_at, "attempts": 0}


def _subscription_row(instance_id: str, w: Wait, tenant: str = DEFAULT_TENANT) -> dict[str, Any]:
    message = w.kind is WaitKind.MESSAGE
    return {
        "tenant_id": tenant,
        "instance_id": instance_id,
        "wait_id": w.id,
        "kind": "message" if message else "signal",
        "name": (w.message_name if message else w.signal_name) or "",
        "correlation_key": w.correlation_key if message else None,
    }


def _task_fields(w: Wait) -> dict[str, Any]:
    """The columns of a task row that follow its wait (assign, update, listeners)."""
    return {
        "node_id": w.node_id,
        "assignee": w.assignee,
        "due_date": w.due_date,
        "follow_up_date": w.follow_up_date,
        "priority": w.priority,
        "form_key": w.form_key,
        "form_id": w.form_id,
        "external_reference": w.external_reference,
        "state": w.task_state.value,
        "denied_reason": w.denied_reason,
    }


def _task_row(instance_id: str, w: Wait, now: datetime, tenant: str) -> dict[str, Any]:
    return {
        "tenant_id": tenant,
        "task_id": f"{instance_id}.{w.id}",
        "instance_id": instance_id,
        "wait_id": w.id,
        "name": w.task_name,
        "created_at": now,
        **_task_fields(w),
    }


def _candidate_rows(instance_id: str, w: Wait) -> list[dict[str, Any]]:
    base = {"instance_id": instance_id, "wait_id": w.id}
    return [{**base, "kind": "user", "name": n} for n in dict.fromkeys(w.candidate_users)] + [
        {**base, "kind": "group", "name": n} for n in dict.fromkeys(w.candidate_groups)
    ]


@functools.cache
def _delete_waits(table: Any) -> Any:
    """The DELETE of an instance's hold rows by wait id, prebuilt per table with named
    parameters (persistence/writes.py ``add_prebuilt``; PostgreSQL only): the wait ids
    are one array parameter (``= ANY``), not an expanding ``IN``, whose statement
    SQLAlchemy rewrites at every execution."""
    return delete(table).where(
        table.c.instance_id == bindparam(f"{table.name}_instance"),
        table.c.wait_id
        == any_(bindparam(f"{table.name}_waits", type_=ARRAY(table.c.wait_id.type))),
    )


def _delete(writes: Writes, table: Any, instance_id: str, wait_ids: list[str]) -> None:
    if wait_ids:
        writes.add_prebuilt(
            _delete_waits(table),
            {f"{table.name}_instance": instance_id, f"{table.name}_waits": wait_ids},
            lambda: delete(table).where(
                table.c.instance_id == instance_id, table.c.wait_id.in_(wait_ids)
            ),
        )


def sync_holds(
    writes: Writes,
    instance_id: str,
    process_key: str,
    old: Mapping[str, Wait],
    new: Mapping[str, Wait],
    now: datetime,
    *,
    tenant: str = DEFAULT_TENANT,
) -> list[BufferedDelivery]:
    """Bring the hold rows of ``instance_id`` (of process ``process_key``, of
    ``tenant``) from ``old`` to ``new``; returns the buffered messages its new
    subscriptions took.

    Only the waits that changed cost a statement; every statement is queued on
    ``writes`` (one round trip with the checkpoint's own write), except where a row is
    deleted and written again under the same key (a subscription whose name or key
    changed), which is sent in between."""
    gone_dl, gone_sub, gone_task = [], [], []
    gone_candidates: list[str] = []
    add_dl, add_sub, add_task = [], [], []
    moved_dl: list[Wait] = []
    changed_task: list[Wait] = []
    new_candidates: list[Wait] = []
    for wid, w in old.items():
        n = new.get(wid)
        if w.holds_deadline and (n is None or not n.holds_deadline):
            gone_dl.append(wid)
        if w.holds_subscription and (
            n is None or _subscription_row(instance_id, n) != _subscription_row(instance_id, w)
        ):
            gone_sub.append(wid)
        if w.kind is WaitKind.USER_TASK and (n is None or n.kind is not WaitKind.USER_TASK):
            gone_task.append(wid)
            gone_candidates.append(wid)
    for wid, n in new.items():
        prev = old.get(wid)
        if n.holds_deadline:
            if prev is None or not prev.holds_deadline:
                add_dl.append(_deadline_row(instance_id, n))
            elif prev.due_at != n.due_at:
                moved_dl.append(n)
        if n.holds_subscription and (prev is None or wid in gone_sub):
            add_sub.append(_subscription_row(instance_id, n, tenant))
        if n.kind is WaitKind.USER_TASK and (prev is None or prev.kind is not WaitKind.USER_TASK):
            add_task.append(_task_row(instance_id, n, now, tenant))
            new_candidates.append(n)
        elif n.kind is WaitKind.USER_TASK and prev is not None:
            # Assigned, updated, corrected by a listener, in another lifecycle state, or
            # re-pointed by a migration: the same task id, its row follows.
            if _task_fields(prev) != _task_fields(n):
                changed_task.append(n)
            if (prev.candidate_users, prev.candidate_groups) != (
                n.candidate_users,
                n.candidate_groups,
            ):
                gone_candidates.append(wid)
                new_candidates.append(n)

    _delete(writes, deadlines, instance_id, gone_dl)
    _delete(writes, subscriptions, instance_id, gone_sub)
    _delete(writes, user_tasks, instance_id, gone_task)
    _delete(writes, user_task_candidates, instance_id, gone_candidates)
    if (
        any(r["wait_id"] in gone_sub for r in add_sub)
        or any(r["wait_id"] in gone_task for r in add_task)
        or any(n.id in gone_candidates for n in new_candidates)
    ):
        writes.flush()  # the same key deleted and written again: not in one statement
    if add_dl:
        writes.add_rows(deadlines, add_dl)
    for n in moved_dl:
        # A cycle's next repetition (same wait, new due time): a fresh, unclaimed row.
        writes.add(
            update(deadlines)
            .where(deadlines.c.instance_id == instance_id, deadlines.c.wait_id == n.id)
            .values(
                due_at=n.due_at, claimed_until=None, claim_token=None, attempts=0, last_error=None
            )
        )
    if add_sub:
        writes.add_rows(subscriptions, add_sub)
    if add_task:
        writes.add_rows(user_tasks, add_task)
    for n in changed_task:
        writes.add(
            update(user_tasks)
            .where(user_tasks.c.instance_id == instance_id, user_tasks.c.wait_id == n.id)
            .values(**_task_fields(n))
        )
    candidate_rows = [r for n in new_candidates for r in _candidate_rows(instance_id, n)]
    if candidate_rows:
        writes.add_rows(user_task_candidates, candidate_rows)
    delivered: list[BufferedDelivery] = []
    message_subs = sorted(
        (r for r in add_sub if r["kind"] == "message"),
        key=lambda r: (r["name"], r["correlation_key"] or ""),
    )
    for row in message_subs:
        found = _consume_buffered(writes, instance_id, process_key, row, now)
        if found is not None:
            delivered.append(found)
    return delivered


def _consume_buffered(
    writes: Writes, instance_id: str, process_key: str, sub: dict[str, Any], now: datetime
) -> BufferedDelivery | None:
    """Take the oldest unexpired buffered message matching a new subscription that
    ``process_key`` has not had yet (a message correlates once per process id).

    Taken in THIS transaction by inserting (message, process) into
    ``message_correlations``: its primary key lets one instance per process take it,
    while instances of other processes take it too; the outbox row that carries it
    commits with the row, and its trigger id (the message id) makes a redelivered
    outbox row a duplicate. A message buffered before correlations were kept
    (``consumed_at`` set) stays consumed.
    """
    conn = writes.conn
    name, key = sub["name"], sub["correlation_key"]
    lock_message_key(conn, name, key)
    reached = select(message_correlations.c.message_id).where(
        message_correlations.c.message_id == messages.c.message_id,
        message_correlations.c.process_key == process_key,
    )
    candidates = conn.execute(
        select(messages.c.message_id, messages.c.variables)
        .where(
            messages.c.name == name,
            messages.c.tenant_id == sub["tenant_id"],  # a message stays in its tenant
            # Not IS NOT DISTINCT FROM, which ix_messages_name_key never serves.
            messages.c.correlation_key.is_(None)
            if key is None
            else messages.c.correlation_key == key,
            messages.c.consumed_at.is_(None),
            messages.c.expires_at > now,
            ~reached.exists(),
        )
        .order_by(messages.c.received_at, messages.c.message_id)
        .limit(8)
    ).all()
    found = None
    for candidate in candidates:  # another instance of this process may take one first
        taken = conn.execute(
            writes.insert_ignoring(message_correlations)
            .values(
                message_id=candidate.message_id,
                process_key=process_key,
                instance_id=instance_id,
                at=now,
            )
            .on_conflict_do_nothing()
            .returning(message_correlations.c.message_id)
        ).first()
        if taken is not None:
            found = candidate
            break
    if found is None:
        return None
    # ``trigger_id`` (the message id) makes a re-published row a duplicate at the
    # instance.
    trigger = MessageReceived(
        wait_id=sub["wait_id"],
        name=name,
        correlation_key=key,
        variables=dict(found.variables or {}),
        message_id=found.message_id,
    )
    kind, payload = encode_effect(DeliverBuffered(instance_id, trigger))
    payload = payload | {"trigger_id": found.message_id}
    outbox_id = conn.execute(
        insert(outbox).values(kind=kind, payload=payload, created_at=now).returning(outbox.c.id)
    ).scalar_one()
    row = OutboxRow(int(outbox_id), kind, payload, now)
    return BufferedDelivery(row, found.message_id, sub["wait_id"])

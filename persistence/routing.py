"""Routing: which instances a message or signal wakes, or which it starts.

The rules are the core's plan (``engine_core/correlation.py``: which waits, start or
join, buffer or not); this module executes it against the database. Order, and why:

1. A message id already recorded in ``messages`` is a duplicate: nothing happens.
   The row is written LAST (in the last holder's own transaction, or step 4), so a
   producer's retry after a crash mid-routing is routed again, and every apply in
   step 2/3 is idempotent (trigger id = message id; start id = uuid5 of key and message
   id) — delivery is exactly once per holder. That check, the holders' lookup and
   the first holder's row lock are one statement, the first of that holder's own
   transaction (``Router._deliver_first``).
2. Per process id, the first instance holding a matching subscription gets
   ``MessageReceived`` (message cardinality: once per process id, the core's plan),
   each in its own Store transaction; the LAST holder's also records the message and
   marks the Client's inbox row when no message start is left to run, so a message
   with one holder costs one write transaction, and with several one per holder.
3. Then every latest deployed process with a message start of that name that no
   holder served: a keyed start joins a running instance with the same start key (a
   'DuplicateStart' fact, never a second instance); the partial unique index on
   (key, start_key) makes that race-safe when two such messages arrive at once.
4. Under the (name, key) advisory lock, re-check the subscriptions (one may have been
   armed meanwhile) and record the message: with ``ttl`` > 0 buffered until
   ``expires_at``, taken or not, with the processes it reached in
   ``message_correlations``; else consumed. The hold sync takes the same lock before it
   looks in the buffer, so a buffered message and a new subscription never miss, and
   takes a buffered message only for a process not in its correlations (the key of
   that table lets one instance per process take it).

Every holder on its own: each delivery (and each start) is its own transaction, and
one that raises is kept for that holder alone as a failed trigger
(that delivery to that instance, the same trigger id; ``Router``'s ``redeliver`` names
the message that sends it again) while the others
are served; the message counts as taken by its process, so no second instance of that
process takes it from the buffer. Only a database that is unavailable
(``OperationalError``) stops the round: the task retries it, and the holders already
served recognise the trigger id.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, bindparam, exists, insert, literal, select, true
from sqlalchemy.exc import OperationalError

from dormant.engine_core.correlation import (
    Holder,
    JoinRunning,
    buffer_it,
    processes_to_start,
    start_or_join,
    waits_to_wake,
)
from dormant.engine_core.effects import Fact
from dormant.engine_core.errors import InvalidMessage
from dormant.engine_core.inputs import (
    DEFAULT_LIMITS,
    Limits,
    check_name,
    check_text,
    check_ttl,
    check_variables,
)
from dormant.engine_core.tenants import DEFAULT_TENANT, check_tenant
from dormant.engine_core.triggers import MessageReceived, SignalReceived, Trigger
from dormant.persistence import round_trips
from dormant.persistence.deployments import deployments_count_column
from dormant.persistence.holds import lock_message_key
from dormant.persistence.inbox import mark_processed_statement, queue_mark_processed
from dormant.persistence.outbox_queue import OutboxRow
from dormant.persistence.results import outcome_word
from dormant.persistence.store import (
    Applied,
    Found,
    NewInstance,
    StartKeyTaken,
    Store,
    locking_instance,
)
from dormant.persistence.tables import (
    ACTIVE_STATUSES,
    instances,
    message_correlations,
    messages,
    subscriptions,
)
from dormant.persistence.unmatched import record_unmatched
from dormant.persistence.writes import Writes

__all__ = [
    "NAMESPACE",
    "MessageOutcome",
    "Redeliver",
    "Router",
    "SignalOutcome",
    "Undelivered",
    "UndeliveredApply",
    "UndeliveredStart",
    "check_message",
]


def check_message(
    name: str,
    correlation_key: Any = None,
    variables: dict[str, Any] | None = None,
    message_id: str | None = None,
    ttl: float | None = None,
    *,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[str | None, dict[str, Any], str, float | None]:
    """The one check of a message's fields (engine_core/inputs.py's limits), run by the
    Client before its inbox row and by the Router before any lookup, so both refuse the
    same message with the same error; returns the fields after the name as they are
    sent (correlation key, variables, message id, ttl). A correlation key is compared
    as text; a message without an id gets a uuid4 hex, the one default format (a
    resend with the id returned is then a duplicate)."""
    check_name(name, "message name", limits)
    key = None if correlation_key is None else str(correlation_key)
    if key is not None:
        check_text(key, f"message {name!r} correlation key", limits, InvalidMessage)
    return (
        key,
        check_variables(variables, f"message {name!r} variables", limits),
        check_text(message_id or uuid.uuid4().hex, "message id", limits, InvalidMessage),
        check_ttl(ttl, f"message {name!r} ttl", limits),
    )


@dataclass(frozen=True, slots=True)
class UndeliveredApply:
    """A delivery to one holder that raised: ``trigger`` to ``instance_id``."""

    instance_id: str
    trigger: Trigger
    trigger_id: str


@dataclass(frozen=True, slots=True)
class UndeliveredStart:
    """A message or signal start that raised; ``options``: the start's own (version,
    start node, start key)."""

    process_key: str
    instance_id: str
    variables: dict[str, Any]
    trigger_id: str
    options: dict[str, Any]


Undelivered = UndeliveredApply | UndeliveredStart
# What sends a kept delivery again: (task, routing key, kwargs). The shell's wire
# module (tasks/wire.py ``redelivery``) is the one that knows the messages.
Redeliver = Callable[[Undelivered], tuple[str, str, dict[str, Any]]]


# "The first matching subscription" of a process: the oldest instance's, then by
# instance id and wait id (deterministic on every backend).
def _holder_order(instance: Any) -> tuple[Any, ...]:
    return (instance.c.created_at, subscriptions.c.instance_id, subscriptions.c.wait_id)


HOLDER_ORDER = _holder_order(instances)


def _key_matches(key: Any) -> Any:
    """``correlation_key`` is ``key`` (or NULL when ``key`` is None), in a form the
    (kind, name, correlation_key) index serves: ``IS NOT DISTINCT FROM`` is never
    index-served, and would scan every subscription at every message."""
    column = subscriptions.c.correlation_key
    return column.is_(None) if key is None else column == key


def _first_delivery_statement(keyed: bool) -> Any:
    """The first statement of a message's first transaction (``Router._deliver_first``),
    built once per process with bound parameters: is the message id recorded, the
    deployments' count, the matching subscriptions with their instance's process in
    HOLDER_ORDER, and the FIRST holder's instance row locked with the columns
    ``Store.apply_found`` needs (``locking_instance``; the message id is the trigger
    id). A one-row source outer-joined to the rest, so the first two come back when
    nobody holds the message; the locked row rides every row. ``keyed``: for a
    correlation key (a bound ``key``), else for none."""
    one = select(literal(1).label("one")).subquery()
    holder = instances.alias("holder")
    matching = and_(
        subscriptions.c.kind == "message",
        subscriptions.c.name == bindparam("name"),
        _key_matches(bindparam("key") if keyed else None),
        subscriptions.c.tenant_id == bindparam("tenant"),
    )
    first = (
        select(subscriptions.c.instance_id)
        .join(holder, holder.c.id == subscriptions.c.instance_id)
        .where(matching)
        .order_by(*_holder_order(holder))
        .limit(1)
        .correlate(None)
        .scalar_subquery()
    )
    locked = locking_instance(first, bindparam("message_id")).subquery("locked")
    return (
        select(
            exists()
            .where(
                messages.c.message_id == bindparam("message_id"),
                messages.c.tenant_id == bindparam("tenant"),
            )
            .label("seen"),
            deployments_count_column().label("deployments"),
            subscriptions.c.instance_id.label("holder_instance"),
            subscriptions.c.wait_id.label("holder_wait"),
            holder.c.key.label("holder_process"),
            *locked.c,
        )
        .select_from(
            one.outerjoin(subscriptions, matching)
            .outerjoin(holder, holder.c.id == subscriptions.c.instance_id)
            .outerjoin(locked, true())
        )
        .order_by(*_holder_order(holder))
    )


_FIRST_DELIVERY = {keyed: _first_delivery_statement(keyed) for keyed in (True, False)}


@dataclass(slots=True)
class _FirstLook:
    """What the first statement of a message's first transaction answered: kept
    outside it, for the rounds after it (and should its delivery roll back)."""

    holders: list[Holder] = field(default_factory=list)
    starts: list[tuple[str, int, list[str]]] = field(default_factory=list)
    # The holder delivered to in that transaction, with what it was given.
    holder: Holder | None = None
    trigger: MessageReceived | None = None
    record: Callable[[Writes], None] | None = None


# Deterministic ids for instances started by a message or signal: a redelivered
# message starts nothing new.
NAMESPACE = uuid.UUID("6f1c2a1e-8d4b-4c1f-9a57-d0c5a3e7b001")

log = logging.getLogger("dormant.routing")

# How many times a keyed message start looks again after losing the start-key race
# (``Router._start_or_join``): each round joins or starts, unless the winner ended in
# between; a second look almost always settles it.
_START_RACE_ROUNDS = 3


class _FanOut:
    """What a message's or a signal's result answers from its deliveries' steps."""

    __slots__ = ()
    applied: list[Applied]

    @property
    def outbox_ids(self) -> list[int]:
        return [i for a in self.applied for i in a.outbox_ids]

    @property
    def outbox_rows(self) -> list[OutboxRow]:
        return [r for a in self.applied for r in a.outbox_rows]

    @property
    def steps(self) -> list[Applied]:
        return list(self.applied)


@dataclass(slots=True)
class MessageOutcome(_FanOut):
    message_id: str
    # The producer's tenant: only its holders and its processes' message starts.
    tenant: str = DEFAULT_TENANT
    duplicate: bool = False
    delivered_to: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    joined: list[str] = field(default_factory=list)
    buffered: bool = False
    # The dedup row was written inside a delivery's own transaction.
    recorded: bool = False
    applied: list[Applied] = field(default_factory=list)
    # Holders whose delivery raised: each kept as a failed trigger of its own.
    failed: list[str] = field(default_factory=list)
    # The Client's inbox row was marked in the transaction that recorded the message.
    inbox_marked: bool = False
    # Process id -> the instance the message correlated to in it (delivered, failed,
    # started or joined): each process gets it once.
    served: dict[str, str] = field(default_factory=dict)
    # Buffered for this long (seconds) when positive; the processes not yet served may
    # take it from the buffer until then.
    ttl_seconds: float | None = None
    # Nobody took it and it had no TTL: recorded in ``unmatched_messages``.
    dropped: bool = False

    @property
    def outcome(self) -> str:
        """``dropped`` for a message that went nowhere (the metrics' outcome label,
        docs/metrics.md), else the word of its steps."""
        if self.dropped:
            return "dropped"
        return outcome_word(self.applied, duplicate=self.duplicate)

    def summary(self) -> str:
        parts = [f"delivered_to={','.join(self.delivered_to) or '-'}"]
        parts.append(f"started={','.join(self.started) or '-'}")
        if self.buffered:
            parts.append("buffered")
        if self.duplicate:
            parts.append("duplicate")
        if self.dropped:
            parts.append("dropped")
        return " ".join(parts)


@dataclass(slots=True)
class SignalOutcome(_FanOut):
    signal_id: str
    tenant: str = DEFAULT_TENANT
    delivered_to: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    applied: list[Applied] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    # A broadcast takes one transaction per holder: the shell marks its inbox row after.
    inbox_marked: bool = False

    @property
    def outcome(self) -> str:
        return outcome_word(self.applied)

    def summary(self) -> str:
        return (
            f"delivered_to={','.join(self.delivered_to) or '-'} "
            f"started={','.join(self.started) or '-'}"
        )


class Router:
    """Routes messages and signals; ``redeliver`` names the message that sends a
    delivery kept as a failed trigger again (the Router names no task itself)."""

    def __init__(self, store: Store, redeliver: Redeliver) -> None:
        self.store = store
        self.redeliver = redeliver

    def _isolated(
        self, undelivered: Undelivered, now: datetime, call: Callable[[], Applied]
    ) -> Applied | None:
        """Run one holder's delivery; if it raises, keep it for that holder (None)."""
        try:
            return call()
        except (OperationalError, StartKeyTaken):
            raise  # the round is retried / the caller joins the running instance
        except Exception as exc:
            self._keep(undelivered, now, exc)
            return None

    def _keep(self, undelivered: Undelivered, now: datetime, exc: Exception) -> None:
        task, routing_key, kwargs = self.redeliver(undelivered)
        failed_id = self.store.failed.keep_failed(
            task,
            routing_key,
            kwargs,
            exc,
            now,
            trigger_id=undelivered.trigger_id,
            instance_id=undelivered.instance_id,
        )
        log.error(
            "delivery to instance %s failed, kept as failed trigger %s: %s",
            undelivered.instance_id,
            failed_id,
            type(exc).__name__,
        )

    def _apply_isolated(
        self,
        instance_id: str,
        trigger: Trigger,
        trigger_id: str,
        now: datetime,
        also: Callable[[Writes], None] | None = None,
    ) -> Applied | None:
        return self._isolated(
            UndeliveredApply(instance_id, trigger, trigger_id),
            now,
            lambda: self.store.apply(instance_id, trigger, now, trigger_id=trigger_id, also=also),
        )

    def _start_isolated(
        self,
        instance_id: str,
        process_key: str,
        variables: dict[str, Any],
        trigger_id: str,
        now: datetime,
        **start: Any,
    ) -> Applied | None:
        """``start``: ``NewInstance``'s options, the tenant among them (kept with a
        failed start, so its redelivery is checked against the same tenant)."""
        return self._isolated(
            UndeliveredStart(process_key, instance_id, variables, trigger_id, start),
            now,
            lambda: self.store.start(
                NewInstance(process_key, instance_id, variables, trigger_id=trigger_id, **start),
                now=now,
            ),
        )

    def _holders(self, kind: str, name: str, key: str | None, tenant: str) -> list[Holder]:
        with self.store.read() as conn:
            return self._holders_in(conn, kind, name, key, tenant)

    @staticmethod
    def _holders_in(
        conn: Connection, kind: str, name: str, key: str | None, tenant: str
    ) -> list[Holder]:
        """``tenant``'s matching subscriptions with their instance's process, in
        HOLDER_ORDER."""
        q = (
            select(subscriptions.c.instance_id, subscriptions.c.wait_id, instances.c.key)
            .join(instances, instances.c.id == subscriptions.c.instance_id)
            .where(
                subscriptions.c.kind == kind,
                subscriptions.c.name == name,
                subscriptions.c.tenant_id == tenant,
            )
        )
        if kind == "message":
            q = q.where(_key_matches(key))
        return [
            Holder(r.key, r.instance_id, r.wait_id) for r in conn.execute(q.order_by(*HOLDER_ORDER))
        ]

    def message(
        self,
        name: str,
        correlation_key: str | None,
        variables: dict[str, Any] | None,
        *,
        message_id: str | None,
        ttl_seconds: float | None,
        now: datetime,
        inbox_id: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> MessageOutcome:
        """Route one message of ``tenant`` (the module docstring's order) to that
        tenant's holders and processes only; ``inbox_id``: the Client's inbox row,
        marked processed in the transaction that records the message."""
        tenant = check_tenant(tenant)
        correlation_key, variables, message_id, ttl_seconds = check_message(
            name,
            correlation_key,
            variables,
            message_id,
            ttl_seconds,
            limits=self.store.settings.limits,
        )
        out = MessageOutcome(message_id, tenant, ttl_seconds=ttl_seconds)
        look = self._deliver_first(out, name, correlation_key, variables, now, inbox_id)
        if out.duplicate:
            return out
        holders: list[Holder] | None = look.holders[1:] if look.holder else look.holders
        while True:
            self._deliver(
                out, name, correlation_key, variables, now, holders, look.starts, inbox_id
            )
            holders = None  # a second round (a subscription appeared) looks again
            if out.recorded:
                return out
            self._start(out, name, correlation_key, variables, now, look.starts)
            if self._record(out, name, correlation_key, variables, ttl_seconds, now, inbox_id):
                return out

    def _deliver_first(
        self,
        out: MessageOutcome,
        name: str,
        key: str | None,
        variables: dict[str, Any],
        now: datetime,
        inbox_id: str | None,
    ) -> _FirstLook:
        """The message's first transaction: one statement answers the duplicate check,
        the holders, the deployments' count (the message starts come from the Store's
        index of starts, read again only when that count moved) AND locks the first
        holder's instance row, and the delivery to that holder follows under that lock
        (``Store.apply_found``): a message with one holder is one statement and one
        round trip fewer than a lookup before the transaction. Nobody holds it, or it
        is a duplicate: the transaction ends there, nothing written. That holder's
        failure is kept for it alone (as ``_isolated`` does), its stale wait leaves the
        next holder of its process to ``_deliver``; the answers outlive a rollback."""
        look = _FirstLook()

        def find(conn: Connection) -> Found | None:
            params = {"message_id": out.message_id, "name": name, "tenant": out.tenant}
            if key is not None:
                params["key"] = key
            rows = round_trips.first(conn, _FIRST_DELIVERY[key is not None], params)
            head = rows[0]
            if head.seen:
                out.duplicate = True
                return None
            look.holders = self._first_holders(rows)
            look.starts = self.store.deployments.latest_starts(
                "message",
                name,
                tenant=out.tenant,
                conn=conn,
                deployments_count=int(head.deployments),
            )
            if not look.holders:
                return None
            # The statement locked the first holder in HOLDER_ORDER: this one.
            holder = look.holders[0]
            groups = waits_to_wake(look.holders)
            served = {g[0].process_key for g in groups}
            last = len(groups) == 1 and not processes_to_start(
                (p for p, _, _ in look.starts), served
            )
            look.holder = holder
            look.trigger, look.record = self._delivery(
                out, name, key, variables, now, holder, last, inbox_id
            )
            return Found(holder.instance_id, head, look.trigger, out.message_id, look.record)

        try:
            applied = self.store.apply_found(find, now)
        except (OperationalError, StartKeyTaken):
            raise
        except Exception as exc:
            if look.holder is None or look.trigger is None:
                raise  # the lookup itself failed: nobody was delivered to
            undelivered = UndeliveredApply(look.holder.instance_id, look.trigger, out.message_id)
            self._keep(undelivered, now, exc)
            applied = None
        if look.holder is not None and self._delivered(
            out, look.holder, applied, look.record, inbox_id
        ):
            out.served[look.holder.process_key] = look.holder.instance_id
        return look

    @staticmethod
    def _first_holders(rows: Sequence[Any]) -> list[Holder]:
        """The holders in ``_FIRST_DELIVERY``'s rows (none: one row of NULLs)."""
        return [
            Holder(r.holder_process, r.holder_instance, r.holder_wait)
            for r in rows
            if r.holder_instance is not None and r.holder_process is not None
        ]

    def _deliver(
        self,
        out: MessageOutcome,
        name: str,
        key: str | None,
        variables: dict[str, Any],
        now: datetime,
        holders: list[Holder] | None,
        starts: list[tuple[str, int, list[str]]],
        inbox_id: str | None = None,
    ) -> None:
        if holders is None:
            holders = self._holders("message", name, key, out.tenant)
        groups = waits_to_wake(holders, out.served)
        # The dedup row rides the LAST holder's transaction when no message start is left
        # to run after it (else ``_record`` writes it): a crash before it leaves the
        # message unrecorded, so the producer's retry reaches the processes not yet
        # served (the instances served recognise the trigger id).
        others = processes_to_start(
            (p for p, _, _ in starts), {g[0].process_key for g in groups} | set(out.served)
        )
        for n, candidates in enumerate(groups, 1):
            last = n == len(groups) and not others
            for holder in candidates:  # the next holder of this process if one went stale
                trigger, record = self._delivery(
                    out, name, key, variables, now, holder, last, inbox_id
                )
                applied = self._apply_isolated(
                    holder.instance_id, trigger, out.message_id, now, also=record
                )
                if self._delivered(out, holder, applied, record, inbox_id):
                    out.served[holder.process_key] = holder.instance_id
                    break

    def _delivery(
        self,
        out: MessageOutcome,
        name: str,
        key: str | None,
        variables: dict[str, Any],
        now: datetime,
        holder: Holder,
        last: bool,
        inbox_id: str | None,
    ) -> tuple[MessageReceived, Callable[[Writes], None] | None]:
        """The trigger one holder gets, and the message's record riding its
        transaction when it is the last."""
        trigger = MessageReceived(
            wait_id=holder.wait_id,
            name=name,
            correlation_key=key,
            variables=variables,
            message_id=out.message_id,
        )
        record = (
            self._recorder(out, name, key, holder, variables, now, inbox_id)
            if last and not out.recorded
            else None
        )
        return trigger, record

    @staticmethod
    def _delivered(
        out: MessageOutcome,
        holder: Holder,
        applied: Applied | None,
        record: Callable[[Writes], None] | None,
        inbox_id: str | None,
    ) -> bool:
        """Account one holder's delivery; False when its wait went stale."""
        instance_id = holder.instance_id
        if applied is None:
            out.failed.append(instance_id)  # kept for this holder; the others go on
            return True  # the message counts as taken by it
        if not (applied.changed or applied.duplicate):
            # The wait was replaced between our lookup and the lock (a loop that
            # re-armed its catch): not delivered. ``_record`` then finds the new
            # subscription under its lock and ``message`` correlates again.
            return False
        if record is not None and applied.changed:
            out.recorded = True  # committed with the step
            out.inbox_marked = inbox_id is not None
        out.applied.append(applied)
        out.delivered_to.append(instance_id)
        return True

    def _recorder(
        self,
        out: MessageOutcome,
        name: str,
        key: str | None,
        taker: Holder,
        variables: dict[str, Any],
        now: datetime,
        inbox_id: str | None,
    ) -> Callable[[Writes], None]:
        """Record the message (and mark the Client's inbox row) in a delivery's own
        write: statements more in it, not a transaction of its own. A redelivery finds
        the row and is a duplicate. With a TTL the row is the buffered message, and the
        processes it reached (this holder's among them) are written with it."""
        ttl = out.ttl_seconds
        buffer = buffer_it(ttl)

        def record(writes: Writes) -> None:
            reached = {**out.served, taker.process_key: taker.instance_id}
            row = {
                "message_id": out.message_id,
                "tenant_id": out.tenant,
                "name": name,
                "correlation_key": key,
                "variables": variables if buffer else {},
                "expires_at": now + timedelta(seconds=ttl) if buffer and ttl else None,
                "received_at": now,
                "consumed_by_instance": None if buffer else taker.instance_id,
                "consumed_at": None if buffer else now,
                "correlations": len(reached),
            }
            writes.add_rows(messages, [row], ignore_conflicts=True)
            if buffer:
                writes.add_rows(
                    message_correlations,
                    _correlation_rows(out.message_id, reached, now),
                    ignore_conflicts=True,
                )
            if inbox_id is not None:
                queue_mark_processed(writes, inbox_id, now)

        return record

    def _start(
        self,
        out: MessageOutcome,
        name: str,
        key: str | None,
        variables: dict[str, Any],
        now: datetime,
        starts: list[tuple[str, int, list[str]]],
    ) -> None:
        """Start (or join) each process with a matching message start no holder served."""
        unserved = set(processes_to_start((p for p, _, _ in starts), out.served))
        for process_key, version, nodes in starts:
            if process_key in unserved:
                self._start_or_join(out, name, key, variables, now, process_key, version, nodes)

    def _start_or_join(
        self,
        out: MessageOutcome,
        name: str,
        key: str | None,
        variables: dict[str, Any],
        now: datetime,
        process_key: str,
        version: int,
        nodes: list[str],
    ) -> None:
        """One process's start, or its join of the running instance with the same start
        key. A keyed start that loses the race on the unique index joins the winner; if
        the winner has ended by the time it looks, the key is free again and it plans
        once more — a bounded number of times, then ``StartKeyTaken`` (kept as a failed
        trigger by the task), never a message that silently went nowhere."""
        for _ in range(_START_RACE_ROUNDS):
            running = self._running_with_key(process_key, key) if key is not None else None
            plan = start_or_join(process_key, version, nodes, key, running)
            if isinstance(plan, JoinRunning):
                out.served[process_key] = plan.instance_id
                self._join(out, plan.instance_id, process_key, name, now)
                return
            instance_id = str(uuid.uuid5(NAMESPACE, f"{process_key}:{out.message_id}"))
            try:
                applied = self._start_isolated(
                    instance_id,
                    process_key,
                    variables,
                    out.message_id,
                    now,
                    version=plan.version,
                    start_node_id=plan.start_node_id,
                    start_key=plan.start_key,
                    tenant=out.tenant,
                )
            except StartKeyTaken:
                continue  # look again: join the winner, or start if it has ended
            out.served[process_key] = instance_id
            if applied is None:
                out.failed.append(instance_id)
                return
            out.applied.append(applied)
            if instance_id not in out.started:
                out.started.append(instance_id)
            return
        raise StartKeyTaken(process_key, key or "")

    def _running_with_key(self, process_key: str, key: str | None) -> str | None:
        with self.store.read() as conn:
            return conn.execute(
                select(instances.c.id)
                .where(
                    instances.c.key == process_key,
                    instances.c.start_key == key,
                    instances.c.status.in_(ACTIVE_STATUSES),
                )
                .limit(1)
            ).scalar()

    def _join(
        self, out: MessageOutcome, instance_id: str, process_key: str, name: str, now: datetime
    ) -> None:
        self.store.record_fact(
            instance_id,
            Fact("DuplicateStart", {"message": name, "message_id": out.message_id}),
            now,
        )
        out.joined.append(instance_id)

    def _record(
        self,
        out: MessageOutcome,
        name: str,
        key: str | None,
        variables: dict[str, Any],
        ttl: float | None,
        now: datetime,
        inbox_id: str | None = None,
    ) -> bool:
        """Write the dedup row (and mark the Client's inbox row); False if a
        subscription appeared and we must deliver."""
        taken = bool(out.delivered_to or out.started or out.joined or out.failed)
        buffer = buffer_it(ttl)
        takers = out.delivered_to or out.started or out.joined or out.failed
        taker = takers[0] if takers else None
        with self.store.transaction() as conn:
            lock_message_key(conn, name, key)
            if not taken:
                q = (
                    select(subscriptions.c.instance_id)
                    .where(
                        subscriptions.c.kind == "message",
                        subscriptions.c.name == name,
                        _key_matches(key),
                        subscriptions.c.tenant_id == out.tenant,
                    )
                    .limit(1)
                )
                if conn.execute(q).first() is not None:
                    return False  # armed meanwhile: deliver to it instead of buffering
            if inbox_id is not None:
                conn.execute(mark_processed_statement(inbox_id, now))
                out.inbox_marked = True
            if conn.execute(
                select(messages.c.message_id).where(
                    messages.c.message_id == out.message_id, messages.c.tenant_id == out.tenant
                )
            ).first():
                out.duplicate = not taken
                return True
            conn.execute(
                insert(messages).values(
                    message_id=out.message_id,
                    tenant_id=out.tenant,
                    name=name,
                    correlation_key=key,
                    variables=variables if buffer else {},
                    expires_at=now + timedelta(seconds=ttl) if buffer and ttl else None,
                    received_at=now,
                    consumed_by_instance=None if buffer else taker,
                    consumed_at=None if buffer else now,
                    correlations=len(out.served),
                )
            )
            if not taken and not buffer:
                # Dropped: recorded (and the record trimmed) in this same transaction.
                settings = self.store.settings
                record_unmatched(
                    conn,
                    out.message_id,
                    name,
                    key,
                    now,
                    tenant=out.tenant,
                    kept=settings.unmatched_messages_kept,
                    retention_seconds=settings.unmatched_messages_retention_seconds,
                )
                out.dropped = True
            if buffer and out.served:
                conn.execute(
                    insert(message_correlations).values(
                        _correlation_rows(out.message_id, out.served, now)
                    )
                )
        out.buffered = buffer
        return True

    def signal(
        self,
        name: str,
        variables: dict[str, Any] | None,
        *,
        signal_id: str | None,
        now: datetime,
        tenant: str = DEFAULT_TENANT,
    ) -> SignalOutcome:
        """Broadcast within ``tenant``: every holder of a signal subscription of that
        tenant, every signal start of its processes."""
        tenant = check_tenant(tenant)
        limits = self.store.settings.limits
        check_name(name, "signal name", limits)
        variables = check_variables(variables, f"signal {name!r} variables", limits)
        signal_id = check_text(signal_id or str(uuid.uuid4()), "signal id", limits, InvalidMessage)
        out = SignalOutcome(signal_id, tenant)
        for holder in self._holders("signal", name, None, tenant):
            instance_id, wait_id = holder.instance_id, holder.wait_id
            trigger = SignalReceived(wait_id=wait_id, name=name, variables=variables)
            applied = self._apply_isolated(instance_id, trigger, f"{signal_id}:{wait_id}", now)
            if applied is None:
                out.failed.append(instance_id)  # kept for this holder; the others go on
                continue
            out.applied.append(applied)
            if instance_id not in out.delivered_to:
                out.delivered_to.append(instance_id)
        starts = self.store.deployments.latest_starts("signal", name, tenant=tenant)
        for process_key, version, nodes in starts:
            instance_id = str(uuid.uuid5(NAMESPACE, f"{process_key}:{signal_id}"))
            started = self._start_isolated(
                instance_id,
                process_key,
                variables,
                signal_id,
                now,
                version=version,
                start_node_id=nodes[0],
                tenant=tenant,
            )
            if started is None:
                out.failed.append(instance_id)
                continue
            out.applied.append(started)
            out.started.append(instance_id)
        return out


def _correlation_rows(
    message_id: str, reached: dict[str, str], now: datetime
) -> list[dict[str, Any]]:
    """The ``message_correlations`` rows of the processes a message reached."""
    return [
        {"message_id": message_id, "process_key": p, "instance_id": i, "at": now}
        for p, i in sorted(reached.items())
    ]

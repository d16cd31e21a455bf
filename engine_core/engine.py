"""The step function: one trigger in, the next durable state out.

``apply(definition, checkpoint, trigger, now=...)`` works on a private working state
and runs the instance to quiescence: every token is waiting, in incident,
or ended. It reads no clock (``now`` is an argument), no environment and no
randomness (ids come from the checkpoint's counter), so the same inputs always give
the same step, and the whole of dormant's semantics is testable without a server.

The checkpoint comes as the working state (a ``Checkpoint``, copied and never touched)
or as the stored JSON text itself, which ``apply`` decodes into its private working
state: there the decode is the copy, so a caller holding the text pays one decode, one
step and one encode, and no copy. (Not a dict: pydantic keeps a dict's nested JSON
values, which the step's result would then share with the caller's dict.)

Time is an input too: before the trigger is applied, every timer wait already due at
``now`` fires, earliest first. An overdue boundary therefore fires the moment its
instance is next loaded, and beats a message that arrives after its deadline.
"""

from __future__ import annotations

from datetime import datetime

from dormant.engine_core import operations
from dormant.engine_core.checkpoint import (
    CURRENT_SCHEMA,
    ROOT_SCOPE,
    Checkpoint,
    InstanceStatus,
    TokenState,
    Wait,
    WaitKind,
    copy_checkpoint,
    decode,
    holds_of,
)
from dormant.engine_core.compensation import finish_waiting_throws
from dormant.engine_core.effects import ContinueInstance, Fact, Step
from dormant.engine_core.errors import EngineInvariantError, InvalidOperation
from dormant.engine_core.feel.ids import name_based_uuid
from dormant.engine_core.feel.scope import reset_id_source, set_id_source
from dormant.engine_core.joins import fire_ready_inclusive_joins
from dormant.engine_core.model import ProcessDefinition
from dormant.engine_core.moving import check_scope, fail_instance
from dormant.engine_core.nodes import enter
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.services import DEFAULT_SERVICES, Services
from dormant.engine_core.triggers import (
    Cancel,
    IncidentDrop,
    IncidentResolve,
    IncidentRetry,
    Operated,
    Start,
    TimerFired,
    Trigger,
)
from dormant.engine_core.wake import INSTANCE, STALE, Wake
from dormant.engine_core.wakes import dispatch, fire_due

__all__ = ["Services", "apply", "new_checkpoint"]


_OPERATOR_TRIGGERS = (Cancel, IncidentRetry, IncidentResolve, IncidentDrop, *operations.OPERATIONS)
_TIMED_KINDS = frozenset({WaitKind.TIMER, WaitKind.JOB, WaitKind.RETRY})
# Each kind's name by a dict lookup: an enum member's ``.value`` is a descriptor call.
_KIND_NAMES = {kind: kind.value for kind in WaitKind}
# Trigger classes are final: a type lookup, not an isinstance against pydantic's ABC
# metaclass (a microsecond each, several times a step).
_OPERATION_TYPES = frozenset(operations.OPERATIONS)


def new_checkpoint(
    definition: ProcessDefinition, instance_id: str, version: int, now: datetime
) -> Checkpoint:
    """The empty document a ``Start`` trigger is applied to."""
    return Checkpoint(
        schema_version=CURRENT_SCHEMA,
        instance_id=instance_id,
        process_key=definition.key,
        version=version,
        created_at=now,
        updated_at=now,
    )


def apply(
    definition: ProcessDefinition,
    checkpoint: Checkpoint | str | bytes,
    trigger: Trigger,
    *,
    now: datetime,
    services: Services | None = None,
    keep_holds: bool = False,
) -> Step:
    """``keep_holds``: the changed step carries the state's waits, incidents and
    suspension from before it (``Step.holds_before``), copied from the one decode
    instead of the Store parsing the stored text a second time."""
    if isinstance(checkpoint, Checkpoint):
        given = checkpoint

        def private() -> Checkpoint:
            return copy_checkpoint(given)
    else:
        given = decode(checkpoint)
        stored = checkpoint

        def private() -> Checkpoint:
            return decode(stored)

    if given.status.ended:
        if isinstance(trigger, _OPERATOR_TRIGGERS):
            raise InvalidOperation(
                f"instance {given.instance_id} ({given.process_key} "
                f"v{given.version}) is {given.status.value}; nothing to {trigger.kind}"
            )
        return _stale(given, trigger, "instance ended")
    if type(trigger) is Start and (given.tokens or given.revision):
        return _stale(given, trigger, "already started")

    before = holds_of(given) if keep_holds else None
    # The decoded document is already private: only a given working state is copied.
    cp = given if given is not checkpoint else private()
    rt = Runtime(definition, cp, now, services or DEFAULT_SERVICES)
    # FEEL's uuid() during this trigger: name-based ids from the instance and its counter.
    ids = set_id_source(lambda: name_based_uuid(f"{cp.instance_id}/{cp.next_id('u')}"))
    try:
        fired_early: dict[str, Wake] = {}
        if operations.hold(rt, trigger):
            woken = INSTANCE
        elif type(trigger) in _OPERATION_TYPES:
            woken = operations.apply_operation(
                rt,
                trigger,
                run=lambda: _run(rt),
                fire_due=lambda until: _fire_overdue(rt, trigger, until=until),
            )
        else:
            fired_early = _fire_overdue(rt, trigger)
            if fired_early and isinstance(trigger, TimerFired) and trigger.wait_id in fired_early:
                woken = fired_early[trigger.wait_id]
            else:
                woken = dispatch(rt, trigger)
        if woken.stale and not fired_early:
            return _stale(
                given if given is checkpoint else private(), trigger, woken.reason or "wait gone"
            )
        _run(rt)
        if rt.queue and rt.token_bound_reached:
            rt.fact("TokensParked", pending=len(rt.queue))
            rt.queue.clear()
        elif rt.queue:
            # Stopped at the step budget: the tokens still queued stay active in the
            # checkpoint (at rest, "active" means exactly this) for the follow-up.
            rt.fact("StepBudgetReached", entries=rt.entries, pending=len(rt.queue))
            rt.effects.append(ContinueInstance(cp.instance_id))
    except EngineInvariantError as exc:
        # A bug in dormant, not the user's: the one failure that stays fatal (docs/incidents.md).
        cp = private()
        rt = Runtime(definition, cp, now, services or DEFAULT_SERVICES)
        fail_instance(rt, f"internal invariant broken: {exc}")
        woken = STALE
    finally:
        reset_id_source(ids)
    rt.settle_status()
    cp.revision += 1
    cp.updated_at = now
    rt.fact(
        "Hydrated",
        trigger=trigger.kind,
        token=woken.token_id,
        outcome="completed" if cp.status.ended else "continued",
    )
    held: dict[str, int] = {}
    for wait in cp.waits.values():
        kind = _KIND_NAMES[wait.kind]
        held[kind] = held.get(kind, 0) + 1
    rt.fact("Dehydrated", waits=len(cp.waits), **(dict(sorted(held.items())) if held else {}))
    return Step(cp, tuple(rt.effects), _by_actor(trigger, rt.facts), holds_before=before)


def _by_actor(trigger: Trigger, facts: list[Fact]) -> tuple[Fact, ...]:
    """The step's facts, each naming the operator whose action made them (the trigger's
    ``actor``), so the history says "cancelled by ann" (engine_core/history.py)."""
    # An isinstance test, not getattr: a model without the field would run pydantic's
    # __getattr__ on every step (tests/core/test_working_state.py).
    actor = trigger.actor if isinstance(trigger, Operated) else None
    if actor is None:
        return tuple(facts)
    return tuple(Fact(f.kind, {**f.details, "actor": actor}) for f in facts)


def _stale(checkpoint: Checkpoint, trigger: Trigger, reason: str) -> Step:
    details: dict[str, str | int | float | bool | None] = {
        "trigger": trigger.kind,
        "reason": reason,
    }
    wait_id = getattr(trigger, "wait_id", None)
    if wait_id is not None:
        details["wait"] = wait_id
    return Step(checkpoint, (), (Fact("Stale", details),), changed=False)


def _fire_overdue(
    rt: Runtime, trigger: Trigger, *, until: datetime | None = None
) -> dict[str, Wake]:
    """Fire timers already due (by ``until``, default now), earliest first; returns wait
    id -> what each woke. A suspended instance's timers wait for its resume."""
    fired: dict[str, Wake] = {}
    if type(trigger) is Start or rt.cp.suspended:
        return fired
    cutoff = rt.now if until is None else min(until, rt.now)
    while True:
        due = [
            w
            for w in rt.cp.waits.values()
            if w.due_at is not None
            and w.due_at <= cutoff
            and w.kind in _TIMED_KINDS
            and w.id not in fired
        ]
        if not due:  # at almost every trigger: nothing overdue, nothing sorted
            return fired
        wait = min(due, key=_due_order)
        fired[wait.id] = fire_due(rt, wait.id)
        _run(rt)
        if rt.cp.status.ended:
            return fired


def _due_order(wait: Wait) -> tuple[datetime, str]:
    assert wait.due_at is not None
    return wait.due_at, wait.id


def _keep_only_active(rt: Runtime) -> None:
    """What the budget left: each still-active queued token once, in queue order."""
    live = [
        tid
        for tid in dict.fromkeys(rt.queue)
        if (t := rt.cp.tokens.get(tid)) is not None and t.state is TokenState.ACTIVE
    ]
    rt.queue.clear()
    rt.queue.extend(live)


def _run(rt: Runtime) -> None:
    """Advance every active token until the instance is quiescent."""
    while True:
        while rt.queue:
            token = rt.cp.tokens.get(rt.queue[0])
            if token is None or token.state is not TokenState.ACTIVE:
                rt.queue.popleft()
                continue
            if rt.cp.status.ended:
                rt.queue.clear()
                break
            if rt.entries >= rt.services.step_budget:
                _keep_only_active(rt)
                return  # the rest runs in the follow-up Continue trigger (apply)
            rt.queue.popleft()
            rt.entries += 1
            enter(rt, token)
            if rt.token_bound_reached:
                # One incident, at the node that would pass DORMANT_MAX_TOKENS: the
                # other tokens would only meet the same bound, each an incident of its
                # own. They stay active, parked, and run when the incident is retried,
                # resolved or dropped (wakes._parked); no follow-up Continue is sent.
                _keep_only_active(rt)
                return
        if rt.cp.status.ended:
            return
        if not (fire_ready_inclusive_joins(rt) or finish_waiting_throws(rt)):
            break
    if rt.cp.status is InstanceStatus.ACTIVE and not rt.cp.tokens and ROOT_SCOPE in rt.cp.scopes:
        check_scope(rt, ROOT_SCOPE)

"""Applying a trigger to the wait it names: ``dispatch`` is a table trigger kind -> handler.

A trigger whose wait is gone is stale: the handler returns ``None`` and ``apply``
changes nothing. That one rule settles every race (a timer and a message for one
gateway: the second finds the arms withdrawn) and every redelivery.

A fired wait is removed from the checkpoint in the same step that runs its
continuation, so its hold row disappears in the same commit (docs/waits.md); a
cycle timer instead gets its next due time recorded. What a fired wait continues
depends on its role, the second table here (``_FIRE``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dormant.engine_core import (
    ad_hoc,
    boundaries,
    calls,
    event_subs,
    incidents,
    jobs,
    listeners,
    user_tasks,
)
from dormant.engine_core.checkpoint import (
    ROOT_SCOPE,
    ParentLink,
    Scope,
    TokenState,
    Wait,
    WaitKind,
    WaitRole,
)
from dormant.engine_core.errors import InvalidOperation
from dormant.engine_core.incidents import leave_or_raise
from dormant.engine_core.model import NodeKind
from dormant.engine_core.moving import cancel_instance
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.transitions import move_token
from dormant.engine_core.triggers import (
    Cancel,
    ChildCompleted,
    ChildFailed,
    Continue,
    IncidentDrop,
    IncidentResolve,
    IncidentRetry,
    JobCompleted,
    JobErrorThrown,
    JobFailed,
    JobHeartbeat,
    MessageReceived,
    SignalReceived,
    Start,
    TaskAssign,
    TaskCompleted,
    TaskUpdate,
    TimerFired,
    Trigger,
)
from dormant.engine_core.wake import INSTANCE, STALE, Wake

__all__ = ["dispatch", "fire_due", "fire_wait"]

# A handler applies its trigger and says what it woke (wake.py): a token, the instance
# as a whole, or nothing (stale).
TriggerHandler = Callable[[Runtime, Any], Wake]
FireHandler = Callable[[Runtime, Wait, Mapping[str, Any]], Wake]


def dispatch(rt: Runtime, trigger: Trigger) -> Wake:
    return _HANDLERS[type(trigger)](rt, trigger)


def fire_wait(rt: Runtime, wait: Wait, variables: Mapping[str, Any]) -> Wake:
    """Run what a fired timer/message/signal wait continues, whatever its role."""
    return _FIRE[wait.role](rt, wait, variables)


# -- what a fired wait continues, by role ---------------------------------------------


def _fire_node_wait(rt: Runtime, wait: Wait, variables: Mapping[str, Any]) -> Wake:
    """The token's own wait (a catch event, a receive task) or an event-based
    gateway's arm: the token leaves with the payload; its boundaries stay only while
    it is still at its activity."""
    token = rt.token_of(wait)
    rt.withdraw_token_waits(token.id, keep_boundaries=wait.role is WaitRole.NODE)
    if wait.role is WaitRole.ARM:
        # The event-based gateway's arm won: the token moves to the arm's event node.
        rt.fact("GatewayArmWon", gateway=token.node_id, arm=wait.node_id)
        token.node_id = wait.node_id
        move_token(token, TokenState.ACTIVE)
    leave_or_raise(rt, token, variables)
    return Wake.token(token.id)


def _fire_boundary(rt: Runtime, wait: Wait, variables: Mapping[str, Any]) -> Wake:
    return Wake.token(boundaries.fire_wait(rt, wait, variables))


def _fire_event_sub(rt: Runtime, wait: Wait, variables: Mapping[str, Any]) -> Wake:
    event_subs.fire_wait(rt, wait, variables)
    return INSTANCE


def _fire_incident_retry(rt: Runtime, wait: Wait, variables: Mapping[str, Any]) -> Wake:
    assert wait.incident_id is not None
    return Wake.token(incidents.retry(rt, wait.incident_id))


_FIRE: dict[WaitRole, FireHandler] = {
    WaitRole.NODE: _fire_node_wait,
    WaitRole.ARM: _fire_node_wait,
    WaitRole.BOUNDARY: _fire_boundary,
    WaitRole.EVENT_SUB: _fire_event_sub,
    WaitRole.INCIDENT: _fire_incident_retry,
}


# -- trigger handlers -----------------------------------------------------------------


def _start(rt: Runtime, trigger: Start) -> Wake:
    if rt.cp.tokens or rt.cp.revision:
        return STALE  # already started: a redelivered start
    if trigger.start_node_id is not None:
        start = rt.node(trigger.start_node_id)
    else:
        starts = rt.defn.none_starts(None)
        if not starts:
            raise InvalidOperation(
                f"process {rt.defn.key!r} has no none start event; it starts only by its "
                "message, signal or timer start event"
            )
        start = starts[0]
    root = Scope(id=ROOT_SCOPE, variables=dict(trigger.variables))
    rt.cp.scopes[ROOT_SCOPE] = root
    rt.cp.business_key = trigger.business_key
    rt.cp.start_key = trigger.start_key
    if trigger.parent is not None:
        rt.cp.parent = ParentLink(**trigger.parent)
    rt.fact("Started", start=start.id)
    # The process's event sub-processes are armed when the token enters its start
    # event (nodes._start_event), so a failing subscription is an incident there.
    token = rt.spawn(start.id, ROOT_SCOPE, [])
    if rt.defn.listeners("start"):
        token.listener_phase = "process-start"  # before the start event (listeners.py)
    return Wake.token(token.id)


def _timer(rt: Runtime, trigger: TimerFired) -> Wake:
    return fire_due(rt, trigger.wait_id)


def fire_due(rt: Runtime, wait_id: str) -> Wake:
    """What ``TimerFired(wait_id)`` does; the step's overdue timers call it directly, so
    firing them builds no trigger object inside the step."""
    wait = rt.live_wait(wait_id, WaitKind.TIMER, WaitKind.JOB, WaitKind.RETRY)
    if wait is None or wait.due_at is None or wait.due_at > rt.now:
        return STALE
    if wait.kind is WaitKind.JOB:
        return jobs.timed_out(rt, wait)
    return fire_wait(rt, wait, {})


def _message(rt: Runtime, trigger: MessageReceived) -> Wake:
    wait = rt.live_wait(trigger.wait_id, WaitKind.MESSAGE)
    if wait is None or wait.message_name != trigger.name:
        return STALE
    if wait.correlation_key is not None and wait.correlation_key != trigger.correlation_key:
        return STALE
    return fire_wait(rt, wait, trigger.variables)


def _signal(rt: Runtime, trigger: SignalReceived) -> Wake:
    wait = rt.live_wait(trigger.wait_id, WaitKind.SIGNAL)
    if wait is None or wait.signal_name != trigger.name:
        return STALE
    return fire_wait(rt, wait, trigger.variables)


def _job_completed(rt: Runtime, trigger: JobCompleted) -> Wake:
    """A job's result: the element's own job, a task listener's or an execution
    listener's (the wait says whose)."""
    wait = jobs.job_wait(rt, trigger.wait_id, trigger.attempt)
    if wait is not None and wait.listener_of is not None:
        return user_tasks.listener_completed(rt, wait, trigger)
    if wait is not None and wait.execution_listener is not None:
        return listeners.completed(rt, wait, trigger)
    if wait is not None and rt.node(wait.node_id).kind is NodeKind.AD_HOC_SUB_PROCESS:
        return ad_hoc.job_completed(rt, wait, trigger)
    return jobs.completed(rt, trigger)


def _job_error(rt: Runtime, trigger: JobErrorThrown) -> Wake:
    wait = jobs.job_wait(rt, trigger.wait_id, trigger.attempt)
    if wait is not None and wait.listener_of is not None:
        return user_tasks.listener_error(rt, wait, trigger)
    if wait is not None and wait.execution_listener is not None:
        return listeners.error_thrown(rt, wait, trigger)
    return jobs.error_thrown(rt, trigger)


def _cancel(rt: Runtime, trigger: Cancel) -> Wake:
    cancel_instance(rt, notify_parent=trigger.notify_parent)
    return INSTANCE


def _continue(rt: Runtime, trigger: Continue) -> Wake:
    """Queue the tokens the last step left active at its step budget (engine._run)."""
    pending = [t.id for t in rt.cp.tokens.values() if t.state is TokenState.ACTIVE]
    rt.queue.extend(pending)
    return INSTANCE if pending else STALE


def _parked(rt: Runtime, wake: Wake) -> Wake:
    """Queue, behind the token an operator's action woke, the tokens a step left active
    when it reached DORMANT_MAX_TOKENS (engine._run): parked behind its one incident,
    they move on with the action on it, and meet the bound again, as the same
    incident, if it still holds."""
    rt.queue.extend(t.id for t in rt.cp.tokens.values() if t.state is TokenState.ACTIVE)
    return wake


def _incident_retry(rt: Runtime, trigger: IncidentRetry) -> Wake:
    return _parked(rt, Wake.token(incidents.retry(rt, trigger.incident_id)))


def _incident_resolve(rt: Runtime, trigger: IncidentResolve) -> Wake:
    return _parked(rt, Wake.token(incidents.resolve(rt, trigger.incident_id)))


def _incident_drop(rt: Runtime, trigger: IncidentDrop) -> Wake:
    return _parked(rt, Wake.token(incidents.drop(rt, trigger.incident_id)))


_HANDLERS: dict[type, TriggerHandler] = {
    Start: _start,
    TimerFired: _timer,
    MessageReceived: _message,
    SignalReceived: _signal,
    TaskCompleted: user_tasks.complete,
    TaskAssign: user_tasks.assign,
    TaskUpdate: user_tasks.update,
    JobCompleted: _job_completed,
    JobFailed: jobs.failed,
    JobErrorThrown: _job_error,
    JobHeartbeat: jobs.heartbeat,
    ChildCompleted: calls.child_completed,
    ChildFailed: calls.child_failed,
    Cancel: _cancel,
    Continue: _continue,
    IncidentRetry: _incident_retry,
    IncidentResolve: _incident_resolve,
    IncidentDrop: _incident_drop,
}

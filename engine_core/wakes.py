"""Applying a trigger to the wait it names: ``dispatch`` is a table trigger kind -> handler.

A trigger whose wait is gone is stale: the handler returns ``None`` and ``apply``
changes nothing. That one rule settles every race (a timer and a message for one
gateway: the second finds the arms withdrawn) and every redelivery.

A fired wait is removed from the checkpoint in the same step that runs its
continuation, so its hold row disappears in the same commit (SRD-071 FR-3b); a
cycle timer instead gets its next due time recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from engine_core import incidents
from engine_core.checkpoint import (
    InstanceStatus,
    Scope,
    Token,
    TokenState,
    Wait,
    WaitKind,
    WaitRole,
)
from engine_core.effects import NotifyParent
from engine_core.errors import InvalidOperation
from engine_core.model import Node
from engine_core.runtime import ROOT_SCOPE
from engine_core.throwing import fire_catching_boundary, throw_error
from engine_core.timers import next_cycle_due
from engine_core.triggers import (
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
    MessageReceived,
    SignalReceived,
    Start,
    TaskCompleted,
    TimerFired,
    Trigger,
)

if TYPE_CHECKING:
    from engine_core.runtime import Runtime

__all__ = ["dispatch", "fire_wait", "interrupt_host", "start_event_sub_process"]

# A handler applies its trigger and returns the id of the token it woke ("" when the
# trigger acted on the instance as a whole), or None when the trigger was stale.
TriggerHandler = Callable[["Runtime", Any], str | None]


def dispatch(rt: Runtime, trigger: Trigger) -> str | None:
    return _HANDLERS[type(trigger)](rt, trigger)


# -- the generic wake: a wait fired, with a payload ------------------------------------


def fire_wait(rt: Runtime, wait: Wait, variables: Mapping[str, Any]) -> str:
    """Run what a fired timer/message/signal wait continues, whatever its role."""
    if wait.role is WaitRole.BOUNDARY:
        return _fire_boundary(rt, wait, variables)
    if wait.role is WaitRole.EVENT_SUB:
        _fire_event_sub(rt, wait, variables)
        return ""
    if wait.role is WaitRole.INCIDENT:
        assert wait.incident_id is not None
        return incidents.retry(rt, wait.incident_id)
    token = _token_of(rt, wait)
    rt.withdraw_token_waits(token.id, keep_boundaries=wait.role is WaitRole.NODE)
    if wait.role is WaitRole.ARM:
        # The event-based gateway's arm won: the token moves to the arm's event node.
        rt.fact("GatewayArmWon", gateway=token.node_id, arm=wait.node_id)
        token.node_id = wait.node_id
        token.state = TokenState.ACTIVE
    _guarded_leave(rt, token, variables)
    return token.id


def _guarded_leave(rt: Runtime, token: Token, variables: Mapping[str, Any]) -> None:
    """Leaving is guarded (leaving.leave_activity): a failing output mapping or
    condition is an incident at the node."""
    token.state = TokenState.ACTIVE
    rt.activity_done(token, variables)


def _token_of(rt: Runtime, wait: Wait) -> Token:
    assert wait.token_id is not None
    return rt.cp.tokens[wait.token_id]


def interrupt_host(rt: Runtime, host: Token) -> None:
    """An interrupting boundary cancels its activity: every wait, inner scope, incident."""
    rt.withdraw_token_waits(host.id)
    if host.inner_scope is not None and host.inner_scope in rt.cp.scopes:
        rt.terminate_scope(host.inner_scope)
        rt.drop_scope(host.inner_scope)
    host.inner_scope = None
    for incident in rt.cp.incidents.values():
        if incident.token_id == host.id and not incident.state.closed:
            from engine_core.checkpoint import IncidentState

            incident.state = IncidentState.OVERTAKEN
            incident.retry_at = None
            rt.fact(
                "Incident",
                action="overtaken",
                incident=incident.id,
                node=incident.node_id,
                cause_class=incident.cause_class,
            )


def _keep_or_withdraw(rt: Runtime, wait: Wait) -> None:
    """After a non-interrupting fire: a cycle arms its next repetition, a message or
    signal stays subscribed, a one-shot timer is done."""
    if wait.kind is WaitKind.TIMER:
        if wait.cycle_interval_seconds is not None and (
            wait.cycle_remaining is None or wait.cycle_remaining > 0
        ):
            assert wait.due_at is not None
            try:
                wait.due_at = next_cycle_due(wait.due_at, wait.cycle_interval_seconds, rt.now)
            except OverflowError:
                # The model's interval puts the next repetition past the last date there
                # is (year 9999): it never comes, so the cycle ends here.
                rt.withdraw(wait)
                return
            if wait.cycle_remaining is not None:
                wait.cycle_remaining -= 1
            return
        rt.withdraw(wait)


def _fire_boundary(rt: Runtime, wait: Wait, variables: Mapping[str, Any]) -> str:
    host = _token_of(rt, wait)
    boundary = rt.node(wait.node_id)
    rt.fact(
        "BoundaryFired",
        boundary=boundary.id,
        host=host.node_id,
        interrupting=boundary.cancel_activity,
    )
    if not boundary.cancel_activity:
        _keep_or_withdraw(rt, wait)
    return fire_catching_boundary(rt, host, boundary, variables).id


def _fire_event_sub(rt: Runtime, wait: Wait, variables: Mapping[str, Any]) -> None:
    assert wait.scope_id is not None
    start = rt.node(wait.node_id)
    if start.is_interrupting:
        rt.terminate_scope(wait.scope_id)
    else:
        _keep_or_withdraw(rt, wait)
    start_event_sub_process(rt, wait.scope_id, start, variables)


def start_event_sub_process(
    rt: Runtime, scope_id: str, start: Node, variables: Mapping[str, Any]
) -> None:
    assert start.parent is not None
    rt.fact("EventSubProcessStarted", node=start.parent, interrupting=start.is_interrupting)
    if start.is_interrupting:
        for wait in [w for w in rt.cp.waits.values() if w.scope_id == scope_id]:
            rt.withdraw(wait)
    scope = rt.new_scope(start.parent, scope_id, None)
    # The event sub-processes nested in this one are armed when the token enters its
    # start event (nodes._start_event), so a failing subscription is an incident there.
    token = rt.spawn(start.id, scope.id, [])
    incidents.guarded(rt, token, start, lambda: rt.apply_outputs(start, token, variables))


# -- trigger handlers -----------------------------------------------------------------


def _live_wait(rt: Runtime, wait_id: str, *kinds: WaitKind) -> Wait | None:
    wait = rt.cp.waits.get(wait_id)
    if wait is None or wait.kind not in kinds:
        return None
    if wait.token_id is not None and wait.token_id not in rt.cp.tokens:
        return None
    return wait


def _start(rt: Runtime, trigger: Start) -> str | None:
    if rt.cp.tokens or rt.cp.revision:
        return None  # already started: a redelivered start
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
        from engine_core.checkpoint import ParentLink

        rt.cp.parent = ParentLink(**trigger.parent)
    rt.fact("Started", start=start.id)
    # The process's event sub-processes are armed when the token enters its start
    # event (nodes._start_event), so a failing subscription is an incident there.
    token = rt.spawn(start.id, ROOT_SCOPE, [])
    return token.id


def _timer(rt: Runtime, trigger: TimerFired) -> str | None:
    wait = _live_wait(rt, trigger.wait_id, WaitKind.TIMER, WaitKind.JOB, WaitKind.RETRY)
    if wait is None or wait.due_at is None or wait.due_at > rt.now:
        return None
    if wait.kind is WaitKind.JOB:
        from engine_core.nodes import dispatch_job

        token = _token_of(rt, wait)
        if wait.job_running:
            # No result within the timeout: the job (or its message) is lost. Dispatch
            # it again as the next attempt; a late result of the old one is stale.
            rt.fact("JobTimedOut", node=wait.node_id, job_type=wait.job_type, attempt=wait.attempt)
            wait.attempt += 1
        dispatch_job(rt, token, rt.node(wait.node_id), wait.id)
        return token.id
    return fire_wait(rt, wait, {})


def _message(rt: Runtime, trigger: MessageReceived) -> str | None:
    wait = _live_wait(rt, trigger.wait_id, WaitKind.MESSAGE)
    if wait is None or wait.message_name != trigger.name:
        return None
    if wait.correlation_key is not None and wait.correlation_key != trigger.correlation_key:
        return None
    return fire_wait(rt, wait, trigger.variables)


def _signal(rt: Runtime, trigger: SignalReceived) -> str | None:
    wait = _live_wait(rt, trigger.wait_id, WaitKind.SIGNAL)
    if wait is None or wait.signal_name != trigger.name:
        return None
    return fire_wait(rt, wait, trigger.variables)


def _task_completed(rt: Runtime, trigger: TaskCompleted) -> str | None:
    wait = _live_wait(rt, trigger.wait_id, WaitKind.USER_TASK)
    if wait is None:
        return None
    token = _token_of(rt, wait)
    rt.withdraw(wait)
    _guarded_leave(rt, token, trigger.variables)
    return token.id


def _job_wait(rt: Runtime, wait_id: str, attempt: int) -> Wait | None:
    wait = _live_wait(rt, wait_id, WaitKind.JOB)
    if wait is None or wait.attempt != attempt or not wait.job_running:
        return None  # a result for an earlier attempt, or for a job in retry backoff
    return wait


def _job_completed(rt: Runtime, trigger: JobCompleted) -> str | None:
    wait = _job_wait(rt, trigger.wait_id, trigger.attempt)
    if wait is None:
        return None
    token = _token_of(rt, wait)
    rt.withdraw(wait)
    _guarded_leave(rt, token, trigger.variables)
    return token.id


def _job_failed(rt: Runtime, trigger: JobFailed) -> str | None:
    from datetime import timedelta

    wait = _job_wait(rt, trigger.wait_id, trigger.attempt)
    if wait is None:
        return None
    token = _token_of(rt, wait)
    node = rt.node(wait.node_id)
    if wait.retries_left > 0:
        wait.retries_left -= 1
        wait.attempt += 1
        wait.job_running = False
        backoff = rt.services.job_retry_backoff_seconds * (2 ** (wait.attempt - 2))
        wait.due_at = rt.now + timedelta(seconds=backoff)
        rt.fact(
            "JobRetryScheduled",
            node=node.id,
            job_type=wait.job_type,
            attempt=wait.attempt,
            error_class=trigger.error_class,
        )
        return token.id
    incidents.raise_incident(
        rt,
        token,
        node,
        f"job {wait.job_type!r} failed after {wait.attempt} attempt(s): {trigger.error}",
        trigger.error_class,
        job_type=wait.job_type,
    )
    return token.id


def _job_error(rt: Runtime, trigger: JobErrorThrown) -> str | None:
    wait = _job_wait(rt, trigger.wait_id, trigger.attempt)
    if wait is None:
        return None
    token = _token_of(rt, wait)
    node = rt.node(wait.node_id)
    rt.withdraw(wait)
    throw_error(
        rt, token, node, trigger.code, trigger.message, trigger.variables, from_end_event=False
    )
    return token.id


def _child_completed(rt: Runtime, trigger: ChildCompleted) -> str | None:
    wait = _live_wait(rt, trigger.wait_id, WaitKind.CALL)
    if wait is None:
        return None
    token = _token_of(rt, wait)
    node = rt.node(wait.node_id)
    rt.cp.waits.pop(wait.id, None)  # the child has ended: nothing to cancel
    result = trigger.variables if node.propagate_all_child_variables or node.outputs else {}
    _guarded_leave(rt, token, result)
    return token.id


def _child_failed(rt: Runtime, trigger: ChildFailed) -> str | None:
    wait = _live_wait(rt, trigger.wait_id, WaitKind.CALL)
    if wait is None:
        return None
    token = _token_of(rt, wait)
    node = rt.node(wait.node_id)
    rt.cp.waits.pop(wait.id, None)
    if trigger.error_code is not None:
        throw_error(rt, token, node, trigger.error_code, trigger.error, {}, from_end_event=False)
    else:
        incidents.raise_incident(
            rt,
            token,
            node,
            f"child instance {wait.child_instance_id} failed: {trigger.error}",
            trigger.error_class,
        )
    return token.id


def _cancel(rt: Runtime, trigger: Cancel) -> str | None:
    rt.terminate_scope(ROOT_SCOPE)
    for wait in list(rt.cp.waits.values()):
        rt.withdraw(wait)
    rt.cp.status = InstanceStatus.TERMINATED
    rt.cp.ended_at = rt.now
    rt.fact("Terminated", reason_kind="cancel")
    if rt.cp.parent is not None and trigger.notify_parent:
        rt.effects.append(
            NotifyParent(
                parent_instance_id=rt.cp.parent.instance_id,
                wait_id=rt.cp.parent.wait_id,
                completed=False,
                variables={},
                error=f"child instance {rt.cp.instance_id} was cancelled",
                error_class="ChildCancelled",
            )
        )
    return ""


def _continue(rt: Runtime, trigger: Continue) -> str | None:
    """Queue the tokens the last step left active at its budget (engine._run)."""
    pending = [t.id for t in rt.cp.tokens.values() if t.state is TokenState.ACTIVE]
    rt.queue.extend(pending)
    return "" if pending else None


def _incident_retry(rt: Runtime, trigger: IncidentRetry) -> str | None:
    return incidents.retry(rt, trigger.incident_id)


def _incident_resolve(rt: Runtime, trigger: IncidentResolve) -> str | None:
    return incidents.resolve(rt, trigger.incident_id)


def _incident_drop(rt: Runtime, trigger: IncidentDrop) -> str | None:
    return incidents.drop(rt, trigger.incident_id)


_HANDLERS: dict[type, TriggerHandler] = {
    Start: _start,
    TimerFired: _timer,
    MessageReceived: _message,
    SignalReceived: _signal,
    TaskCompleted: _task_completed,
    JobCompleted: _job_completed,
    JobFailed: _job_failed,
    JobErrorThrown: _job_error,
    ChildCompleted: _child_completed,
    ChildFailed: _child_failed,
    Cancel: _cancel,
    Continue: _continue,
    IncidentRetry: _incident_retry,
    IncidentResolve: _incident_resolve,
    IncidentDrop: _incident_drop,
}

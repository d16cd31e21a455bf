"""Jobs: a service task's work, done by a worker outside the step.

A job is a wait of kind ``JOB`` on its token: dispatched as an effect (published after
the commit, through the outbox), with a deadline at the job timeout so a job the
broker lost is dispatched again as the next attempt. Its result comes back as a
trigger naming the wait and the attempt; a result for any other attempt is stale.
A failure is retried with exponential backoff while the model's retries last (the
wait's deadline is the backoff), then opens an incident; a BPMN error is thrown at
the task, where its boundaries may catch it.

A job type may have its own timeout and backoff (``Services.job_types``, from
``DORMANT_JOB_TYPES``). A long job calls the heartbeat (``dormant.heartbeat``): a
``JobHeartbeat`` moves its running attempt's deadline to now + ``extend_seconds``
(default: the type's timeout), so it is not taken for lost.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from dormant.engine_core.checkpoint import Token, TokenState, Wait, WaitKind, WaitRole
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.errors import EngineInvariantError, shorten
from dormant.engine_core.expressions import TechnicalFailure, evaluate, non_empty_string
from dormant.engine_core.incidents import leave_or_raise, raise_incident
from dormant.engine_core.job_types import reserved_job_type
from dormant.engine_core.model import Node
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.services import Services
from dormant.engine_core.throwing import throw_error
from dormant.engine_core.transitions import move_token
from dormant.engine_core.triggers import JobCompleted, JobErrorThrown, JobFailed, JobHeartbeat
from dormant.engine_core.wake import STALE, Wake

__all__ = [
    "completed",
    "error_thrown",
    "failed",
    "heartbeat",
    "job_wait",
    "open_job",
    "retry_backoff",
    "start",
    "timed_out",
    "timeout",
]


def start(rt: Runtime, token: Token, node: Node) -> None:
    """The token reached a job's element: evaluate type and retries, dispatch, wait."""
    if node.job_type is None:
        raise EngineInvariantError(f"{node.label} has no job type")
    open_job(rt, token, node, node.job_type, node.job_retries)
    move_token(token, TokenState.WAITING)


def open_job(
    rt: Runtime,
    token: Token,
    node: Node,
    job_type_raw: str,
    retries_raw: str | None,
    **fields: Any,
) -> Wait:
    """A job wait of ``token`` at ``node``, dispatched: the element's own job, or one
    run on its behalf (a listener: ``fields`` say which), with the same evaluation,
    timeout, retries and incidents."""
    context = rt.token_vars(token)
    job_type = non_empty_string(job_type_raw, context, node.id, rt.now, "job type")
    # What the job is sent (its variables) is a message leaving the engine: bounded
    # like a trigger's input, or a 2.5 GB job input ends its pool process.
    rt.bounded(context, f"the job input of {node.label}")
    reserved = reserved_job_type(job_type)
    if reserved is not None:  # a FEEL job type: the deploy-time check cannot see it
        raise TechnicalFailure(f"{node.label}: {reserved}")
    retries = rt.services.default_job_retries
    if retries_raw is not None:
        value = evaluate(retries_raw, context, node.id, rt.now)
        try:
            retries = int(str(value))
        except ValueError as exc:
            raise TechnicalFailure(
                f"job retries {shorten(retries_raw)} of {node.label} is not a number"
            ) from exc
    retries = max(retries, 1)
    wait = rt.add_wait(
        WaitKind.JOB,
        WaitRole.NODE,
        node.id,
        token_id=token.id,
        job_type=job_type,
        attempt=1,
        retries_left=retries - 1,
        **fields,
    )
    _dispatch(rt, token, node, wait)
    return wait


def _dispatch(rt: Runtime, token: Token, node: Node, wait: Wait) -> None:
    assert wait.job_type is not None
    wait.job_running = True
    wait.due_at = rt.now + timedelta(seconds=timeout(rt.services, wait.job_type))
    headers = (
        dict(wait.job_headers)
        if wait.job_headers is not None
        else {k: v for k, v in node.task_headers}
    )
    rt.effects.append(
        DispatchJob(
            instance_id=rt.cp.instance_id,
            wait_id=wait.id,
            node_id=node.id,
            job_type=wait.job_type,
            attempt=wait.attempt,
            variables=_variables(rt, token, wait),
            headers=headers,
        )
    )
    rt.fact("JobDispatched", node=node.id, job_type=wait.job_type, attempt=wait.attempt)


def _variables(rt: Runtime, token: Token, wait: Wait) -> dict[str, Any]:
    """What the job sees: the token's variables; a complete listener's job also the
    variables the task is being completed with (it may judge them)."""
    variables = rt.token_vars(token)
    task = rt.cp.waits.get(wait.listener_of) if wait.listener_of is not None else None
    pending = task.task_pending if task is not None else None
    if pending and pending.get("variables"):
        variables = {**variables, **pending["variables"]}
    return variables


def timed_out(rt: Runtime, wait: Wait) -> Wake:
    """The job wait's deadline: a backoff ended (dispatch the next attempt), or a
    dispatched job gave no result within the timeout (it or its message is lost:
    dispatch it again as the next attempt; a late result of the old one is stale)."""
    token = rt.token_of(wait)
    if wait.job_running:
        rt.fact("JobTimedOut", node=wait.node_id, job_type=wait.job_type, attempt=wait.attempt)
        wait.attempt += 1
    _dispatch(rt, token, rt.node(wait.node_id), wait)
    return Wake.token(token.id)


def job_wait(rt: Runtime, wait_id: str, attempt: int) -> Wait | None:
    wait = rt.live_wait(wait_id, WaitKind.JOB)
    if wait is None or wait.attempt != attempt or not wait.job_running:
        return None  # a result for an earlier attempt, or for a job in retry backoff
    return wait


def completed(rt: Runtime, trigger: JobCompleted) -> Wake:
    wait = job_wait(rt, trigger.wait_id, trigger.attempt)
    if wait is None:
        return STALE
    token = rt.token_of(wait)
    rt.withdraw(wait)
    leave_or_raise(rt, token, trigger.variables)
    return Wake.token(token.id)


def failed(rt: Runtime, trigger: JobFailed) -> Wake:
    wait = job_wait(rt, trigger.wait_id, trigger.attempt)
    if wait is None:
        return STALE
    token = rt.token_of(wait)
    node = rt.node(wait.node_id)
    if trigger.retries is not None:
        wait.retries_left = trigger.retries  # the worker counts: N attempts left
    if wait.retries_left > 0:
        wait.retries_left -= 1
        wait.attempt += 1
        wait.job_running = False
        backoff = (
            trigger.backoff_seconds
            if trigger.backoff_seconds is not None
            else retry_backoff(rt.services, wait.job_type, wait.attempt)
        )
        wait.due_at = rt.now + timedelta(seconds=backoff)
        rt.fact(
            "JobRetryScheduled",
            node=node.id,
            job_type=wait.job_type,
            attempt=wait.attempt,
            error_class=trigger.error_class,
        )
        return Wake.token(token.id)
    what = f"{wait.execution_listener} execution listener" if wait.execution_listener else "job"
    if wait.listener_of is not None:
        what = "task listener"
    raise_incident(
        rt,
        token,
        node,
        f"{what} {wait.job_type!r} failed after {wait.attempt} attempt(s): {trigger.error}",
        trigger.error_class,
        job_type=wait.job_type,
        # A start listener runs before the element's boundaries are armed: its retry
        # arms them once the listeners are done (nodes.enter).
        activated=wait.execution_listener != "start",
    )
    return Wake.token(token.id)


def error_thrown(rt: Runtime, trigger: JobErrorThrown) -> Wake:
    wait = job_wait(rt, trigger.wait_id, trigger.attempt)
    if wait is None:
        return STALE
    token = rt.token_of(wait)
    node = rt.node(wait.node_id)
    rt.withdraw(wait)
    throw_error(
        rt, token, node, trigger.code, trigger.message, trigger.variables, from_end_event=False
    )
    return Wake.token(token.id)


def timeout(services: Services, job_type: str | None) -> float:
    own = services.job_types.get(job_type or "")
    if own is not None and own.timeout_seconds is not None:
        return own.timeout_seconds
    return services.job_timeout_seconds


def retry_backoff(services: Services, job_type: str | None, attempt: int) -> float:
    """The wait before ``attempt`` (2, 3, ...): the base doubled per earlier retry."""
    own = services.job_types.get(job_type or "")
    base = (
        own.retry_backoff_seconds
        if own is not None and own.retry_backoff_seconds is not None
        else services.job_retry_backoff_seconds
    )
    return float(base * (2 ** (attempt - 2)))


def heartbeat(rt: Runtime, trigger: JobHeartbeat) -> Wake:
    wait = job_wait(rt, trigger.wait_id, trigger.attempt)
    if wait is None:
        return STALE
    if trigger.retries is not None:
        wait.retries_left = trigger.retries - 1  # the worker counts this attempt too
        if trigger.extend_seconds is None:
            return Wake.token(rt.token_of(wait).id)
    extend = trigger.extend_seconds or timeout(rt.services, wait.job_type)
    wait.due_at = rt.now + timedelta(seconds=extend)
    return Wake.token(rt.token_of(wait).id)

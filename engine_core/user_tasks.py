"""User tasks: the attributes a Camunda user sets on one, and the lifecycle its task
listeners guard.

Attributes (``zeebe:assignmentDefinition``, ``zeebe:taskSchedule``,
``zeebe:priorityDefinition``, ``zeebe:formDefinition``) are evaluated once, when the
task is created: a value starting with ``=`` is FEEL, anything else a literal, and a
result of the wrong type is an incident at the task naming the attribute, never a
value quietly coerced. They live on the task's wait (the truth); the ``user_tasks``
rows are their projection.

The lifecycle (``Wait.task_state``)::

    creating ──▶ created ──▶ assigning / updating / completing ──▶ created | (done)

A transition (create, assign, update, complete) first runs the task listeners of its
event, one after the other, each a job dispatched through ``jobs.py`` (so with the
job's timeout, retries and, once they run out, an incident at the user task). Only
after the last listener's result does the transition take effect: what it will apply
waits in ``task_pending``. A listener's result may correct attributes and (assign,
update, complete) deny the transition: the task goes back to ``created`` with the
reason in ``denied_reason``. While a transition runs, another one is refused, as is
a claim of a task someone else holds: a refused trigger changes nothing (a fact says
why), and the Client refuses it before sending when it can see it first.

An incident at a user task whose transition's listener failed keeps the task, its
state and what the transition will apply; the retry runs that listener again (the ones
before it are not re-run) and the transition goes on, as Camunda retries the listener's
job. An incident before the task opened (an attribute of the wrong type) retries its
creation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dormant.engine_core import jobs
from dormant.engine_core.checkpoint import TaskState, Token, TokenState, Wait, WaitKind, WaitRole
from dormant.engine_core.errors import EngineInvariantError, InvalidField
from dormant.engine_core.expressions import TechnicalFailure
from dormant.engine_core.incidents import leave_or_raise, raise_failure, raise_incident
from dormant.engine_core.model import Node
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.task_attributes import (
    MAX_REFERENCE,
    UPDATABLE,
    check_changes,
    evaluate_attributes,
)
from dormant.engine_core.transitions import move_token
from dormant.engine_core.triggers import (
    JobCompleted,
    JobErrorThrown,
    TaskAssign,
    TaskCompleted,
    TaskUpdate,
)
from dormant.engine_core.wake import STALE, Wake

__all__ = [
    "assign",
    "complete",
    "create",
    "listener_completed",
    "listener_error",
    "update",
]

_STATE = {
    "create": TaskState.CREATING,
    "assign": TaskState.ASSIGNING,
    "update": TaskState.UPDATING,
    "complete": TaskState.COMPLETING,
}
_EVENT = {state: event for event, state in _STATE.items()}


# -- the lifecycle --------------------------------------------------------------------


def create(rt: Runtime, token: Token, node: Node) -> None:
    """The token reached the user task: evaluate its attributes, open it, run its
    create listeners (then, when it has an assignee, its assign listeners). Reached by
    an incident retry while its task is in a transition: that transition's failed
    listener runs again."""
    kept = next((w for w in rt.waits_of(token.id) if w.kind is WaitKind.USER_TASK), None)
    if kept is not None:
        move_token(token, TokenState.WAITING)
        _next(rt, token, kept)
        return
    fields = evaluate_attributes(node, rt.token_vars(token), rt.now)
    wait = rt.add_wait(
        WaitKind.USER_TASK,
        WaitRole.NODE,
        node.id,
        token_id=token.id,
        task_name=node.name,
        **fields,
    )
    move_token(token, TokenState.WAITING)
    _begin(rt, token, wait, "create", {})


def _listeners(node: Node, event: str) -> list[Any]:
    return [x for x in node.task_listeners if x.event == event]


def _begin(rt: Runtime, token: Token, wait: Wait, event: str, pending: dict[str, Any]) -> None:
    wait.task_state = _STATE[event]
    wait.task_pending = pending
    wait.listener_next = 0
    _next(rt, token, wait)


def _next(rt: Runtime, token: Token, wait: Wait) -> None:
    """Dispatch the transition's next listener, or let the transition take effect."""
    node = rt.node(wait.node_id)
    event = _EVENT[wait.task_state]
    listeners = _listeners(node, event)
    if wait.listener_next < len(listeners):
        listener = listeners[wait.listener_next]
        jobs.open_job(
            rt,
            token,
            node,
            listener.job_type,
            listener.retries,
            listener_of=wait.id,
            job_headers=_headers(rt, wait, event),
        )
        return
    _take_effect(rt, token, wait, event)


def _headers(rt: Runtime, wait: Wait, event: str) -> dict[str, str]:
    """What a listener's job is told about its task (``task_headers(self)``)."""
    pending = wait.task_pending or {}
    headers = {
        "userTaskEvent": event,
        "userTaskId": f"{rt.cp.instance_id}.{wait.id}",
        "assignee": wait.assignee or "",
        "candidateUsers": ",".join(wait.candidate_users),
        "candidateGroups": ",".join(wait.candidate_groups),
        "dueDate": wait.due_date.isoformat() if wait.due_date else "",
        "followUpDate": wait.follow_up_date.isoformat() if wait.follow_up_date else "",
        "priority": str(wait.priority),
    }
    if event == "assign":
        headers["newAssignee"] = pending.get("assignee") or ""
    return headers


def _take_effect(rt: Runtime, token: Token, wait: Wait, event: str) -> None:
    pending = wait.task_pending or {}
    wait.task_pending = None
    wait.listener_next = 0
    task_id = f"{rt.cp.instance_id}.{wait.id}"
    if event == "complete":
        rt.fact("TaskCompleted", node=wait.node_id, task=task_id)
        rt.withdraw(wait)
        leave_or_raise(rt, token, pending.get("variables") or {})
        return
    wait.task_state = TaskState.CREATED
    if event == "create":
        rt.fact("TaskCreated", node=wait.node_id, task=task_id)
        if wait.assignee is not None and _listeners(rt.node(wait.node_id), "assign"):
            # Camunda runs the assign listeners for the assignee a task is created with.
            assignee, wait.assignee = wait.assignee, None
            _begin(rt, token, wait, "assign", {"assignee": assignee})
    elif event == "assign":
        wait.assignee = pending.get("assignee")
        rt.fact("TaskAssigned", node=wait.node_id, task=task_id, assigned=wait.assignee is not None)
    else:
        for field, value in (pending.get("changes") or {}).items():
            setattr(wait, field, value)
        rt.fact(
            "TaskUpdated",
            node=wait.node_id,
            task=task_id,
            fields=",".join(sorted(pending.get("changes") or {})),
        )


def _open_task(rt: Runtime, wait_id: str, what: str) -> tuple[Wait, Token] | Wake:
    """The task a transition names, if it can take one now; else the stale wake (with
    the reason) that makes the trigger change nothing."""
    wait = rt.live_wait(wait_id, WaitKind.USER_TASK)
    if wait is None:
        return STALE
    if wait.task_state is not TaskState.CREATED:
        return _refused(what, f"the task is {wait.task_state.value}")
    return wait, rt.token_of(wait)


def _refused(what: str, why: str) -> Wake:
    return Wake.refused(f"user task {what} refused: {why}")


def _guarded(rt: Runtime, token: Token, wait: Wait, run: Callable[[], None]) -> Wake:
    """A transition started by a trigger: a failure (a listener's FEEL job type) is an
    incident at the user task, as at its creation."""
    try:
        run()
    except TechnicalFailure as failure:
        raise_failure(rt, failure, token, rt.node(wait.node_id))
    return Wake.token(token.id)


def complete(rt: Runtime, trigger: TaskCompleted) -> Wake:
    found = _open_task(rt, trigger.wait_id, "complete")
    if isinstance(found, Wake):
        return found
    wait, token = found
    wait.denied_reason = None
    pending = {"variables": dict(trigger.variables)}
    return _guarded(rt, token, wait, lambda: _begin(rt, token, wait, "complete", pending))


def assign(rt: Runtime, trigger: TaskAssign) -> Wake:
    found = _open_task(rt, trigger.wait_id, "claim" if trigger.claim else "assign")
    if isinstance(found, Wake):
        return found
    wait, token = found
    if trigger.claim and wait.assignee is not None and wait.assignee != trigger.assignee:
        return _refused("claim", "the task is assigned to someone else")
    wait.denied_reason = None
    pending = {"assignee": trigger.assignee}
    return _guarded(rt, token, wait, lambda: _begin(rt, token, wait, "assign", pending))


def update(rt: Runtime, trigger: TaskUpdate) -> Wake:
    found = _open_task(rt, trigger.wait_id, "update")
    if isinstance(found, Wake):
        return found
    wait, token = found
    bad = [k for k in trigger.changes if k not in UPDATABLE]
    try:
        if bad:
            raise InvalidField(f"user task attribute {bad[0]!r} cannot be updated")
        changes = check_changes(trigger.changes)
    except InvalidField as exc:
        return _refused("update", str(exc))
    wait.denied_reason = None
    pending = {"changes": changes}
    return _guarded(rt, token, wait, lambda: _begin(rt, token, wait, "update", pending))


# -- listener results -----------------------------------------------------------------


def _task_of(rt: Runtime, job: Wait) -> Wait:
    task = rt.cp.waits.get(job.listener_of or "")
    if task is None or task.kind is not WaitKind.USER_TASK:
        raise EngineInvariantError(
            f"listener job {job.id} of instance {rt.cp.instance_id} names no user task"
        )
    return task


def listener_completed(rt: Runtime, job: Wait, trigger: JobCompleted) -> Wake:
    """A listener's result: its corrections, or its denial, then the next listener.

    The result is the job's returned dict: ``corrections`` (Camunda's attribute
    names), ``denied`` and ``deniedReason``; any other key is refused."""
    token = rt.token_of(job)
    task = _task_of(rt, job)
    node = rt.node(task.node_id)
    rt.withdraw(job)
    event = _EVENT[task.task_state]

    def run() -> None:
        corrections, denied, reason = _result(node, event, trigger.variables)
        rt.fact("TaskListenerCompleted", node=node.id, event=event, denied=denied)
        if denied:
            task.task_state = TaskState.CREATED
            task.task_pending = None
            task.listener_next = 0
            task.denied_reason = reason or "denied by a task listener"
            task_id = f"{rt.cp.instance_id}.{task.id}"
            rt.fact("TaskTransitionDenied", node=node.id, task=task_id, transition=event)
            return
        pending = task.task_pending if task.task_pending is not None else {}
        for field, value in corrections.items():
            if event == "assign" and field == "assignee":
                pending["assignee"] = value
            elif event == "update" and field != "assignee":
                pending.setdefault("changes", {})[field] = value
            else:
                setattr(task, field, value)
        task.task_pending = pending
        task.listener_next += 1
        _next(rt, token, task)

    return _guarded(rt, token, task, run)


def _result(
    node: Node, event: str, result: Mapping[str, Any]
) -> tuple[dict[str, Any], bool, str | None]:
    unknown = sorted(set(result) - {"corrections", "denied", "deniedReason"})
    if unknown:
        raise TechnicalFailure(
            f"user task {node.label}: a {event} listener's result has {unknown[0]!r}; a task "
            "listener returns only corrections, denied and deniedReason",
            "InvalidListenerResult",
        )
    raw = result.get("corrections") or {}
    if not isinstance(raw, dict):
        raise TechnicalFailure(
            f"user task {node.label}: a {event} listener's corrections are a {type(raw).__name__}, "
            "expected an object",
            "InvalidListenerResult",
        )
    try:
        corrections = check_changes(raw)
    except InvalidField as exc:
        raise TechnicalFailure(
            f"user task {node.label}: a {event} listener's correction: {exc}",
            "InvalidListenerResult",
        ) from None
    denied = result.get("denied") is True
    reason = result.get("deniedReason")
    if denied and event == "create":
        raise TechnicalFailure(
            f"user task {node.label}: a create listener cannot deny the task's creation",
            "InvalidListenerResult",
        )
    return corrections, denied, str(reason)[:MAX_REFERENCE] if reason is not None else None


def listener_error(rt: Runtime, job: Wait, trigger: JobErrorThrown) -> Wake:
    """A task listener cannot throw a BPMN error (Camunda refuses it too): an incident."""
    token = rt.token_of(job)
    node = rt.node(job.node_id)
    rt.withdraw(job)
    raise_incident(
        rt,
        token,
        node,
        f"task listener {job.job_type!r} threw BPMN error {trigger.code!r}; a task "
        "listener completes (with corrections or a denial) or fails",
        "ListenerThrewError",
        job_type=job.job_type,
    )
    return Wake.token(token.id)

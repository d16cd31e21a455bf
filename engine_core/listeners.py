"""Execution listeners (``zeebe:executionListeners``): blocking jobs around an element.

Each listener is a job of its own type, dispatched and retried by the job machinery
(``jobs.open_job``: timeout, retries with backoff, an incident when they are used up)
on the element's token, which waits at its node meanwhile. The token's
``listener_phase`` says where it is, so every path (a step budget stop, an incident
retry) resumes exactly there:

* ``start``: entering the node, after the input mappings (as Zeebe applies them
  first) and before anything else the element does: boundaries are armed, the job
  created, the subscription opened, the gateway's conditions read only once every
  start listener completed. A listener's variables become local variables of the
  element, so the element's expressions, its job and later listeners see them.
* ``ran``: the start listeners are done; the node's behaviour runs (nodes.enter).
* ``end``: the element finished and its output mappings were applied (moving._leave);
  its boundaries are withdrawn (the element is completing) and the end listeners run;
  their variables are propagated from the element's parent scope, like an output
  mapping's.
* ``ended``: the end listeners are done; the token leaves along its flows.

A listener that fails with no retries left is an incident at the element; its retry
runs that listener again (the phase and index travel to the retried token), never the
listeners that already completed. A listener whose type or retries cannot be
evaluated restarts its phase from the first listener on retry, as Zeebe re-runs them.
A listener's job cannot throw a BPMN error (Zeebe refuses it): that is an incident.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dormant.engine_core import jobs
from dormant.engine_core.checkpoint import ROOT_SCOPE, Scope, Token, TokenState, Wait
from dormant.engine_core.errors import InvalidVariables
from dormant.engine_core.expressions import TechnicalFailure
from dormant.engine_core.incidents import raise_failure, raise_incident
from dormant.engine_core.inputs import check_value
from dormant.engine_core.model import ExecutionListener, Node
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.transitions import move_token
from dormant.engine_core.triggers import JobCompleted, JobErrorThrown
from dormant.engine_core.wake import Wake

__all__ = ["AROUND", "completed", "error_thrown", "local_scope", "pending", "run"]

# The phase that follows each one once its listeners have all completed. The process's
# own listeners run on a token too: its start token before the start event
# ("process-start", then None: the start event itself has no start listeners), and a
# token spawned where the last path ended once the process scope is done
# ("process-end", then "process-ended": the instance completes, moving.finish_process).
# An event sub-process's listeners likewise, on the token of its scope ("sub-start",
# "sub-end", "sub-ended": moving.finish_event_sub).
_DONE: dict[str, str | None] = {
    "start": "ran",
    "end": "ended",
    "process-start": None,
    "process-end": "process-ended",
    "sub-start": None,
    "sub-end": "sub-ended",
}
# Phases in which nodes.enter runs no behaviour of the token's node.
AROUND = frozenset(
    {"end", "ended", "process-start", "process-end", "process-ended"}
    | {"sub-start", "sub-end", "sub-ended"}
)


def pending(node: Node, token: Token, event: str) -> bool:
    """Whether ``token`` still has ``event`` listeners to run at ``node``."""
    return bool(node.listeners(event)) and token.listener_phase in (None, event)


def run(rt: Runtime, token: Token, node: Node, event: str) -> None:
    """Dispatch the next ``event`` listener of ``token`` (the first if the phase is new)
    and park the token on it."""
    if token.listener_phase != event:
        token.listener_phase, token.listener_index = event, 0
    todo = _listeners(rt, token, node, event)
    if token.listener_index >= len(todo):
        _done(rt, token, event)  # the node has fewer now (the instance was migrated)
        return
    listener = todo[token.listener_index]
    try:
        jobs.open_job(
            rt, token, node, listener.job_type, listener.retries, execution_listener=event
        )
    except TechnicalFailure:
        token.listener_index = 0  # an evaluation failure re-runs the whole phase
        raise
    move_token(token, TokenState.WAITING)
    rt.fact(
        "ExecutionListener",
        node=node.id,
        event=event,
        index=token.listener_index,
        job_type=listener.job_type,
    )


def _listeners(rt: Runtime, token: Token, node: Node, phase: str) -> tuple[ExecutionListener, ...]:
    """Whose listeners a phase runs: the process's, the event sub-process whose scope
    the token is in, or the token's node's."""
    if phase.startswith("process-"):
        return rt.defn.listeners(phase.removeprefix("process-"))
    if phase.startswith("sub-"):
        return rt.node(_event_sub(rt, token).node_id or "").listeners(phase.removeprefix("sub-"))
    return node.listeners(phase)


def _event_sub(rt: Runtime, token: Token) -> Scope:
    return rt.cp.scopes[token.scope_id]


def local_scope(rt: Runtime, token: Token, node: Node) -> Scope:
    """The element's own scope, where start listeners write: its local (input-mapping)
    scope, or a sub-process's scope, opened here if the element has none yet."""
    existing = rt.cp.scopes.get(token.inner_scope) if token.inner_scope else None
    if existing is not None and existing.node_id == node.id:
        return existing
    scope = rt.new_scope(node.id, token.scope_id, token.id)
    token.inner_scope = scope.id
    return scope


def completed(rt: Runtime, wait: Wait, trigger: JobCompleted) -> Wake:
    token = rt.token_of(wait)
    node = rt.node(wait.node_id)
    event = wait.execution_listener or ""
    rt.withdraw(wait)
    move_token(token, TokenState.ACTIVE)
    try:
        _merge(rt, token, node, event, trigger.variables)
        token.listener_index += 1
        if token.listener_index < len(_listeners(rt, token, node, event)):
            run(rt, token, node, event)
            return Wake.token(token.id)
    except TechnicalFailure as failure:
        raise_failure(rt, failure, token, node, activated=event != "start")
        return Wake.token(token.id)
    _done(rt, token, event)
    return Wake.token(token.id)


def _done(rt: Runtime, token: Token, event: str) -> None:
    """Every ``event`` listener completed: nodes.enter continues from the next phase."""
    token.listener_phase, token.listener_index = _DONE[event], 0
    move_token(token, TokenState.ACTIVE)
    rt.queue.append(token.id)


def _merge(rt: Runtime, token: Token, node: Node, event: str, variables: Mapping[str, Any]) -> None:
    """End listeners write outward, like output mappings; start listeners into the
    element's own scope (the process's, an event sub-process's)."""
    if event in ("end", "process-end"):
        rt.propagate(token.scope_id, variables)
        return
    if event == "sub-end":
        rt.propagate(_event_sub(rt, token).parent_id, variables)
        return
    for name, value in variables.items():
        try:
            check_value(value, f"variable {name[:60]!r}", rt.services.limits, depth=1)
        except InvalidVariables as exc:
            raise TechnicalFailure(str(exc), "InvalidVariables") from None
    if event == "process-start":
        target = rt.cp.scopes[ROOT_SCOPE]
    elif event == "sub-start":
        target = _event_sub(rt, token)
    else:
        target = local_scope(rt, token, node)
    rt.write_scope(target, variables)


def error_thrown(rt: Runtime, wait: Wait, trigger: JobErrorThrown) -> Wake:
    token = rt.token_of(wait)
    node = rt.node(wait.node_id)
    rt.withdraw(wait)
    raise_incident(
        rt,
        token,
        node,
        f"{wait.execution_listener} execution listener {wait.job_type!r} threw BPMN error "
        f"{trigger.code!r}; a listener's job cannot throw a BPMN error (Zeebe refuses it), "
        "fail the job instead",
        "ListenerBpmnError",
        job_type=wait.job_type,
        activated=wait.execution_listener != "start",
    )
    return Wake.token(token.id)

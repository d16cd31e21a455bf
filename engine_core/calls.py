"""Call activities: a child instance started after the commit, its end a trigger.

The called process is bound first (``bind_child``: its id, the version its
``bindingType`` chooses, a none start event; ``engine_core/bindings.py``), before the
activity arms a boundary: a missing child is an incident with nothing armed beside
it, as in Zeebe, and its retry binds again. The calling token waits on a ``CALL``
wait that names the child instance (its id is derived from the parent's, so a
redelivered start is the same child). Withdrawing the wait by any path cancels the
child (``Runtime.withdraw``); the child's completion or failure comes back as a
trigger: completed, the token leaves with the child's variables; failed with a BPMN
error, the error is thrown at the call activity; failed otherwise, an incident opens
there (docs/incidents.md, What raises an incident).
"""

from __future__ import annotations

from dataclasses import dataclass

from dormant.engine_core.bindings import Binding, bind_process, deployment_of
from dormant.engine_core.checkpoint import Token, TokenState, WaitKind, WaitRole
from dormant.engine_core.effects import NotifyParent, StartChild
from dormant.engine_core.expressions import TechnicalFailure, non_empty_string
from dormant.engine_core.incidents import leave_or_raise, raise_incident
from dormant.engine_core.model import Node
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.throwing import throw_error
from dormant.engine_core.transitions import move_token
from dormant.engine_core.triggers import ChildCompleted, ChildFailed, Trigger
from dormant.engine_core.wake import STALE, Wake

__all__ = [
    "ChildBinding",
    "bind_child",
    "child_completed",
    "child_failed",
    "missing_child",
    "parent_trigger",
    "start_child",
]


@dataclass(frozen=True, slots=True)
class ChildBinding:
    """The process a call activity starts: its key, and the version when bound here
    (None: the shell lent no catalog, the latest or tagged one is chosen after commit)."""

    key: str
    version: int | None


def bind_child(rt: Runtime, token: Token, node: Node) -> ChildBinding:
    """The called process, evaluated and bound against what the shell lent
    (``Services.processes``); ``TechnicalFailure`` when nothing deployed matches."""
    context = rt.token_vars(token)
    key = non_empty_string(node.called_process or "", context, node.id, rt.now, "called process")
    processes = rt.services.processes
    binding = Binding(node.called_binding)
    if processes is None:
        if binding is Binding.DEPLOYMENT:
            raise TechnicalFailure(
                f'{node.label}: bindingType="deployment" needs the deployed processes, '
                "which this step was not lent",
                "UnknownProcess",
            )
        return ChildBinding(key, None)
    version = bind_process(
        processes,
        key,
        binding,
        version_tag=node.called_version_tag,
        deployment=deployment_of(processes, rt.cp.process_key, rt.cp.version),
        where=f"call activity {node.label}",
    )
    return ChildBinding(key, version)


def start_child(rt: Runtime, token: Token, node: Node, child: ChildBinding | None = None) -> None:
    """Start the child of ``node``; ``child`` is its binding when ``nodes.enter`` bound
    it before arming the boundaries (always, on that path)."""
    if child is None:
        child = bind_child(rt, token, node)
    context = rt.token_vars(token)
    variables = dict(context) if node.propagate_all_parent_variables else {}
    variables.update(rt.mapped_inputs(node, context))
    rt.bounded(variables, f"the inputs of call activity {node.label}")
    wait = rt.add_wait(WaitKind.CALL, WaitRole.NODE, node.id, token_id=token.id)
    child_id = f"{rt.cp.instance_id}.{wait.id}"
    wait.child_instance_id = child_id
    root = rt.cp.parent.root_instance_id if rt.cp.parent else rt.cp.instance_id
    rt.effects.append(
        StartChild(
            child_instance_id=child_id,
            process_key=child.key,
            variables=variables,
            parent_instance_id=rt.cp.instance_id,
            parent_wait_id=wait.id,
            root_instance_id=root,
            version_tag=node.called_version_tag if child.version is None else None,
            version=child.version,
        )
    )
    move_token(token, TokenState.WAITING)


def parent_trigger(notice: NotifyParent) -> Trigger:
    """The trigger a child's end sends the call activity that waits for it."""
    if notice.completed:
        return ChildCompleted(wait_id=notice.wait_id, variables=notice.variables)
    return ChildFailed(
        wait_id=notice.wait_id,
        error=notice.error or "child instance failed",
        error_class=notice.error_class or "ChildFailed",
        error_code=notice.error_code,
    )


def missing_child(parent_wait_id: str, error: str) -> Trigger:
    """A child whose process the shell cannot find after the commit fails back to its
    caller: the call activity gets an incident, which a retry after deploying heals.
    ``bind_child`` finds a missing process before anything is armed; this is the net
    for a step that was lent no catalog, and for an outbox row written before
    bindings. Dropping it would leave the caller waiting for a child that never
    exists."""
    return ChildFailed(wait_id=parent_wait_id, error=error, error_class="UnknownProcess")


def child_completed(rt: Runtime, trigger: ChildCompleted) -> Wake:
    wait = rt.live_wait(trigger.wait_id, WaitKind.CALL)
    if wait is None:
        return STALE
    token = rt.token_of(wait)
    node = rt.node(wait.node_id)
    rt.cp.waits.pop(wait.id, None)  # the child has ended: nothing to cancel
    result = trigger.variables if node.propagate_all_child_variables or node.outputs else {}
    leave_or_raise(rt, token, result)
    return Wake.token(token.id)


def child_failed(rt: Runtime, trigger: ChildFailed) -> Wake:
    wait = rt.live_wait(trigger.wait_id, WaitKind.CALL)
    if wait is None:
        return STALE
    token = rt.token_of(wait)
    node = rt.node(wait.node_id)
    rt.cp.waits.pop(wait.id, None)
    if trigger.error_code is not None:
        throw_error(rt, token, node, trigger.error_code, trigger.error, {}, from_end_event=False)
    else:
        raise_incident(
            rt,
            token,
            node,
            f"child instance {wait.child_instance_id} failed: {trigger.error}",
            trigger.error_class,
        )
    return Wake.token(token.id)

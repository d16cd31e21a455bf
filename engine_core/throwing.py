"""BPMN errors and escalations: finding the catcher, scope by scope, outward.

The search starts at the throwing activity's own boundaries, then walks the scope
chain: at each scope an event sub-process start that catches, then the boundaries of
the (sub-process) activity that owns the scope. A specific code beats a catch-all.

Uncaught, an error follows docs/incidents.md: an error end event reaching the root is the
modelled outcome (the instance fails); an error thrown by an activity opens an
incident at that activity; inside a child instance the child fails and the caller's
call activity gets the error (its boundaries may catch it). An uncaught escalation
is not a failure: the thrower simply continues.

Messages and signals thrown by the model (without a job) are effects: published after
the commit, through the outbox.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dormant.engine_core import boundaries, event_subs
from dormant.engine_core.checkpoint import ROOT_SCOPE, Token
from dormant.engine_core.effects import ThrowMessage, ThrowSignal
from dormant.engine_core.expressions import correlation_key, non_empty_string
from dormant.engine_core.incidents import raise_incident
from dormant.engine_core.model import EventKind, Node, NodeKind
from dormant.engine_core.moving import fail_instance
from dormant.engine_core.runtime import Runtime

__all__ = ["throw_error", "throw_escalation", "throw_message_or_signal"]


def _pick(candidates: list[Node], code: str | None, kind: EventKind) -> Node | None:
    def code_of(node: Node) -> str | None:
        event = node.event
        return event.error_code if kind is EventKind.ERROR else event.escalation_code

    specific = [n for n in candidates if code_of(n) is not None and code_of(n) == code]
    if specific:
        return specific[0]
    catch_all = [n for n in candidates if code_of(n) is None]
    return catch_all[0] if catch_all else None


def _boundary_for(rt: Runtime, activity: Node, code: str | None, kind: EventKind) -> Node | None:
    candidates = [rt.node(b) for b in activity.boundaries]
    return _pick([b for b in candidates if b.event.kind is kind], code, kind)


def _event_sub_start_for(
    rt: Runtime, container: str | None, code: str | None, kind: EventKind
) -> Node | None:
    starts = [
        start
        for esp in rt.defn.event_sub_processes(container)
        for start in rt.defn.nodes_in(esp.id)
        if start.kind is NodeKind.START_EVENT and start.event.kind is kind
    ]
    return _pick(starts, code, kind)


def throw_error(
    rt: Runtime,
    token: Token,
    node: Node,
    code: str | None,
    message: str,
    variables: Mapping[str, Any],
    *,
    from_end_event: bool,
) -> None:
    if not from_end_event and token.loop_index is None and node.boundaries:
        boundary = _boundary_for(rt, node, code, EventKind.ERROR)
        if boundary is not None:
            boundaries.fire(rt, token, boundary, variables, interrupting=boundary.cancel_activity)
            return
    if _catch_outward(rt, token, code, EventKind.ERROR, variables, interrupt_always=True):
        return
    reason = f"BPMN error {code!r} thrown at {node.label} was not caught" + (
        f": {message}" if message else ""
    )
    if rt.cp.parent is not None or from_end_event:
        fail_instance(rt, reason, error_code=code)
    else:
        raise_incident(rt, token, node, reason, "UnhandledError")


def throw_escalation(
    rt: Runtime, token: Token, node: Node, code: str | None, variables: Mapping[str, Any]
) -> bool:
    """Throw an escalation; True when the thrower continues (not interrupted)."""
    return not _catch_outward(
        rt, token, code, EventKind.ESCALATION, variables, interrupt_always=False
    )


def _catch_outward(
    rt: Runtime,
    token: Token,
    code: str | None,
    kind: EventKind,
    variables: Mapping[str, Any],
    *,
    interrupt_always: bool,
) -> bool:
    """Walk the scopes outward; True when the thrower was interrupted by the catch."""
    scope_id: str | None = token.scope_id
    while scope_id is not None:
        scope = rt.cp.scopes[scope_id]
        start = _event_sub_start_for(rt, scope.node_id, code, kind)
        if start is not None:
            interrupting = interrupt_always or start.is_interrupting
            if interrupting:
                rt.terminate_scope(scope_id)
            event_subs.start(rt, scope_id, start, variables)
            return interrupting
        if scope_id == ROOT_SCOPE:
            return False
        if scope.token_id is None:
            scope_id = scope.parent_id
            continue
        owner = rt.cp.tokens.get(scope.token_id)
        if owner is None:
            return False
        owner_node = rt.node(owner.node_id)
        if owner.loop_index is None:
            boundary = _boundary_for(rt, owner_node, code, kind)
            if boundary is not None:
                interrupting = interrupt_always or boundary.cancel_activity
                boundaries.fire(rt, owner, boundary, variables, interrupting=interrupting)
                return interrupting
        scope_id = owner.scope_id
    return False


def throw_message_or_signal(rt: Runtime, token: Token, node: Node) -> None:
    """A message or signal thrown without a job: published after commit via the outbox."""
    event = node.event
    context = rt.token_vars(token)
    if event.kind is EventKind.MESSAGE:
        name = non_empty_string(event.message_name or "", context, node.id, rt.now, "message name")
        key = (
            correlation_key(event.correlation_key, context, node.id, rt.now)
            if event.correlation_key
            else None
        )
        payload = rt.mapped_inputs(node, context) if node.inputs else {}
        rt.effects.append(
            ThrowMessage(name, key, payload, message_id=f"{rt.cp.instance_id}.{rt.cp.next_id('m')}")
        )
    elif event.kind is EventKind.SIGNAL:
        name = non_empty_string(event.signal_name or "", context, node.id, rt.now, "signal name")
        payload = rt.mapped_inputs(node, context) if node.inputs else {}
        rt.effects.append(
            ThrowSignal(name, payload, signal_id=f"{rt.cp.instance_id}.{rt.cp.next_id('g')}")
        )

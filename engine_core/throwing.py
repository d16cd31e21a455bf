"""BPMN errors and escalations: finding the catcher, scope by scope, outward.

The search starts at the throwing activity's own boundaries, then walks the scope
chain: at each scope an event sub-process start that catches, then the boundaries of
the (sub-process) activity that owns the scope. A specific code beats a catch-all.

Uncaught, an error follows SRD-079: an error end event reaching the root is the
modelled outcome (the instance fails); an error thrown by an activity opens an
incident at that activity; inside a child instance the child fails and the caller's
call activity gets the error (its boundaries may catch it). An uncaught escalation
is not a failure: the thrower simply continues.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engine_core.checkpoint import Token
from engine_core.model import EventKind, Node, NodeKind
from engine_core.runtime import ROOT_SCOPE

if TYPE_CHECKING:
    from engine_core.runtime import Runtime

__all__ = ["fire_catching_boundary", "throw_error", "throw_escalation"]


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


def fire_catching_boundary(
    rt: Runtime,
    host: Token,
    boundary: Node,
    variables: Mapping[str, Any],
    *,
    interrupting: bool | None = None,
) -> Token:
    """A boundary caught something on ``host``: interrupt it or fork beside it.

    The token is on the boundary before its output mappings read the payload, so a
    failing mapping is an incident at the boundary event (on that token), never an
    exception out of the step. Returns the token that took the boundary."""
    from engine_core.incidents import guarded
    from engine_core.wakes import interrupt_host

    if boundary.cancel_activity if interrupting is None else interrupting:
        interrupt_host(rt, host)
        rt.arrive(host, boundary.id)
        token, target = host, host.scope_id
    else:
        token = rt.spawn(boundary.id, host.scope_id, [*host.lineage, host.id])
        target = None
    guarded(
        rt,
        token,
        boundary,
        lambda: rt.apply_outputs(boundary, token, variables, target_scope=target),
    )
    return token


def _start_event_sub(rt: Runtime, scope_id: str, start: Node, variables: Mapping[str, Any]) -> None:
    from engine_core.wakes import start_event_sub_process

    start_event_sub_process(rt, scope_id, start, variables)


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
    from engine_core.incidents import raise_incident

    if not from_end_event and token.loop_index is None and node.boundaries:
        boundary = _boundary_for(rt, node, code, EventKind.ERROR)
        if boundary is not None:
            fire_catching_boundary(rt, token, boundary, variables)
            return
    if _catch_outward(rt, token, code, EventKind.ERROR, variables, interrupt_always=True):
        return
    reason = f"BPMN error {code!r} thrown at {node.label} was not caught" + (
        f": {message}" if message else ""
    )
    if rt.cp.parent is not None:
        rt.fail_instance(reason, error_code=code)
    elif from_end_event:
        rt.fail_instance(reason, error_code=code)
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
            _start_event_sub(rt, scope_id, start, variables)
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
                fire_catching_boundary(rt, owner, boundary, variables, interrupting=interrupting)
                return interrupting
        scope_id = owner.scope_id
    return False

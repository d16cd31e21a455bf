"""Arming waits: turning an event definition into a ``Wait`` in the checkpoint.

Everything a wait needs to be woken is computed here, once: the ABSOLUTE due time of
a timer, the evaluated message name and correlation key. Re-arming never happens:
a wait stays as recorded until it fires or is withdrawn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine_core.checkpoint import Scope, Token, Wait, WaitKind, WaitRole
from engine_core.expressions import TechnicalFailure, correlation_key, non_empty_string
from engine_core.model import EventDefinition, EventKind, Node, NodeKind
from engine_core.timers import arm_timer

if TYPE_CHECKING:
    from engine_core.runtime import Runtime

__all__ = ["WAITABLE", "arm_boundaries", "arm_event", "arm_event_sub_processes"]

WAITABLE = frozenset({EventKind.TIMER, EventKind.MESSAGE, EventKind.SIGNAL})


def arm_event(
    rt: Runtime,
    node: Node,
    definition: EventDefinition,
    role: WaitRole,
    variables: dict[str, Any],
    *,
    def_index: int = 0,
    token_id: str | None = None,
    scope_id: str | None = None,
    interrupting: bool = True,
) -> Wait:
    common: dict[str, Any] = {
        "def_index": def_index,
        "token_id": token_id,
        "scope_id": scope_id,
        "interrupting": interrupting,
    }
    if definition.kind is EventKind.TIMER:
        assert definition.timer is not None
        armed = arm_timer(definition.timer, variables, node.id, rt.now)
        return rt.add_wait(
            WaitKind.TIMER,
            role,
            node.id,
            due_at=armed.due_at,
            cycle_remaining=armed.cycle_remaining,
            cycle_interval_seconds=armed.interval_seconds,
            **common,
        )
    if definition.kind is EventKind.MESSAGE:
        name = non_empty_string(
            definition.message_name or "", variables, node.id, rt.now, "message name"
        )
        key = (
            correlation_key(definition.correlation_key, variables, node.id, rt.now)
            if definition.correlation_key
            else None
        )
        return rt.add_wait(
            WaitKind.MESSAGE, role, node.id, message_name=name, correlation_key=key, **common
        )
    if definition.kind is EventKind.SIGNAL:
        name = non_empty_string(
            definition.signal_name or "", variables, node.id, rt.now, "signal name"
        )
        return rt.add_wait(WaitKind.SIGNAL, role, node.id, signal_name=name, **common)
    raise ValueError(f"event kind {definition.kind} is not a wait")


def arm_boundaries(rt: Runtime, token: Token, activity: Node) -> None:
    """Boundaries are waits of their host token (SRD-071 §4.8), keyed by node + index."""
    variables = rt.token_vars(token)
    for boundary_id in activity.boundaries:
        boundary = rt.node(boundary_id)
        for index, definition in enumerate(boundary.events):
            if definition.kind in WAITABLE:
                arm_event(
                    rt,
                    boundary,
                    definition,
                    WaitRole.BOUNDARY,
                    variables,
                    def_index=index,
                    token_id=token.id,
                    interrupting=boundary.cancel_activity,
                )


def arm_event_sub_processes(rt: Runtime, scope: Scope) -> None:
    """A scope that starts arms the starts of the event sub-processes inside it.

    All or nothing, and only once: a start that cannot be armed withdraws the ones armed
    before it (the incident's retry arms them all), and a start already armed in the
    scope (a retry after a later failure) is not armed a second time."""
    variables = rt.visible(scope.id)
    armed = {
        (w.node_id, w.def_index)
        for w in rt.cp.waits.values()
        if w.role is WaitRole.EVENT_SUB and w.scope_id == scope.id
    }
    new: list[Wait] = []
    try:
        for esp in rt.defn.event_sub_processes(scope.node_id):
            for start in rt.defn.nodes_in(esp.id):
                if start.kind is not NodeKind.START_EVENT:
                    continue
                for index, definition in enumerate(start.events):
                    if definition.kind in WAITABLE and (start.id, index) not in armed:
                        new.append(
                            arm_event(
                                rt,
                                start,
                                definition,
                                WaitRole.EVENT_SUB,
                                variables,
                                def_index=index,
                                scope_id=scope.id,
                                interrupting=start.is_interrupting,
                            )
                        )
    except TechnicalFailure:
        for wait in new:
            rt.withdraw(wait)
        raise

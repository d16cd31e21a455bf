"""Event sub-processes: armed with their scope, started by their start event's trigger.

A scope that starts (the process, a sub-process) arms the start events of the event
sub-processes inside it as waits of the scope (role ``EVENT_SUB``). When one fires, an
interrupting start terminates the scope's other work first; a non-interrupting one
keeps its subscription (a cycle re-arms). The event sub-process runs in a scope of its
own, child of the scope it interrupts or joins; an error or escalation caught by one
starts it through ``start`` (throwing.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dormant.engine_core.arming import WAITABLE, arm_event, keep_or_withdraw
from dormant.engine_core.checkpoint import Scope, Wait, WaitRole
from dormant.engine_core.expressions import TechnicalFailure
from dormant.engine_core.incidents import raise_failure
from dormant.engine_core.model import Node, NodeKind
from dormant.engine_core.runtime import Runtime

__all__ = ["arm", "fire_wait", "start"]


def arm(rt: Runtime, scope: Scope) -> None:
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
            for start_node in rt.defn.nodes_in(esp.id):
                if start_node.kind is not NodeKind.START_EVENT:
                    continue
                for index, definition in enumerate(start_node.events):
                    if definition.kind in WAITABLE and (start_node.id, index) not in armed:
                        new.append(
                            arm_event(
                                rt,
                                start_node,
                                definition,
                                WaitRole.EVENT_SUB,
                                variables,
                                def_index=index,
                                scope_id=scope.id,
                                interrupting=start_node.is_interrupting,
                            )
                        )
    except TechnicalFailure:
        for wait in new:
            rt.withdraw(wait)
        raise


def fire_wait(rt: Runtime, wait: Wait, variables: Mapping[str, Any]) -> str:
    """The start event's timer, message or signal wait fired; the whole scope woke."""
    assert wait.scope_id is not None
    start_node = rt.node(wait.node_id)
    if start_node.is_interrupting:
        rt.terminate_scope(wait.scope_id)
    else:
        keep_or_withdraw(rt, wait)
    start(rt, wait.scope_id, start_node, variables)
    return ""


def start(rt: Runtime, scope_id: str, start_node: Node, variables: Mapping[str, Any]) -> None:
    assert start_node.parent is not None
    rt.fact(
        "EventSubProcessStarted", node=start_node.parent, interrupting=start_node.is_interrupting
    )
    if start_node.is_interrupting:
        for wait in [w for w in rt.cp.waits.values() if w.scope_id == scope_id]:
            rt.withdraw(wait)
    scope = rt.new_scope(start_node.parent, scope_id, None)
    # The event sub-processes nested in this one are armed when the token enters its
    # start event (nodes._start_event), so a failing subscription is an incident there.
    token = rt.spawn(start_node.id, scope.id, [])
    if rt.node(start_node.parent).listeners("start"):
        token.listener_phase = "sub-start"  # before its start event (listeners.py)
    try:
        rt.apply_outputs(start_node, token, variables)
    except TechnicalFailure as failure:
        raise_failure(rt, failure, token, start_node)

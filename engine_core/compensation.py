"""Compensation: undo completed work by running the handlers of the ledger.

The ledger (``checkpoint.compensation``) lists completed activities that have a
compensation boundary, in completion order. A failed attempt never completes, so it
never enters the ledger (docs/incidents.md). A compensation throw runs the handlers of the
entries in its scope (all, or the one named activity) in reverse order of completion,
each as its own token; the thrower waits until they have all finished, then moves on
(or ends, for a compensation end event).
"""

from __future__ import annotations

from dormant.engine_core.checkpoint import Token, TokenState
from dormant.engine_core.expressions import TechnicalFailure
from dormant.engine_core.incidents import raise_failure
from dormant.engine_core.model import EventKind, Node, NodeKind
from dormant.engine_core.moving import leave_activity
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.transitions import move_token

__all__ = ["finish_waiting_throws", "throw_compensation"]


def throw_compensation(rt: Runtime, token: Token, node: Node) -> None:
    target = node.event.activity_ref
    entries = [
        e
        for e in rt.cp.compensation
        if (target is None or e.node_id == target) and _in_scope(rt, e.scope_id, token.scope_id)
    ]
    for entry in reversed(entries):
        rt.cp.compensation.remove(entry)
        handler = _handler_of(rt, entry.node_id)
        if handler is not None:
            rt.spawn(handler.id, entry.scope_id, [*token.lineage, token.id])
    rt.fact("Compensating", node=node.id, handlers=len(entries))
    if node.event.wait_for_completion and entries:
        move_token(token, TokenState.WAITING)
        return
    _continue(rt, token)


def _in_scope(rt: Runtime, entry_scope: str, thrower_scope: str) -> bool:
    return entry_scope == thrower_scope or entry_scope not in rt.cp.scopes


def _handler_of(rt: Runtime, activity_id: str) -> Node | None:
    for boundary_id in rt.node(activity_id).boundaries:
        boundary = rt.node(boundary_id)
        if boundary.event.kind is EventKind.COMPENSATE and boundary.compensation_handler:
            return rt.node(boundary.compensation_handler)
    return None


def _continue(rt: Runtime, token: Token) -> None:
    """The throw is done: it leaves (an end event along no flow, so its token ends),
    its end listeners first."""
    move_token(token, TokenState.ACTIVE)
    leave_activity(rt, token, {})


def finish_waiting_throws(rt: Runtime) -> bool:
    """Move on every compensation throw whose handlers have all finished."""
    moved = False
    for token in list(rt.cp.tokens.values()):
        if token.state is not TokenState.WAITING or token.id not in rt.cp.tokens:
            continue
        if token.listener_phase not in (None, "ran"):
            continue  # waiting on one of its execution listeners, not on handlers
        node = rt.node(token.node_id)
        if node.event.kind is not EventKind.COMPENSATE or node.kind not in (
            NodeKind.END_EVENT,
            NodeKind.INTERMEDIATE_THROW_EVENT,
        ):
            continue
        if any(token.id in other.lineage for other in rt.cp.tokens.values()):
            continue
        try:
            _continue(rt, token)
        except TechnicalFailure as failure:
            raise_failure(rt, failure, token, node)
        moved = True
    return moved

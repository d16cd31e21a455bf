"""Leaving a node: the one place a token's work at a node ends successfully.

Order matters here. The result is merged first (output mappings see the node's local
variables), then the token's waits at the node are withdrawn (its boundaries die with
the activity), then an incident this token had at the node closes (progress resolved
it), and only then does the token move along its outgoing flows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engine_core.checkpoint import CompensationEntry, IncidentState, Scope, Token, WaitRole
from engine_core.model import EventKind, Node

if TYPE_CHECKING:
    from engine_core.runtime import Runtime

__all__ = ["leave_activity", "leave_without_running"]


def leave_activity(
    rt: Runtime, token: Token, result: Mapping[str, Any], from_scope: Scope | None = None
) -> None:
    """Leave the token's node; a failing output mapping or outgoing condition is an
    incident at the node on this token, whoever asked it to leave (its own entry, a
    wake, or the last token of its sub-process ending)."""
    from engine_core.incidents import guarded

    node = rt.node(token.node_id)
    guarded(
        rt,
        token,
        node,
        lambda: _leave(rt, token, node, result, from_scope),
        activated=lambda: any(w.role is WaitRole.BOUNDARY for w in rt.waits_of(token.id)),
    )


def _leave(
    rt: Runtime, token: Token, node: Node, result: Mapping[str, Any], from_scope: Scope | None
) -> None:
    if token.loop_index is not None:
        from engine_core.multi_instance import inner_done

        inner_done(rt, token, node, result, from_scope)
        return
    if from_scope is not None:
        # A sub-process finished: its output mappings read the sub-process's variables.
        if node.outputs:
            context_scope = rt.new_scope(node.id, token.scope_id, token.id, from_scope.variables)
            token.inner_scope = context_scope.id
            try:
                rt.apply_outputs(node, token, {}, target_scope=token.scope_id)
            finally:
                rt.cp.scopes.pop(context_scope.id, None)
                token.inner_scope = None
    else:
        rt.apply_outputs(node, token, result)
    _record_compensable(rt, token)
    _finish_at_node(rt, token)
    rt.take_flows(token, rt.plain_outgoing(node, token))


def leave_without_running(rt: Runtime, token: Token) -> None:
    """Resolve an incident: continue on the node's outgoing flows, node not re-run."""
    node = rt.node(token.node_id)
    _finish_at_node(rt, token)
    rt.take_flows(token, rt.plain_outgoing(node, token))


def _finish_at_node(rt: Runtime, token: Token) -> None:
    rt.withdraw_token_waits(token.id)
    if token.inner_scope is not None:
        rt.drop_scope(token.inner_scope)
        token.inner_scope = None
    rt.close_incidents(token, IncidentState.RESOLVED)


def _record_compensable(rt: Runtime, token: Token) -> None:
    """Completed activities with a compensation boundary enter the ledger (never failed ones)."""
    node = rt.node(token.node_id)
    for boundary_id in node.boundaries:
        boundary = rt.node(boundary_id)
        if boundary.event.kind is EventKind.COMPENSATE:
            rt.cp.compensation.append(
                CompensationEntry(
                    node_id=node.id,
                    scope_id=token.scope_id,
                    variables=rt.token_vars(token),
                )
            )
            return

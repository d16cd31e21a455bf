"""Joins: parallel (one token per incoming flow) and inclusive (every token that can
still arrive).

An inclusive join fires when no live token of its scope, other than those already
waiting at it, can still reach it along sequence flows (through boundary events
too). It is checked whenever the instance is otherwise quiescent, because the last
token that could arrive may end anywhere, not only at the join.
"""

from __future__ import annotations

from dormant.engine_core import listeners
from dormant.engine_core.checkpoint import Token, TokenState
from dormant.engine_core.expressions import TechnicalFailure
from dormant.engine_core.incidents import raise_failure
from dormant.engine_core.model import Node, NodeKind, ProcessDefinition
from dormant.engine_core.moving import chosen_flows, take_flows
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.transitions import move_token

__all__ = ["fire_ready_inclusive_joins", "parallel_join"]


def parallel_join(rt: Runtime, token: Token, node: Node) -> Token | None:
    move_token(token, TokenState.WAITING)
    arrived = _waiting_at(rt, node, token.scope_id)
    by_flow: dict[str | None, Token] = {}
    for candidate in arrived:
        by_flow.setdefault(candidate.flow_id, candidate)
    if not all(flow in by_flow for flow in node.incoming):
        return None
    chosen = [by_flow[flow] for flow in node.incoming]
    return _merge(rt, chosen)


def _waiting_at(rt: Runtime, node: Node, scope_id: str) -> list[Token]:
    """The tokens waiting to be joined; a joined one waiting on the gateway's start
    listeners (``listener_phase`` set) has been joined already."""
    return [
        t
        for t in rt.cp.tokens.values()
        if t.node_id == node.id
        and t.scope_id == scope_id
        and t.state is TokenState.WAITING
        and t.listener_phase is None
    ]


def _merge(rt: Runtime, tokens: list[Token]) -> Token:
    keeper, *others = tokens
    lineages = [t.lineage for t in tokens]
    common: list[str] = []
    for parts in zip(*lineages, strict=False):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    # Siblings of one fork share the forking token as their last common ancestor; the
    # joined token stands for it again, so the lineage does not grow per fork/join.
    if len(tokens) > 1 and common:
        common = common[:-1]
    for other in others:
        move_token(other, TokenState.COMPLETED)  # merged into the keeper
        rt.cp.tokens.pop(other.id, None)
    keeper.lineage = common
    move_token(keeper, TokenState.ACTIVE)
    return keeper


def fire_ready_inclusive_joins(rt: Runtime) -> bool:
    """Fire every inclusive join nothing more can reach; True when one fired."""
    waiting = [
        t
        for t in rt.cp.tokens.values()
        if t.state is TokenState.WAITING and rt.node(t.node_id).kind is NodeKind.INCLUSIVE_GATEWAY
    ]
    fired = False
    seen: set[tuple[str, str]] = set()
    for token in waiting:
        key = (token.node_id, token.scope_id)
        if key in seen or token.id not in rt.cp.tokens:
            continue
        seen.add(key)
        node = rt.node(token.node_id)
        if _can_still_arrive(rt, node, token.scope_id):
            continue
        arrived = _waiting_at(rt, node, token.scope_id)
        if not arrived:
            continue  # only a joined token, waiting on the gateway's start listeners
        merged = _merge(rt, arrived)
        try:
            if node.listeners("start"):
                listeners.run(rt, merged, node, "start")
            else:
                take_flows(rt, merged, chosen_flows(rt, node, merged, all_true=True))
        except TechnicalFailure as failure:
            # A condition that fails, or none true and no default: an incident at the
            # join, on the merged token (a retry re-enters the join and fires it again).
            raise_failure(rt, failure, merged, node)
        fired = True
    return fired


def _can_still_arrive(rt: Runtime, join: Node, scope_id: str) -> bool:
    reach = _reachability(rt.defn)
    for other in rt.cp.tokens.values():
        if other.scope_id != scope_id or other.node_id == join.id:
            continue
        if other.state not in (TokenState.ACTIVE, TokenState.WAITING):
            continue
        if join.id in reach.get(other.node_id, frozenset()):
            return True
    return False


_REACH_CACHE: dict[int, tuple[ProcessDefinition, dict[str, frozenset[str]]]] = {}


def _reachability(defn: ProcessDefinition) -> dict[str, frozenset[str]]:
    """Per definition, computed once (definitions are immutable and shared)."""
    cached = _REACH_CACHE.get(id(defn))
    if cached is not None and cached[0] is defn:
        return cached[1]
    if len(_REACH_CACHE) > 256:
        _REACH_CACHE.clear()
    reach = _compute_reachability(defn)
    _REACH_CACHE[id(defn)] = (defn, reach)
    return reach


def _compute_reachability(defn: ProcessDefinition) -> dict[str, frozenset[str]]:
    successors: dict[str, set[str]] = {node_id: set() for node_id in defn.nodes}
    for flow in defn.flows.values():
        successors[flow.source].add(flow.target)
    for node in defn.nodes.values():
        successors[node.id].update(node.boundaries)
    reach: dict[str, frozenset[str]] = {}
    for start in defn.nodes:
        seen: set[str] = set()
        stack = list(successors[start])
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            stack.extend(successors[current])
        reach[start] = frozenset(seen)
    return reach

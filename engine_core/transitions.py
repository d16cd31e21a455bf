"""The legal moves of a token and of an incident, as data.

Every change of a token's or an incident's state goes through ``move_token`` /
``move_incident``, which look the move up in the tables below; a move the tables do
not list is a bug in dormant and raises ``EngineInvariantError`` (the instance fails
with the reason, docs/incidents.md: the one failure that stays fatal). Read the tables as the
state diagrams of docs/internals.md.

Tokens: a live token is ``active`` (queued to enter its node), ``waiting`` (on a wait
of its own, at a join, or on its inner scope) or in ``incident``; ``completed`` and
``withdrawn`` are the states it leaves the checkpoint in (ended tokens are dropped).
Incidents: ``open`` and ``retry_scheduled`` are open; ``retried`` (a retry ran the node
again and the token moved on), ``resolved`` (an operator's Resolve moved the token on
without running the node), ``dead_lettered`` (dropped by an operator, kept) and
``overtaken`` (the token was withdrawn) are closed for good.
"""

from __future__ import annotations

from collections.abc import Mapping

from dormant.engine_core.checkpoint import Incident, IncidentState, Token, TokenState
from dormant.engine_core.errors import EngineInvariantError

__all__ = ["INCIDENT_MOVES", "TOKEN_MOVES", "move_incident", "move_token"]

_A, _W, _I = TokenState.ACTIVE, TokenState.WAITING, TokenState.INCIDENT
_C, _X = TokenState.COMPLETED, TokenState.WITHDRAWN

TOKEN_MOVES: Mapping[TokenState, frozenset[TokenState]] = {
    # enter its node: wait there, fail there, end there, or be withdrawn with its scope
    _A: frozenset({_A, _W, _I, _C, _X}),
    # woken (or joined, or its body finished), failed while leaving, merged at a join,
    # withdrawn
    _W: frozenset({_A, _I, _C, _X}),
    # resolved by an operator (it moves on), overtaken by a boundary or a cancel, or
    # replaced by the fresh token of a retry; it never completes where it failed
    _I: frozenset({_A, _X}),
    _C: frozenset(),
    _X: frozenset(),
}

_OPEN, _SCHED = IncidentState.OPEN, IncidentState.RETRY_SCHEDULED
_RES, _DEAD, _OVER = IncidentState.RESOLVED, IncidentState.DEAD_LETTERED, IncidentState.OVERTAKEN
_RETRIED = IncidentState.RETRIED

INCIDENT_MOVES: Mapping[IncidentState, frozenset[IncidentState]] = {
    # a retry is scheduled by policy, or the incident closes
    _OPEN: frozenset({_OPEN, _SCHED, _RETRIED, _RES, _DEAD, _OVER}),
    # the scheduled retry (or an operator's) runs, or the incident closes
    _SCHED: frozenset({_OPEN, _SCHED, _RETRIED, _RES, _DEAD, _OVER}),
    _RETRIED: frozenset(),
    _RES: frozenset(),
    _DEAD: frozenset(),
    _OVER: frozenset(),
}


def move_token(token: Token, to: TokenState) -> None:
    if to not in TOKEN_MOVES[token.state]:
        raise EngineInvariantError(
            f"token {token.id} at {token.node_id!r} cannot go from {token.state.value} "
            f"to {to.value}"
        )
    token.state = to


def move_incident(incident: Incident, to: IncidentState) -> None:
    if to not in INCIDENT_MOVES[incident.state]:
        raise EngineInvariantError(
            f"incident {incident.id} at {incident.node_id!r} cannot go from "
            f"{incident.state.value} to {to.value}"
        )
    incident.state = to

"""The state tables of engine_core/transitions.py: every move they list is taken, every
other one is refused with the internal-invariant error."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dormant.engine_core.checkpoint import Incident, IncidentState, Token, TokenState
from dormant.engine_core.errors import EngineInvariantError
from dormant.engine_core.transitions import INCIDENT_MOVES, TOKEN_MOVES, move_incident, move_token

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _token(state: TokenState) -> Token:
    return Token(id="t1", node_id="task", state=state, scope_id="s0", lineage=[])


def _incident(state: IncidentState) -> Incident:
    return Incident(
        id="i1",
        node_id="task",
        token_id="t1",
        scope_id="s0",
        cause="boom",
        cause_class="ExpressionError",
        first_at=NOW,
        last_at=NOW,
        state=state,
    )


TOKEN_PAIRS = [(a, b) for a in TokenState for b in TokenState]
INCIDENT_PAIRS = [(a, b) for a in IncidentState for b in IncidentState]


def test_every_state_has_a_row() -> None:
    assert set(TOKEN_MOVES) == set(TokenState)
    assert set(INCIDENT_MOVES) == set(IncidentState)


@pytest.mark.parametrize(("source", "target"), TOKEN_PAIRS)
def test_token_moves_follow_the_table(source: TokenState, target: TokenState) -> None:
    token = _token(source)
    if target in TOKEN_MOVES[source]:
        move_token(token, target)
        assert token.state is target
    else:
        with pytest.raises(EngineInvariantError, match=f"from {source.value} to {target.value}"):
            move_token(token, target)
        assert token.state is source


@pytest.mark.parametrize(("source", "target"), INCIDENT_PAIRS)
def test_incident_moves_follow_the_table(source: IncidentState, target: IncidentState) -> None:
    incident = _incident(source)
    if target in INCIDENT_MOVES[source]:
        move_incident(incident, target)
        assert incident.state is target
    else:
        with pytest.raises(EngineInvariantError, match=f"from {source.value} to {target.value}"):
            move_incident(incident, target)
        assert incident.state is source


def test_ended_tokens_and_closed_incidents_never_move() -> None:
    assert TOKEN_MOVES[TokenState.COMPLETED] == frozenset()
    assert TOKEN_MOVES[TokenState.WITHDRAWN] == frozenset()
    for state in IncidentState:
        assert (INCIDENT_MOVES[state] == frozenset()) is state.closed

"""docs/internals.md draws the token and incident state machines; the drawing is
generated from engine_core/transitions.py's tables by scripts/state_diagrams.py, and
this test fails when the doc and the tables differ (run the script to refresh it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from dormant.engine_core.checkpoint import TokenState
from dormant.engine_core.transitions import INCIDENT_MOVES, TOKEN_MOVES

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "state_diagrams.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("state_diagrams", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_doc_draws_the_current_tables(script: ModuleType) -> None:
    text = script.DOC.read_text()
    assert script.render() in text
    assert script.main(["--check"]) == 0


def test_every_listed_move_is_an_arrow_and_no_other(script: ModuleType) -> None:
    drawn = script.render()
    arrows = {line.strip() for line in drawn.splitlines() if line.startswith("    ")}
    listed = {
        f"{state.value} --> {target.value}"
        for table in (TOKEN_MOVES, INCIDENT_MOVES)
        for state, targets in table.items()
        for target in targets
    }
    assert {a for a in arrows if not a.startswith(("[*]", "stateDiagram"))} - {
        f"{s.value} --> [*]" for s in (*TOKEN_MOVES, *INCIDENT_MOVES)
    } == listed


def test_a_changed_table_makes_the_doc_stale(
    script: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    moves = dict(TOKEN_MOVES)
    moves[TokenState.COMPLETED] = frozenset({TokenState.ACTIVE})
    monkeypatch.setattr(script, "TOKEN_MOVES", moves)
    text = script.DOC.read_text()
    assert script.render() not in text
    assert script.updated(text) != text
    assert script.main(["--check"]) == 1

"""Ad-hoc sub-processes at their edges: the incident naming each FEEL kind a bad
collection holds, and a met completion condition ending an event sub-process running
inside (a scope with no token of its own)."""

from __future__ import annotations

import pytest

from dormant.engine_core.builder import ProcessBuilder, signal
from dormant.engine_core.model import ProcessDefinition
from tests.core.enginekit import Run


def _tools(collection: str, condition: str | None = None) -> ProcessDefinition:
    """start -> ad-hoc {a; an event sub-process on signal "poke"} -> end."""
    b = ProcessBuilder("tools")
    b.start_event("s")
    with b.ad_hoc_sub_process("ah", active_elements=collection, completion_condition=condition):
        b.service_task("a", job_type="ja")
        with b.event_sub_process("esp"):
            b.start_event("es", signal("poke"), is_interrupting=False)
            b.user_task("handle").end_event("ee")
            b.sequence("es", "handle", "ee")
    b.end_event("e")
    b.sequence("s", "ah", "e")
    return b.build()


@pytest.mark.parametrize(
    ("collection", "holding"),
    [
        ('=["a", true]', "a boolean"),
        ('=["a", {x: 1}]', "a context"),
        ('=["a", ["a"]]', "a list"),
        ('=["a", null]', "null"),
        ('=["a", @"2026-01-02"]', "a date"),
    ],
)
def test_a_collection_holding_a_non_string_names_its_kind(collection: str, holding: str) -> None:
    run = Run(_tools(collection))
    run.start()
    cause = run.incident("ah").cause
    assert f"evaluated to a list holding {holding}, expected a list of element ids" in cause


def test_a_met_condition_ends_an_event_sub_process_running_inside() -> None:
    run = Run(_tools('=["a"]', condition="=true"))
    run.start()
    run.signal("es", "poke")
    assert run.token_nodes() == ["a:waiting", "ah:waiting", "handle:waiting"]
    run.complete_job("a")
    assert run.status == "completed"
    assert run.cp.tokens == {} and run.cp.waits == {}
    assert [s.node_id for s in run.cp.scopes.values()] == [None]  # only the root is left

"""Engine fixes found by the Camunda 8 conformance run (tests/integration/
test_conformance_camunda8.py), each pinned here in the pure core."""

from __future__ import annotations

from engine_core.builder import ProcessBuilder
from engine_core.model import ProcessDefinition
from tests.core.enginekit import Run


def _two_ends() -> ProcessDefinition:
    b = ProcessBuilder("two-ends")
    b.start_event("s").exclusive_gateway("g").end_event("a").end_event("b")
    b.sequence("s", "g").flow("g", "a", condition="=x = 1").flow("g", "b", default=True)
    return b.build()


def test_the_end_event_reached_is_in_the_history() -> None:
    """A completed instance has no tokens left: only the fact says which end it took."""
    run = Run(_two_ends())
    run.start({"x": 2})
    assert run.status == "completed"
    assert [f.details["node"] for f in run.facts_of("EndEventReached")] == ["b"]
    other = Run(_two_ends(), instance_id="i2")
    other.start({"x": 1})
    assert [f.details["node"] for f in other.facts_of("EndEventReached")] == ["a"]

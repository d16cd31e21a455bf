"""Call activities: the parent's side (StartChild, ChildCompleted, ChildFailed, cancel)
and the child's side (it fails instead of raising an incident, and notifies its parent)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dormant.engine_core.builder import ProcessBuilder, error
from dormant.engine_core.effects import CancelChild, NotifyParent, StartChild
from dormant.engine_core.model import IoMapping, ProcessDefinition
from dormant.engine_core.triggers import ChildCompleted, ChildFailed
from tests.core.enginekit import Run


def caller(**fields: Any) -> ProcessDefinition:
    b = ProcessBuilder("parent")
    b.start_event("s").call_activity("call", "child", **fields).user_task("after").end_event("e")
    b.sequence("s", "call", "after", "e")
    b.boundary_event("caught", "call", error("CHILD_ERR"))
    b.end_event("caught_end")
    b.sequence("caught", "caught_end")
    return b.build()


def test_start_child_effect_is_deterministic() -> None:
    run = Run(caller(), instance_id="p-1")
    step = run.start({"order": 7, "note": "x"})
    (start,) = run.effects_of(StartChild, step)
    wait = run.wait("call", "call")
    assert start.child_instance_id == f"p-1.{wait.id}" == wait.child_instance_id
    assert (start.process_key, start.parent_instance_id, start.parent_wait_id) == (
        "child",
        "p-1",
        wait.id,
    )
    assert start.root_instance_id == "p-1"
    assert start.variables == {"order": 7, "note": "x"}, "all parent variables by default"
    # The same start, replayed from the same checkpoint, names the same child.
    again = Run(caller(), instance_id="p-1")
    assert again.effects_of(StartChild, again.start({"order": 7, "note": "x"}))[0] == start


def test_version_tag_binding_rides_on_the_start_child() -> None:
    run = Run(caller(called_version_tag="v1"))
    assert run.effects_of(StartChild, run.start())[0].version_tag == "v1"
    plain = Run(caller())
    assert plain.effects_of(StartChild, plain.start())[0].version_tag is None  # latest


def test_input_mappings_only_when_not_propagating_all() -> None:
    run = Run(caller(propagate_all_parent_variables=False, inputs=(IoMapping("=order * 2", "n"),)))
    step = run.start({"order": 7, "note": "x"})
    assert run.effects_of(StartChild, step)[0].variables == {"n": 14}


def test_child_completed_merges_variables() -> None:
    run = Run(caller())
    run.start({"order": 7})
    run.child_completed("call", shipped=True, order=8)
    assert run.variables == {"order": 8, "shipped": True}
    assert run.token_nodes() == ["after:waiting"]


def test_child_completed_through_output_mappings() -> None:
    run = Run(caller(outputs=(IoMapping("=shipped", "wasShipped"),)))
    run.start({"order": 7})
    run.child_completed("call", shipped=True, junk=1)
    assert run.variables == {"order": 7, "wasShipped": True}


def test_child_failed_raises_an_incident_at_the_call_activity() -> None:
    run = Run(caller())
    run.start()
    run.child_failed("call", "child broke")
    incident = run.incident("call")
    assert incident.cause_class == "ChildFailed"
    assert run.status == "active_incidents"
    # Retrying the call activity starts a NEW child (a new wait, a new child id).
    step = run.retry(incident.id)
    (start,) = run.effects_of(StartChild, step)
    first = run.effects_of(StartChild, run.steps[0])[0]
    assert start.child_instance_id != first.child_instance_id
    run.child_completed("call")
    assert run.cp.incidents[incident.id].state.value == "retried"


def test_child_error_code_is_caught_by_the_call_activity_boundary() -> None:
    run = Run(caller())
    run.start()
    run.child_failed("call", "no stock", code="CHILD_ERR")
    assert run.status == "completed"
    assert run.cp.incidents == {}
    assert run.facts_of("Completed")


def test_child_error_code_not_caught_raises_incident() -> None:
    run = Run(caller())
    run.start()
    run.child_failed("call", "other", code="OTHER")
    assert run.incident("call").cause_class == "UnhandledError"


def test_cancelling_the_parent_withdraws_the_call_wait_and_cancels_the_child() -> None:
    run = Run(caller(), instance_id="p-1")
    run.start()
    child = run.wait("call").child_instance_id
    assert child is not None
    step = run.cancel()
    assert run.effects_of(CancelChild, step) == [CancelChild(child)]
    assert run.cp.waits == {} and run.status == "terminated"


# -- the child's side ------------------------------------------------------------------

PARENT = {"instance_id": "p-1", "wait_id": "w3", "root_instance_id": "p-1"}


def child_def(build: Callable[[ProcessBuilder], object]) -> ProcessDefinition:
    b = ProcessBuilder("child")
    b.start_event("s")
    build(b)
    return b.build()


def test_child_completion_notifies_the_parent_with_its_variables() -> None:
    run = Run(
        child_def(
            lambda b: (
                b.script_task("x", "=n + 1", result_variable="n")
                .end_event("e")
                .sequence("s", "x", "e")
            )
        ),
        instance_id="p-1.w3",
        parent=PARENT,
    )
    step = run.start({"n": 1})
    assert run.status == "completed"
    (note,) = run.effects_of(NotifyParent, step)
    assert (note.parent_instance_id, note.wait_id, note.completed, note.variables) == (
        "p-1",
        "w3",
        True,
        {"n": 2},
    )


@pytest.mark.parametrize("failure", ["technical", "job-error", "error-end"])
def test_a_child_fails_instead_of_raising_an_incident(failure: str) -> None:
    def build(b: ProcessBuilder) -> None:
        if failure == "technical":
            b.exclusive_gateway("x")
            b.end_event("e").flow("x", "e", condition="=missing")
        elif failure == "job-error":
            b.service_task("x", job_type="j").end_event("e").sequence("x", "e")
        else:
            b.end_event("x", error("CHILD_ERR"))
        b.sequence("s", "x")

    run = Run(child_def(build), instance_id="p-1.w3", parent=PARENT)
    run.start()
    if failure == "job-error":
        run.throw_from_job("x", "CHILD_ERR")
    assert run.status == "failed"
    assert run.cp.incidents == {}
    (note,) = run.effects_of(NotifyParent)
    assert note.completed is False and note.wait_id == "w3"
    assert note.error_code == (None if failure == "technical" else "CHILD_ERR")


def test_interrupting_boundary_on_the_call_activity_cancels_the_child() -> None:
    from dormant.engine_core.builder import timer

    b = ProcessBuilder("parent")
    b.start_event("s").call_activity("call", "child").end_event("e")
    b.boundary_event("late", "call", timer("PT1H")).user_task("chase").end_event("le")
    b.sequence("s", "call", "e")
    b.sequence("late", "chase", "le")
    run = Run(b.build(), instance_id="p-1")
    run.start()
    child = run.wait("call", "call").child_instance_id
    assert child is not None
    step = run.fire("late")
    assert run.effects_of(CancelChild, step) == [CancelChild(child)]
    assert run.token_nodes() == ["chase:waiting"]
    assert not run.waits("call")


@pytest.mark.parametrize(
    "outcome",
    [
        pytest.param(
            lambda wait_id: ChildCompleted(wait_id=wait_id, variables={"x": 1}), id="done"
        ),
        pytest.param(lambda wait_id: ChildFailed(wait_id=wait_id, error="boom"), id="failed"),
    ],
)
def test_a_child_outcome_for_a_call_wait_that_is_gone_is_stale(
    outcome: Callable[[str], ChildCompleted | ChildFailed],
) -> None:
    """A child's late or redelivered outcome (its call was cancelled by a boundary, or
    already answered) changes nothing in the parent."""
    from dormant.engine_core.builder import timer

    b = ProcessBuilder("parent")
    b.start_event("s").call_activity("call", "child").end_event("e")
    b.boundary_event("late", "call", timer("PT1H")).user_task("chase").end_event("le")
    b.sequence("s", "call", "e")
    b.sequence("late", "chase", "le")
    run = Run(b.build(), instance_id="p-1")
    run.start()
    gone = run.wait("call", "call").id
    run.fire("late")
    step = run.send(outcome(gone))
    assert not step.changed
    assert [f.details["reason"] for f in step.facts if f.kind == "Stale"] == ["wait gone"]
    assert run.token_nodes() == ["chase:waiting"]

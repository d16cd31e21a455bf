"""Operator operations at their edges: what each refuses (and that a refusal changes
nothing), which scope a name picks, and how held triggers meet an instance that ended
while it was suspended.
"""

from __future__ import annotations

import pytest

from dormant.engine_core.builder import ProcessBuilder, message, timer
from dormant.engine_core.checkpoint import encode
from dormant.engine_core.errors import InvalidOperation
from dormant.engine_core.model import LoopSpec, ProcessDefinition
from dormant.engine_core.triggers import (
    ModifyInstance,
    Resume,
    SetVariables,
    Suspend,
    TaskCompleted,
)
from tests.core.enginekit import Run


def shapes() -> ProcessDefinition:
    """``a`` (a user task with a timer boundary ``late``), a sub-process ``inner``
    (``work`` then ``more``) in parallel, and an event sub-process ``esp`` on message
    ``poke``."""
    b = ProcessBuilder("shapes")
    b.start_event("s").parallel_gateway("fork").user_task("a").end_event("e1")
    b.boundary_event("late", "a", timer("PT1H")).end_event("late_end")
    b.sequence("late", "late_end")
    with b.sub_process("inner"):
        b.start_event("is").user_task("work").user_task("more").end_event("ie")
        b.sequence("is", "work", "more", "ie")
    b.end_event("e2")
    b.sequence("s", "fork", "a", "e1")
    b.sequence("fork", "inner", "e2")
    with b.event_sub_process("esp"):
        b.start_event("es", message("poke", "=id")).user_task("handle").end_event("ee")
        b.sequence("es", "handle", "ee")
    return b.build()


@pytest.mark.parametrize(
    ("trigger", "reason"),
    [
        pytest.param(
            ModifyInstance(start_before=["late"]),
            "'late' is a boundaryEvent; it cannot be started directly",
            id="boundary",
        ),
        pytest.param(
            ModifyInstance(start_before=["handle"]),
            "'handle' is inside event sub-process 'esp'",
            id="event-sub-process",
        ),
        pytest.param(
            SetVariables(variables={"x": 1}, unset=["x"]),
            "variables both set and unset: x",
            id="set-and-unset",
        ),
    ],
)
def test_an_operation_that_cannot_apply_is_refused_and_changes_nothing(
    trigger: ModifyInstance | SetVariables, reason: str
) -> None:
    run = Run(shapes())
    run.start({"id": "k", "x": 0})
    before = encode(run.cp)
    with pytest.raises(InvalidOperation) as refused:
        run.send(trigger)
    assert reason in str(refused.value)
    assert encode(run.cp) == before


def test_modify_starts_a_token_inside_the_one_running_sub_process_scope() -> None:
    run = Run(shapes())
    run.start({"id": "k"})
    (scope,) = [s for s in run.cp.scopes.values() if s.node_id == "inner"]
    run.send(ModifyInstance(start_before=["more"]))
    assert sorted(t.scope_id for t in run.tokens("more")) == [scope.id]
    assert run.facts_of("Modified", started="more", tokens_cancelled=0)


def test_a_scope_name_running_in_several_scopes_must_be_named_by_id() -> None:
    b = ProcessBuilder("many")
    b.start_event("s")
    with b.sub_process("inner", loop=LoopSpec(sequential=False, cardinality="=2")):
        b.start_event("is").user_task("work").end_event("ie")
        b.sequence("is", "work", "ie")
    b.end_event("e")
    b.sequence("s", "inner", "e")
    run = Run(b.build())
    run.start()
    before = encode(run.cp)
    with pytest.raises(InvalidOperation) as refused:
        run.send(SetVariables(scope="inner", variables={"x": 1}))
    message_text = str(refused.value)
    assert "runs node 'inner' in" in message_text and "name one by its scope id" in message_text
    assert "(loop index 0)" in message_text and "(loop index 1)" in message_text
    assert encode(run.cp) == before


def test_an_operation_after_a_due_timer_ended_the_instance_is_refused() -> None:
    b = ProcessBuilder("short")
    b.start_event("s").intermediate_catch_event("pause", timer("PT1M")).end_event("e")
    b.sequence("s", "pause", "e")
    run = Run(b.build())
    run.start()
    run.advance(minutes=2)
    with pytest.raises(InvalidOperation, match="ended before the set_variables applied"):
        run.send(SetVariables(variables={"x": 1}))
    assert run.status == "active"  # the refused step is not kept: the timer fires by itself


def test_a_held_trigger_after_the_instance_ended_on_resume_is_recorded_not_applied() -> None:
    b = ProcessBuilder("one")
    b.start_event("s").user_task("a").end_event("e")
    b.sequence("s", "a", "e")
    run = Run(b.build())
    run.start()
    wait = run.wait("a", "user_task")
    run.send(Suspend())
    run.send(TaskCompleted(wait_id=wait.id, variables={"n": 1}))
    run.send(TaskCompleted(wait_id=wait.id, variables={"n": 2}))  # a redelivery
    assert len(run.cp.held) == 2
    run.send(Resume())
    assert run.status == "completed"
    assert run.variables == {"n": 1}
    outcomes = [f.details["outcome"] for f in run.facts_of("HeldTriggerApplied")]
    assert outcomes == ["applied", "instance ended"]

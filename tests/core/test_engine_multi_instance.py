"""Multi-instance activities: parallel and sequential, on a task and on a sub-process."""

from __future__ import annotations

from typing import Any

import pytest

from dormant.engine_core.builder import ProcessBuilder, timer
from dormant.engine_core.checkpoint import Wait
from dormant.engine_core.effects import DispatchJob, Step
from dormant.engine_core.model import LoopSpec, ProcessDefinition
from tests.core.enginekit import Run


def mi_task(sequential: bool, **loop: Any) -> ProcessDefinition:
    b = ProcessBuilder("p")
    spec = LoopSpec(sequential=sequential, **loop)
    b.start_event("s").service_task("each", job_type="ship", loop=spec).user_task(
        "after"
    ).end_event("e")
    b.sequence("s", "each", "after", "e")
    return b.build()


ITEMS = {
    "input_collection": "=items",
    "input_element": "item",
    "output_collection": "results",
    "output_element": "=done",
}


def jobs_by_item(run: Run) -> dict[Any, Wait]:
    """Open job waits, by the inner instance's input element."""
    out: dict[Any, Wait] = {}
    for wait in run.waits("each", "job"):
        assert wait.token_id is not None
        token = run.cp.tokens[wait.token_id]
        assert token.inner_scope is not None
        out[run.cp.scopes[token.inner_scope].variables["item"]] = wait
    return out


def complete(run: Run, wait: Wait, **variables: Any) -> Step:
    from dormant.engine_core.triggers import JobCompleted

    return run.send(JobCompleted(wait_id=wait.id, attempt=wait.attempt, variables=variables))


def exhaust(run: Run, item: str) -> None:
    """Fail the job of one inner instance until its retries (3) are spent."""
    from dormant.engine_core.triggers import JobFailed, TimerFired

    for attempt in (1, 2, 3):
        wait = jobs_by_item(run)[item]
        if not wait.job_running:  # in retry backoff: its deadline re-dispatches it
            run.send(TimerFired(wait_id=wait.id), at=wait.due_at)
            wait = jobs_by_item(run)[item]
        assert wait.attempt == attempt
        run.send(JobFailed(wait_id=wait.id, attempt=wait.attempt, error="x"))


def test_parallel_outputs_are_in_input_order_whatever_the_completion_order() -> None:
    run = Run(mi_task(False, **ITEMS))
    step = run.start({"items": ["a", "b", "c"]})
    dispatched = run.effects_of(DispatchJob, step)
    assert [(d.variables["item"], d.variables["loopCounter"]) for d in dispatched] == [
        ("a", 1),
        ("b", 2),
        ("c", 3),
    ]
    jobs = jobs_by_item(run)
    for item in ["c", "a", "b"]:
        complete(run, jobs[item], done=item.upper(), last=item)
    assert run.variables["results"] == ["A", "B", "C"]
    # The output element is local to each instance (Camunda 8); other names propagate.
    assert run.variables["last"] == "b"
    assert "item" not in run.variables and "done" not in run.variables, "inner variables stay inner"
    assert run.token_nodes() == ["after:waiting"]
    assert [s for s in run.cp.scopes] == ["s0"]


def test_sequential_runs_one_at_a_time_in_order() -> None:
    run = Run(mi_task(True, **ITEMS))
    run.start({"items": [1, 2, 3]})
    seen = []
    while run.waits("each", "job"):
        (item,) = jobs_by_item(run)
        seen.append(item)
        complete(run, jobs_by_item(run)[item], done=item * 10)
    assert seen == [1, 2, 3]
    assert run.variables["results"] == [10, 20, 30]


@pytest.mark.parametrize("sequential", [False, True])
def test_cardinality(sequential: bool) -> None:
    run = Run(mi_task(sequential, cardinality="=n"))
    run.start({"n": 3})
    count = 0
    while run.waits("each", "job"):
        for wait in run.waits("each", "job"):
            complete(run, wait)
            count += 1
    assert count == 3 and run.token_nodes() == ["after:waiting"]


def test_empty_collection_skips_the_activity() -> None:
    run = Run(mi_task(False, **ITEMS))
    step = run.start({"items": []})
    assert run.effects_of(DispatchJob, step) == []
    assert run.variables["results"] == []
    assert run.token_nodes() == ["after:waiting"]


def test_non_list_input_collection_is_an_incident() -> None:
    run = Run(mi_task(False, **ITEMS))
    run.start({"items": "abc"})
    assert run.incident("each").cause_class == "ExpressionError"


def test_completion_condition_cancels_the_remaining_instances() -> None:
    run = Run(mi_task(False, **ITEMS, completion_condition="=numberOfCompletedInstances >= 2"))
    run.start({"items": ["a", "b", "c"]})
    jobs = jobs_by_item(run)
    complete(run, jobs["b"], done="B")
    complete(run, jobs["c"], done="C")
    assert run.token_nodes() == ["after:waiting"]
    assert not run.waits("each")
    assert run.variables["results"] == [None, "B", "C"]


def test_parallel_incident_in_one_instance_siblings_finish_retry_reruns_only_it() -> None:
    """T-13: parallel MI — one inner fails, siblings complete, retry re-runs only it."""
    run = Run(mi_task(False, **ITEMS))
    run.start({"items": ["a", "b", "c"]})
    jobs = jobs_by_item(run)
    exhaust(run, "b")
    incident = run.incident("each")
    assert run.status == "active_incidents"
    complete(run, jobs["a"], done="A")
    complete(run, jobs["c"], done="C")
    assert len(run.tokens("each")) == 2, "outer token + the failed inner instance"
    step = run.retry(incident.id)
    dispatched = run.effects_of(DispatchJob, step)
    assert [d.variables["item"] for d in dispatched] == ["b"]
    complete(run, jobs_by_item(run)["b"], done="B")
    assert run.variables["results"] == ["A", "B", "C"]
    assert run.cp.incidents[incident.id].state.value == "retried"
    assert run.status == "active"
    assert run.token_nodes() == ["after:waiting"]


def test_sequential_waits_behind_an_incident() -> None:
    run = Run(mi_task(True, **ITEMS))
    run.start({"items": ["a", "b", "c"]})
    complete(run, jobs_by_item(run)["a"], done="A")
    exhaust(run, "b")
    incident = run.incident("each")
    assert list(jobs_by_item(run)) == [], "nothing else runs while b is in incident"
    assert len(run.tokens("each")) == 2
    step = run.retry(incident.id)
    assert [d.variables["item"] for d in run.effects_of(DispatchJob, step)] == ["b"]
    complete(run, jobs_by_item(run)["b"], done="B")
    assert list(jobs_by_item(run)) == ["c"]
    complete(run, jobs_by_item(run)["c"], done="C")
    assert run.variables["results"] == ["A", "B", "C"]
    assert run.status == "active"


def mi_sub(sequential: bool) -> ProcessDefinition:
    b = ProcessBuilder("p")
    spec = LoopSpec(
        sequential=sequential,
        input_collection="=items",
        input_element="item",
        output_collection="results",
        output_element="=local",
    )
    b.start_event("s")
    with b.sub_process("sub", loop=spec):
        b.start_event("ss").script_task("calc", "=item * 2", result_variable="local")
        b.user_task("inner").end_event("se")
        b.sequence("ss", "calc", "inner", "se")
    b.user_task("after").end_event("e")
    b.sequence("s", "sub", "after", "e")
    return b.build()


@pytest.mark.parametrize("sequential", [False, True])
def test_multi_instance_sub_process(sequential: bool) -> None:
    run = Run(mi_sub(sequential))
    run.start({"items": [1, 2, 3]})
    assert len(run.waits("inner")) == (1 if sequential else 3)
    order = []
    while run.waits("inner"):
        wait = run.waits("inner")[-1]
        order.append(
            run.cp.scopes[run.cp.tokens[str(wait.token_id)].scope_id].variables.get("item")
            if not sequential
            else None
        )
        from dormant.engine_core.triggers import TaskCompleted

        run.send(TaskCompleted(wait_id=wait.id))
    assert run.variables["results"] == [2, 4, 6]
    assert "local" not in run.variables and "item" not in run.variables
    assert run.token_nodes() == ["after:waiting"]


def test_boundary_on_a_multi_instance_interrupts_the_whole_body() -> None:
    b = ProcessBuilder("p")
    spec = LoopSpec(sequential=False, input_collection="=items", input_element="item")
    b.start_event("s").user_task("each", loop=spec).end_event("e")
    b.boundary_event("late", "each", timer("PT1H")).end_event("late_end")
    b.sequence("s", "each", "e")
    b.sequence("late", "late_end")
    run = Run(b.build())
    run.start({"items": [1, 2]})
    assert len(run.waits("each", "user_task")) == 2
    assert len(run.waits("late")) == 1, "one boundary for the whole activity"
    run.fire("late")
    assert run.status == "completed" and run.cp.waits == {}
    assert list(run.cp.scopes) == ["s0"]


def test_a_cancel_withdraws_every_inner_instance_in_one_fact_per_node() -> None:
    """The ``Withdrawn`` fact (engine_core/runtime.py ``terminate_token``) names the node
    a cancel took tokens from, counting them: five inner instances and their body, six
    tokens at one node, are one fact, not six."""
    run = Run(mi_task(False, **ITEMS))
    run.start({"items": [1, 2, 3, 4, 5]})
    assert len(jobs_by_item(run)) == 5
    step = run.cancel()
    withdrawn = [f for f in step.facts if f.kind == "Withdrawn"]
    assert [f.details["node"] for f in withdrawn] == ["each"]
    assert withdrawn[0].details["tokens"] == 6  # the body and its five inner instances

"""Three behaviours no other test caught: each of these fails if its mechanism goes."""

from __future__ import annotations

from dormant.engine_core.builder import ProcessBuilder
from dormant.engine_core.checkpoint import Wait
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.model import LoopSpec
from dormant.engine_core.triggers import JobCompleted
from tests.core.enginekit import Run


def test_cycles_through_fork_and_join_never_grow_the_lineage() -> None:
    """Two forked siblings joined stand for the forking token again (joins._merge
    trims their last common ancestor). Here the token that keeps the fork's lineage
    ends elsewhere and only the forked ones join and loop: without the trim the
    lineage would grow by one per cycle."""
    b = ProcessBuilder("loop")
    b.start_event("s").exclusive_gateway("merge").parallel_gateway("fork")
    b.user_task("a").end_event("a_end").user_task("b").user_task("c")
    b.parallel_gateway("join").script_task("count", "=n + 1", result_variable="n")
    b.exclusive_gateway("more", default="again").end_event("stop")
    b.sequence("s", "merge", "fork", "a", "a_end")
    b.sequence("fork", "b", "join", "count", "more")
    b.sequence("fork", "c", "join")
    b.flow("more", "merge", id="again", default=True)
    b.flow("more", "stop", condition="=n >= 6")
    run = Run(b.build())
    run.start({"n": 0})
    for cycle in range(1, 6):
        for node in ("a", "b", "c"):
            run.complete_task(node)
        assert run.variables["n"] == cycle
        assert sorted(len(t.lineage) for t in run.tokens()) == [0, 1, 1]
    for node in ("a", "b", "c"):
        run.complete_task(node)
    assert run.status == "completed"


def _done(run: Run, wait: Wait) -> None:
    run.send(JobCompleted(wait_id=wait.id, attempt=wait.attempt))


def _mi(sequential: bool, condition: str) -> Run:
    b = ProcessBuilder("p")
    loop = LoopSpec(
        sequential=sequential,
        input_collection="=items",
        input_element="item",
        completion_condition=condition,
    )
    b.start_event("s").service_task("each", job_type="ship", loop=loop).end_event("e")
    b.sequence("s", "each", "e")
    run = Run(b.build())
    run.start({"items": [1, 2, 3]})
    return run


def test_number_of_active_instances_in_the_completion_condition_parallel() -> None:
    run = _mi(False, "=numberOfActiveInstances = 1")
    assert len(run.waits("each", "job")) == 3
    first, second, third = sorted(run.waits("each", "job"), key=lambda w: w.id)
    _done(run, first)
    assert len(run.waits("each", "job")) == 2  # two still active: not yet
    _done(run, second)
    # One active left: the condition holds, the third is withdrawn, the body finishes.
    assert run.status == "completed"
    assert third.id not in run.cp.waits


def test_number_of_active_instances_in_the_completion_condition_sequential() -> None:
    """Sequential: no other instance is active when one completes (the next has not
    started yet), so the count is 0 and the condition decides with the completed one."""
    run = _mi(True, "=numberOfActiveInstances = 0 and numberOfCompletedInstances = 2")
    _done(run, run.wait("each", "job"))
    assert len(run.waits("each", "job")) == 1  # the second started
    _done(run, run.wait("each", "job"))
    assert run.status == "completed"
    assert len(run.effects_of(DispatchJob)) == 2  # the third never started


def test_retries_zero_is_one_attempt_then_an_incident() -> None:
    """Camunda 8 reads retries="0" as one attempt and no retry; it never means
    'retry forever' nor 'never dispatch'."""
    b = ProcessBuilder("p")
    b.start_event("s").service_task("charge", job_type="charge", job_retries="0")
    b.end_event("e")
    b.sequence("s", "charge", "e")
    run = Run(b.build())
    run.start()
    assert len(run.effects_of(DispatchJob)) == 1
    wait = run.wait("charge", "job")
    assert (wait.attempt, wait.retries_left) == (1, 0)
    run.fail_job("charge")
    assert run.facts_of("JobRetryScheduled") == []
    assert run.incident("charge").state.value == "open"
    assert run.token_nodes() == ["charge:incident"]

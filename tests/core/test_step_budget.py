"""The step budget (issue 8, item 2): a loop with no wait state never holds a worker.

A step makes at most ``Services.step_budget`` node entries. Past it the step ends with
the tokens still to run left ``active`` in the checkpoint and a ``ContinueInstance``
effect; the ``Continue`` trigger the shell then sends runs them on. Every checkpoint
here is round-tripped through JSON by ``Run``.
"""

from __future__ import annotations

from dormant.engine_core.builder import ProcessBuilder, message
from dormant.engine_core.checkpoint import TokenState
from dormant.engine_core.effects import ContinueInstance
from dormant.engine_core.engine import Services
from dormant.engine_core.triggers import Continue
from tests.core.enginekit import Run


def _counting_loop(until: str) -> ProcessBuilder:
    """start -> inc (i := i + 1) -> gw -(until)-> inc, default -> end."""
    b = ProcessBuilder("loop").start_event("start").script_task("inc", "=i + 1", "i")
    b.exclusive_gateway("gw").end_event("end")
    b.sequence("start", "inc", "gw").flow("gw", "inc", condition=until)
    return b.flow("gw", "end", default=True)


def _budget(n: int) -> Services:
    return Services(step_budget=n)


def test_past_the_budget_the_step_stops_with_a_continuation() -> None:
    run = Run(_counting_loop("=true").build(), services=_budget(10))
    step = run.start({"i": 0})
    assert run.effects_of(ContinueInstance, step) == [ContinueInstance("i1")]
    (reached,) = run.facts_of("StepBudgetReached")
    assert reached.details == {"entries": 10, "pending": 1}
    # The token still to run is kept active: that is the mark the continuation reads.
    (token,) = run.tokens()
    assert token.state is TokenState.ACTIVE
    assert run.status == "active"
    # start, then inc/gw pairs: ten entries made four and a half iterations.
    assert run.variables["i"] == 5


def test_the_continuation_resumes_and_ends_where_an_unbounded_run_ends() -> None:
    unbounded = Run(_counting_loop("=i < 50").build())
    unbounded.start({"i": 0})
    assert unbounded.status == "completed"

    run = Run(_counting_loop("=i < 50").build(), services=_budget(7))
    run.start({"i": 0})
    continuations = 0
    while run.effects_of(ContinueInstance, run.last):
        run.send(Continue())
        continuations += 1
    assert run.status == "completed"
    assert run.variables == unbounded.variables == {"i": 50}
    # 1 + 2 * 50 + 1 entries at seven per step.
    assert continuations == (1 + 2 * 50 + 1 + 6) // 7 - 1


def test_every_step_of_a_loop_that_never_waits_is_bounded() -> None:
    run = Run(_counting_loop("=true").build(), services=_budget(20))
    run.start({"i": 0})
    for _ in range(5):
        step = run.send(Continue())
        assert run.effects_of(ContinueInstance, step) == [ContinueInstance("i1")]
        entries = [f.details["entries"] for f in step.facts if f.kind == "StepBudgetReached"]
        assert entries == [20]
    assert run.variables["i"] == 60


def test_the_instance_can_be_cancelled_between_continuations() -> None:
    run = Run(_counting_loop("=true").build(), services=_budget(10))
    run.start({"i": 0})
    run.send(Continue())
    run.cancel()
    assert run.status == "terminated"
    assert run.tokens() == []
    late = run.send(Continue())  # the continuation already in flight finds nothing
    assert not late.changed
    assert run.status == "terminated"


def test_other_triggers_apply_between_continuations() -> None:
    """A message for a sibling branch is applied while the loop waits for its
    continuation; the looping token is left as it was, and the message's own work is
    budgeted the same."""
    b = ProcessBuilder("loop").start_event("start").parallel_gateway("fork")
    b.script_task("inc", "=i + 1", "i").exclusive_gateway("gw").end_event("end")
    b.intermediate_catch_event("paid", message("paid", "=order")).end_event("done")
    b.sequence("start", "fork", "inc", "gw").flow("gw", "inc", condition="=true")
    b.flow("gw", "end", default=True).sequence("fork", "paid", "done")
    run = Run(b.build(), services=_budget(10))
    run.start({"i": 0, "order": "o-1"})
    assert run.waits("paid", "message")
    i_before = run.variables["i"]
    step = run.message("paid", "paid", "o-1", paid=True)
    assert step.changed and run.variables["paid"] is True
    assert run.variables["i"] == i_before  # the loop did not run on the message
    assert run.effects_of(ContinueInstance, step) == []  # one continuation is in flight
    assert [t.node_id for t in run.tokens() if t.state is TokenState.ACTIVE] in (
        ["inc"],
        ["gw"],
    )
    run.send(Continue())
    assert run.variables["i"] > i_before


def test_a_continuation_with_nothing_to_run_is_stale() -> None:
    b = ProcessBuilder("p").start_event("start").user_task("u").end_event("end")
    run = Run(b.sequence("start", "u", "end").build())
    run.start()
    step = run.send(Continue())
    assert not step.changed
    assert [f.kind for f in step.facts] == ["Stale"]


def test_the_default_budget_is_a_thousand_entries() -> None:
    run = Run(_counting_loop("=true").build())
    run.start({"i": 0})
    assert run.facts_of("StepBudgetReached")[0].details["entries"] == 1000
    assert Services().step_budget == 1000


def test_a_multi_instance_asking_for_too_many_inner_instances_is_an_incident() -> None:
    from dormant.engine_core.model import LoopSpec

    for cardinality in ("=1e20", "=1000000000", "=11"):
        b = (
            ProcessBuilder("mi")
            .start_event("start")
            .task("n", loop=LoopSpec(False, cardinality=cardinality))
        )
        run = Run(
            b.end_event("end").sequence("start", "n", "end").build(),
            services=Services(max_loop_items=10),
        )
        run.start()
        assert run.incident("n").cause_class == "LoopTooLarge"
        assert "at most 10" in run.incident("n").cause
    b = ProcessBuilder("mi").start_event("start")
    b.task("n", loop=LoopSpec(False, input_collection="=items", input_element="x"))
    run = Run(
        b.end_event("end").sequence("start", "n", "end").build(),
        services=Services(max_loop_items=10),
    )
    run.start({"items": list(range(11))})
    assert run.incident("n").cause_class == "LoopTooLarge"
    ok = Run(b.build(), services=Services(max_loop_items=10))
    ok.start({"items": list(range(10))})
    assert ok.status == "completed"


def test_a_suspended_loop_holds_its_continuation_until_resumed() -> None:
    from dormant.engine_core.triggers import Resume, Suspend

    run = Run(_counting_loop("=true").build(), services=_budget(10))
    run.start({"i": 0})
    run.send(Suspend())
    i_suspended = run.variables["i"]
    held = run.send(Continue())  # the continuation in flight arrives while suspended
    assert run.variables["i"] == i_suspended
    assert run.effects_of(ContinueInstance, held) == []
    resumed = run.send(Resume())
    assert run.variables["i"] > i_suspended
    assert run.effects_of(ContinueInstance, resumed) == [ContinueInstance("i1")]

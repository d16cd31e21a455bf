"""Errors, escalations, compensation, inclusive gateways, event sub-processes, links,
terminate inside a sub-process, receive/manual tasks, intermediate throws."""

from __future__ import annotations

import pytest

from dormant.engine_core.builder import (
    ProcessBuilder,
    compensate,
    error,
    escalation,
    link,
    message,
    signal,
    terminate,
    timer,
)
from dormant.engine_core.effects import ThrowMessage
from dormant.engine_core.model import EventDefinition, ProcessDefinition
from tests.core.enginekit import Run

# -- errors caught by boundaries -------------------------------------------------------


def job_with_error_boundaries(*boundaries: tuple[str, str | None]) -> ProcessDefinition:
    b = ProcessBuilder("p")
    b.start_event("s").service_task("job", job_type="j").end_event("e")
    b.sequence("s", "job", "e")
    for bid, code in boundaries:
        b.boundary_event(bid, "job", error(code)).user_task(f"{bid}_task").end_event(f"{bid}_end")
        b.sequence(bid, f"{bid}_task", f"{bid}_end")
    return b.build()


@pytest.mark.parametrize(
    ("boundaries", "code", "caught_by"),
    [
        ([("b_a", "A")], "A", "b_a"),
        ([("b_all", None)], "ANY", "b_all"),
        ([("b_all", None), ("b_a", "A")], "A", "b_a"),
        ([("b_a", "A"), ("b_all", None)], "B", "b_all"),
    ],
    ids=["by-code", "catch-all", "specific-beats-catch-all", "falls-to-catch-all"],
)
def test_error_caught_by_boundary(
    boundaries: list[tuple[str, str | None]], code: str, caught_by: str
) -> None:
    run = Run(job_with_error_boundaries(*boundaries))
    run.start()
    run.throw_from_job("job", code, why="stock")
    assert run.token_nodes() == [f"{caught_by}_task:waiting"]
    assert run.cp.waits.keys() == {w.id for w in run.waits(f"{caught_by}_task")}
    assert run.variables["why"] == "stock"
    assert run.cp.incidents == {}


def test_error_end_event_in_sub_process_caught_by_its_boundary() -> None:
    b = ProcessBuilder("p")
    b.start_event("s")
    with b.sub_process("sub"):
        b.start_event("ss").parallel_gateway("f")
        b.end_event("fail", error("E1")).user_task("inner").end_event("ie")
        b.sequence("ss", "f", "fail")
        b.sequence("f", "inner", "ie")
    b.boundary_event("caught", "sub", error("E1")).user_task("handled").end_event("caught_end")
    b.end_event("e")
    b.sequence("s", "sub", "e")
    b.sequence("caught", "handled", "caught_end")
    run = Run(b.build())
    run.start()
    assert run.token_nodes() == ["handled:waiting"]
    assert [w.node_id for w in run.cp.waits.values()] == ["handled"], "inner task withdrawn"
    assert run.status == "active" and run.cp.incidents == {}


def error_event_sub(interrupting_scope_task: bool = True) -> ProcessDefinition:
    b = ProcessBuilder("p")
    b.start_event("s").parallel_gateway("f")
    b.service_task("job", job_type="j").end_event("e")
    b.user_task("side").end_event("side_end")
    b.sequence("s", "f", "job", "e")
    b.sequence("f", "side", "side_end")
    with b.event_sub_process("on_error"):
        b.start_event("es", error("E1")).user_task("handle").end_event("ee")
        b.sequence("es", "handle", "ee")
    return b.build()


def test_error_caught_by_event_sub_process_interrupts_the_scope() -> None:
    run = Run(error_event_sub())
    run.start()
    run.throw_from_job("job", "E1")
    assert run.token_nodes() == ["handle:waiting"]
    assert [w.node_id for w in run.cp.waits.values()] == ["handle"]
    run.complete_task("handle")
    assert run.status == "completed"


# -- escalation ------------------------------------------------------------------------


def escalating_sub(interrupting: bool, code: str | None = "ESC") -> ProcessDefinition:
    b = ProcessBuilder("p")
    b.start_event("s")
    with b.sub_process("sub"):
        b.start_event("ss").intermediate_throw_event("esc", escalation("ESC"))
        b.user_task("inner").end_event("ie")
        b.sequence("ss", "esc", "inner", "ie")
    b.boundary_event("b", "sub", escalation(code), cancel_activity=interrupting)
    b.user_task("escalated").end_event("be")
    b.end_event("e")
    b.sequence("s", "sub", "e")
    b.sequence("b", "escalated", "be")
    return b.build()


def test_interrupting_escalation_boundary() -> None:
    run = Run(escalating_sub(True))
    run.start()
    assert run.token_nodes() == ["escalated:waiting"]


def test_non_interrupting_escalation_boundary_lets_the_thrower_continue() -> None:
    run = Run(escalating_sub(False))
    run.start()
    assert run.token_nodes() == ["escalated:waiting", "inner:waiting", "sub:waiting"]


def test_uncaught_escalation_continues() -> None:
    run = Run(escalating_sub(True, code="OTHER"))
    run.start()
    assert run.token_nodes() == ["inner:waiting", "sub:waiting"]
    assert run.cp.incidents == {} and run.status == "active"


# -- compensation ----------------------------------------------------------------------


def compensable(throw_event: EventDefinition, *, end: bool = False) -> ProcessDefinition:
    """book_hotel, book_flight (each with a compensation handler), then a throw."""
    b = ProcessBuilder("p")
    b.start_event("s")
    for act in ("hotel", "flight"):
        b.service_task(act, job_type=f"book-{act}")
        b.boundary_event(f"{act}_comp", act, compensate(), compensation_handler=f"undo_{act}")
        b.service_task(f"undo_{act}", job_type=f"undo-{act}", is_for_compensation=True)
    if end:
        b.end_event("throw", throw_event)
        b.sequence("s", "hotel", "flight", "throw")
    else:
        b.intermediate_throw_event("throw", throw_event).user_task("after").end_event("e")
        b.sequence("s", "hotel", "flight", "throw", "after", "e")
    return b.build()


def test_compensation_throw_all_runs_handlers_in_reverse_then_continues() -> None:
    run = Run(compensable(compensate()))
    run.start()
    run.complete_job("hotel")
    step = run.complete_job("flight")
    assert [
        d.job_type
        for d in run.effects_of(
            __import__("dormant.engine_core.effects", fromlist=["DispatchJob"]).DispatchJob, step
        )
    ] == ["undo-flight", "undo-hotel"]
    assert run.tokens("throw")[0].state.value == "waiting"
    run.complete_job("undo_flight")
    assert run.tokens("throw"), "waits for every handler"
    run.complete_job("undo_hotel")
    assert run.token_nodes() == ["after:waiting"]
    assert run.cp.compensation == []


def test_compensation_of_one_named_activity() -> None:
    run = Run(compensable(compensate("hotel")))
    run.start()
    run.complete_job("hotel")
    run.complete_job("flight")
    assert [w.node_id for w in run.waits(kind="job")] == ["undo_hotel"]
    run.complete_job("undo_hotel")
    assert run.token_nodes() == ["after:waiting"]
    assert [e.node_id for e in run.cp.compensation] == ["flight"]


def test_compensation_end_event_ends_after_the_handlers() -> None:
    run = Run(compensable(compensate(), end=True))
    run.start()
    run.complete_job("hotel")
    run.complete_job("flight")
    run.complete_job("undo_flight")
    run.complete_job("undo_hotel")
    assert run.status == "completed"


def test_failed_then_retried_activity_enters_the_ledger_once() -> None:
    """T-12: fail -> incident -> retry -> complete: one ledger entry."""
    from dormant.engine_core.effects import DispatchJob

    run = Run(compensable(compensate()))
    run.start()
    for _ in range(3):
        wait = run.wait("hotel", "job")
        if wait.due_at is not None:
            run.fire("hotel", kind="job")
        run.fail_job("hotel")
    run.retry(run.incident("hotel").id)
    run.complete_job("hotel")
    assert [e.node_id for e in run.cp.compensation] == ["hotel"]
    step = run.complete_job("flight")
    assert [d.job_type for d in run.effects_of(DispatchJob, step)] == ["undo-flight", "undo-hotel"]


# -- inclusive gateway -----------------------------------------------------------------


def inclusive() -> ProcessDefinition:
    b = ProcessBuilder("p")
    b.start_event("s").inclusive_gateway("fork", default="to_c")
    b.user_task("a").user_task("b").user_task("c")
    b.inclusive_gateway("join").user_task("after").end_event("e")
    b.sequence("s", "fork")
    b.flow("fork", "a", condition="=x > 1")
    b.flow("fork", "b", condition="=x > 2")
    b.flow("fork", "c", id="to_c", default=True)
    b.sequence("a", "join")
    b.sequence("b", "join")
    b.sequence("c", "join")
    b.sequence("join", "after", "e")
    return b.build()


@pytest.mark.parametrize(("x", "branches"), [(5, ["a", "b"]), (2, ["a"]), (0, ["c"])])
def test_inclusive_fork_and_join(x: int, branches: list[str]) -> None:
    run = Run(inclusive())
    run.start({"x": x})
    assert sorted(t.node_id for t in run.tokens()) == branches
    for node in branches[:-1]:
        run.complete_task(node)
        assert not run.tokens("after"), "the join waits for every token that can still arrive"
    run.complete_task(branches[-1])
    assert run.token_nodes() == ["after:waiting"]
    assert len(run.tokens()) == 1


# -- event sub-processes ---------------------------------------------------------------


def with_event_sub(
    start_event: EventDefinition, *, interrupting: bool, inside_sub: bool = False
) -> ProcessDefinition:
    b = ProcessBuilder("p")
    b.start_event("s")

    def body() -> None:
        b.user_task("work")
        with b.event_sub_process("esp"):
            b.start_event("es", start_event, is_interrupting=interrupting)
            b.user_task("handle").end_event("ee")
            b.sequence("es", "handle", "ee")

    if inside_sub:
        with b.sub_process("sub"):
            b.start_event("ss")
            body()
            b.end_event("se")
            b.sequence("ss", "work", "se")
        b.user_task("after").end_event("e")
        b.sequence("s", "sub", "after", "e")
    else:
        body()
        b.end_event("e")
        b.sequence("s", "work", "e")
    return b.build()


def trigger_event_sub(run: Run, kind: str) -> None:
    if kind == "message":
        run.message("es", "poke", "k1", v=1)
    elif kind == "signal":
        run.signal("es", "poke", v=1)
    else:
        run.fire("es")


EVENTS = {"message": message("poke", "=key"), "signal": signal("poke"), "timer": timer("PT1H")}


@pytest.mark.parametrize("inside_sub", [False, True], ids=["process", "sub-process"])
@pytest.mark.parametrize("kind", list(EVENTS))
@pytest.mark.parametrize("interrupting", [True, False])
def test_event_sub_process_starts(kind: str, interrupting: bool, inside_sub: bool) -> None:
    run = Run(with_event_sub(EVENTS[kind], interrupting=interrupting, inside_sub=inside_sub))
    run.start({"key": "k1"})
    assert run.wait("es").role.value == "event_sub"
    trigger_event_sub(run, kind)
    nodes = sorted(t.node_id for t in run.tokens())
    if interrupting:
        assert "work" not in nodes and not run.waits("work")
        assert not run.waits("es")
    else:
        assert "work" in nodes
        # message/signal stay subscribed; a one-shot timer is spent.
        assert bool(run.waits("es")) is (kind != "timer")
    assert "handle" in nodes
    run.complete_task("handle")
    if not interrupting:
        run.complete_task("work")
    if inside_sub:
        assert run.token_nodes() == ["after:waiting"]
        assert not run.waits("es")
    else:
        assert run.status == "completed"


# -- link, terminate, receive, manual, throws ------------------------------------------


def test_link_events_jump() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").intermediate_throw_event("go", link("L"))
    b.intermediate_catch_event("land", link("L")).user_task("after").end_event("e")
    b.sequence("s", "go")
    b.sequence("land", "after", "e")
    run = Run(b.build())
    run.start()
    assert run.token_nodes() == ["after:waiting"]


def test_terminate_inside_sub_process_ends_only_that_scope() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").parallel_gateway("f")
    with b.sub_process("sub"):
        b.start_event("ss").parallel_gateway("sf")
        b.user_task("inner").end_event("ie")
        b.end_event("stop", terminate())
        b.sequence("ss", "sf", "inner", "ie")
        b.sequence("sf", "stop")
    b.user_task("after").end_event("e")
    b.user_task("outer").end_event("oe")
    b.sequence("s", "f", "sub", "after", "e")
    b.sequence("f", "outer", "oe")
    run = Run(b.build())
    run.start()
    assert run.token_nodes() == ["after:waiting", "outer:waiting"]
    assert not run.waits("inner")
    assert run.status == "active"


def test_terminate_at_process_level_ends_everything() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").parallel_gateway("f").user_task("u").end_event("e")
    b.end_event("stop", terminate())
    b.sequence("s", "f", "u", "e")
    b.sequence("f", "stop")
    run = Run(b.build())
    run.start()
    assert run.status == "completed" and run.cp.waits == {} and run.cp.tokens == {}


def test_receive_task_with_boundary() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").receive_task("recv", "payment", "=orderId").end_event("e")
    b.boundary_event("late", "recv", timer("PT1H")).end_event("late_end")
    b.sequence("s", "recv", "e")
    b.sequence("late", "late_end")
    run = Run(b.build())
    run.start({"orderId": 42})
    assert run.wait("recv").correlation_key == "42"
    run.message("recv", "payment", "42", amount=3)
    assert run.status == "completed" and run.variables["amount"] == 3
    assert run.facts_of("BoundaryFired") == []
    run2 = Run(b.build())
    run2.start({"orderId": 42})
    run2.fire("late")
    assert run2.status == "completed" and "amount" not in run2.variables


def test_manual_task_and_none_throw_pass_through() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").manual_task("m").intermediate_throw_event("milestone").user_task(
        "u"
    ).end_event("e")
    b.sequence("s", "m", "milestone", "u", "e")
    run = Run(b.build())
    step = run.start()
    assert run.token_nodes() == ["u:waiting"] and step.effects == ()


def test_intermediate_message_throw_emits_throw_message() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").intermediate_throw_event("tell", message("shipped", "=orderId"))
    b.user_task("u").end_event("e")
    b.sequence("s", "tell", "u", "e")
    run = Run(b.build(), instance_id="inst")
    step = run.start({"orderId": "o-1"})
    (thrown,) = run.effects_of(ThrowMessage, step)
    assert (thrown.name, thrown.correlation_key) == ("shipped", "o-1")
    assert thrown.message_id.startswith("inst.")
    assert run.token_nodes() == ["u:waiting"]


def test_an_error_from_an_event_sub_process_is_caught_by_its_sub_processs_boundary() -> None:
    """The event sub-process's own scope has no token of its own: the error walks on
    to the enclosing sub-process, whose error boundary catches it."""
    b = ProcessBuilder("p")
    b.start_event("s")
    with b.sub_process("sub"):
        b.start_event("ss").user_task("work").end_event("se")
        b.sequence("ss", "work", "se")
        with b.event_sub_process("esp"):
            b.start_event("es", message("poke", "=key"), is_interrupting=False)
            b.end_event("fail", error("E1"))
            b.sequence("es", "fail")
    b.boundary_event("caught", "sub", error("E1")).user_task("recover").end_event("re")
    b.user_task("after").end_event("e")
    b.sequence("s", "sub", "after", "e")
    b.sequence("caught", "recover", "re")
    run = Run(b.build())
    run.start({"key": "k1"})
    assert run.token_nodes() == ["sub:waiting", "work:waiting"]
    run.message("es", "poke", "k1")
    assert run.token_nodes() == ["recover:waiting"]
    assert not run.waits("work") and not run.waits("es")
    assert run.cp.incidents == {}
    run.complete_task("recover")
    assert run.status == "completed"

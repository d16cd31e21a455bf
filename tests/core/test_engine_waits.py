"""Waits docs/waits.md names: boundaries, cycles, event-based gateways, signals,
stale triggers, bounded lineage and the Hydrated/Dehydrated facts.

Every checkpoint is round-tripped through JSON between triggers (``enginekit.Run``).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from dormant.engine_core.builder import ProcessBuilder, message, signal, timer
from dormant.engine_core.checkpoint import encode
from dormant.engine_core.effects import ThrowSignal
from dormant.engine_core.model import EventDefinition, ProcessDefinition, TimerKind
from dormant.engine_core.triggers import (
    MessageReceived,
    SignalReceived,
    TaskCompleted,
    TimerFired,
    Trigger,
)
from tests.core.enginekit import T0, Run

# -- boundary timers on a user task ------------------------------------------------------


def approval(
    boundary_event: EventDefinition, *, interrupting: bool = True, sibling: bool = False
) -> ProcessDefinition:
    """approve (user task) with a boundary ``late`` -> escalate (user task) -> end."""
    b = ProcessBuilder("approval")
    b.start_event("s")
    if sibling:
        b.parallel_gateway("fork")
        b.user_task("side").end_event("side_end")
        b.sequence("s", "fork", "approve")
        b.sequence("fork", "side", "side_end")
    else:
        b.sequence("s", "approve")
    b.user_task("approve").end_event("done")
    b.boundary_event("late", "approve", boundary_event, cancel_activity=interrupting)
    b.user_task("escalate").end_event("escalated")
    b.sequence("approve", "done")
    b.sequence("late", "escalate", "escalated")
    return b.build()


@pytest.mark.parametrize(
    ("spec", "due"),
    [
        (timer("PT24H"), T0 + timedelta(hours=24)),
        (timer('="PT" + string(hours) + "H"'), T0 + timedelta(hours=5)),
        (timer("2026-01-07T10:00:00Z", TimerKind.DATE), T0.replace(day=7, hour=10)),
        (timer("R3/PT10M", TimerKind.CYCLE), T0 + timedelta(minutes=10)),
    ],
    ids=["duration", "duration-expression", "date", "cycle"],
)
def test_boundary_timer_is_armed_with_its_absolute_deadline(
    spec: EventDefinition, due: datetime
) -> None:
    run = Run(approval(spec))
    run.start({"hours": 5})
    arm = run.wait("late", "timer")
    assert arm.due_at == due
    assert (arm.role.value, arm.def_index, arm.token_id) == (
        "boundary",
        0,
        run.tokens("approve")[0].id,
    )
    assert run.wait("approve", "user_task").token_id == arm.token_id


def test_interrupting_boundary_timer_withdraws_the_user_task() -> None:
    run = Run(approval(timer("PT24H")))
    run.start()
    task_wait = run.wait("approve", "user_task")
    run.fire("late")
    assert run.token_nodes() == ["escalate:waiting"]
    assert [w.node_id for w in run.cp.waits.values()] == ["escalate"]
    assert run.facts_of("BoundaryFired", boundary="late", interrupting=True)
    # The old task's completion is now stale: nothing changes.
    step = run.send(TaskCompleted(wait_id=task_wait.id, variables={"ok": True}))
    assert step.changed is False
    assert "ok" not in run.variables


def test_non_interrupting_boundary_timer_keeps_the_task() -> None:
    run = Run(approval(timer("PT1H"), interrupting=False))
    run.start()
    run.fire("late")
    assert run.token_nodes() == ["approve:waiting", "escalate:waiting"]
    assert not run.waits("late"), "a one-shot non-interrupting timer fires once"
    run.complete_task("approve")
    run.complete_task("escalate")
    assert run.status == "completed"


def test_non_interrupting_cycle_fires_three_times_then_stops() -> None:
    run = Run(approval(timer("R3/PT10M", TimerKind.CYCLE), interrupting=False))
    run.start()
    dues = []
    for _ in range(3):
        dues.append(run.wait("late").due_at)
        run.fire("late")
    assert dues == [T0 + timedelta(minutes=10 * n) for n in (1, 2, 3)]
    assert not run.waits("late")
    assert len(run.tokens("escalate")) == 3
    assert len(run.tokens("approve")) == 1


def test_overdue_cycle_fires_once_then_continues_from_now() -> None:
    run = Run(approval(timer("R/PT10M", TimerKind.CYCLE), interrupting=False))
    run.start()
    late = T0 + timedelta(hours=2, minutes=3)
    run.send(TimerFired(wait_id=run.wait("late").id), at=late)
    assert len(run.tokens("escalate")) == 1, "an overdue cycle collapses to one firing"
    assert run.wait("late").due_at == late + timedelta(minutes=10)


def test_boundary_deadline_never_moves_over_unrelated_triggers() -> None:
    """T-15: N triggers on a sibling branch; the boundary's recorded deadline stays put."""
    b = ProcessBuilder("p")
    b.start_event("s").parallel_gateway("fork")
    b.user_task("approve").end_event("done")
    b.boundary_event("late", "approve", timer("PT24H"))
    b.end_event("escalated")
    b.intermediate_catch_event("ping", message("ping", "=key"))
    b.user_task("work")
    b.exclusive_gateway("again", default="loop")
    b.end_event("side_end")
    b.sequence("s", "fork", "approve", "done")
    b.sequence("late", "escalated")
    b.sequence("fork", "ping", "work", "again")
    b.flow("again", "ping", id="loop", default=True)
    b.flow("again", "side_end", condition="=stop = true")
    run = Run(b.build())
    run.start({"key": "k", "stop": False})
    arm = run.wait("late")
    for n in range(20):
        run.advance(minutes=30)
        run.message("ping", "ping", "k", n=n)
        run.advance(minutes=30)
        run.complete_task("work")
        again = run.wait("late")
        assert (again.id, again.due_at, again.def_index) == (arm.id, arm.due_at, 0)
    # 20 hours passed; 5 more make the next unrelated trigger load it overdue.
    run.advance(hours=5)
    run.message("ping", "ping", "k")
    assert run.facts_of("BoundaryFired", boundary="late")
    assert not run.tokens("approve")
    assert not run.waits("approve") and not run.waits("late")


def test_overdue_boundary_fires_before_the_trigger_that_loads_the_instance() -> None:
    """The completion arrives after the deadline: the boundary wins, the completion is stale."""
    run = Run(approval(timer("PT1H")))
    run.start()
    task = run.wait("approve", "user_task")
    step = run.send(TaskCompleted(wait_id=task.id, variables={"ok": 1}), at=T0 + timedelta(hours=2))
    assert step.changed is True
    assert run.token_nodes() == ["escalate:waiting"]
    assert "ok" not in run.variables


@pytest.mark.parametrize("kind", ["message", "signal"])
@pytest.mark.parametrize("interrupting", [True, False])
def test_message_and_signal_boundaries_on_a_task(kind: str, interrupting: bool) -> None:
    spec = message("cancel-order", "=orderId") if kind == "message" else signal("stop-all")
    run = Run(approval(spec, interrupting=interrupting))
    run.start({"orderId": "o-1"})
    arm = run.wait("late", kind)
    if kind == "message":
        assert (arm.message_name, arm.correlation_key) == ("cancel-order", "o-1")
        run.message("late", "cancel-order", "o-1", reason="customer")
    else:
        assert arm.signal_name == "stop-all"
        run.signal("late", "stop-all", reason="customer")
    assert run.variables["reason"] == "customer"
    expected = ["escalate:waiting"] if interrupting else ["approve:waiting", "escalate:waiting"]
    assert run.token_nodes() == expected
    # A non-interrupting message/signal boundary stays subscribed (Camunda 8).
    assert bool(run.waits("late")) is (not interrupting)


def test_message_boundary_with_wrong_key_is_stale() -> None:
    run = Run(approval(message("cancel-order", "=orderId")))
    run.start({"orderId": "o-1"})
    arm = run.wait("late")
    step = run.send(MessageReceived(wait_id=arm.id, name="cancel-order", correlation_key="o-2"))
    assert step.changed is False
    assert run.token_nodes() == ["approve:waiting"]


# -- boundaries on an embedded sub-process ---------------------------------------------


def sub_with_boundary(spec: EventDefinition, interrupting: bool = True) -> ProcessDefinition:
    b = ProcessBuilder("p")
    b.start_event("s")
    with b.sub_process("sub"):
        b.start_event("ss").parallel_gateway("inner_fork")
        b.user_task("inner_task").end_event("inner_end")
        b.intermediate_catch_event("inner_wait", message("m", "=k")).end_event("inner_end2")
        b.service_task("inner_job", job_type="j").end_event("inner_end3")
        b.sequence("ss", "inner_fork", "inner_task", "inner_end")
        b.sequence("inner_fork", "inner_wait", "inner_end2")
        b.sequence("inner_fork", "inner_job", "inner_end3")
    b.boundary_event("b", "sub", spec, cancel_activity=interrupting)
    b.end_event("done").end_event("after_b")
    b.sequence("s", "sub", "done")
    b.sequence("b", "after_b")
    return b.build()


def test_interrupting_boundary_on_sub_process_withdraws_every_inner_wait() -> None:
    """T-13: total withdrawal — nothing of the cancelled sub-process stays in ``waits``."""
    run = Run(sub_with_boundary(timer("PT1H")))
    run.start({"k": "x"})
    inner = {w.id for w in run.cp.waits.values() if w.node_id != "b"}
    assert {w.node_id for w in run.cp.waits.values()} == {
        "inner_task",
        "inner_wait",
        "inner_job",
        "b",
    }
    run.fire("b")
    assert run.status == "completed"
    assert run.cp.waits == {}
    assert not inner & set(run.cp.waits)
    assert set(run.cp.scopes) <= {"s0"}


def test_non_interrupting_boundary_on_sub_process_keeps_the_inside() -> None:
    b = ProcessBuilder("p")
    b.start_event("s")
    with b.sub_process("sub"):
        b.start_event("ss").user_task("inner_task").end_event("inner_end")
        b.sequence("ss", "inner_task", "inner_end")
    b.boundary_event("b", "sub", signal("nudge"), cancel_activity=False)
    b.user_task("nudged").end_event("done").end_event("nudge_end")
    b.sequence("s", "sub", "done")
    b.sequence("b", "nudged", "nudge_end")
    run = Run(b.build())
    run.start()
    run.signal("b", "nudge")
    assert sorted(run.token_nodes()) == ["inner_task:waiting", "nudged:waiting", "sub:waiting"]
    run.complete_task("inner_task")
    assert not run.waits("b"), "the boundary dies with its sub-process"
    run.complete_task("nudged")
    assert run.status == "completed"


# -- intermediate signal catch / throw ------------------------------------------------


def test_signal_throw_emits_effect_and_catch_waits() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").intermediate_throw_event("shout", signal("go"))
    b.intermediate_catch_event("hear", signal('="back-" + who')).end_event("e", signal("bye"))
    b.sequence("s", "shout", "hear", "e")
    run = Run(b.build())
    step = run.start({"who": "ann", "secret": "s3cr3t"})
    thrown = run.effects_of(ThrowSignal, step)
    assert [t.name for t in thrown] == ["go"]
    assert run.wait("hear").signal_name == "back-ann"
    stale = run.send(SignalReceived(wait_id=run.wait("hear").id, name="other"))
    assert stale.changed is False
    step = run.signal("hear", "back-ann", got=1)
    assert [t.name for t in run.effects_of(ThrowSignal, step)] == ["bye"]
    assert run.status == "completed"
    assert run.variables["got"] == 1
    ids = [t.signal_id for t in run.effects_of(ThrowSignal)]
    assert len(set(ids)) == 2 and all(i.startswith("i1.") for i in ids)


# -- event-based gateway ---------------------------------------------------------------


def ebg(*arms: tuple[str, EventDefinition]) -> ProcessDefinition:
    b = ProcessBuilder("p")
    b.start_event("s").event_based_gateway("g")
    b.sequence("s", "g")
    for name, spec in arms:
        b.intermediate_catch_event(name, spec).end_event(f"{name}_end")
        b.sequence("g", name, f"{name}_end")
    return b.build()


@pytest.mark.parametrize("winner", ["t", "m", "sig"])
def test_event_based_gateway_first_wins_others_withdrawn(winner: str) -> None:
    run = Run(ebg(("t", timer("PT1H")), ("m", message("pay", "=id")), ("sig", signal("abort"))))
    run.start({"id": 7})
    arms = {w.node_id: w for w in run.cp.waits.values()}
    assert {k: v.kind.value for k, v in arms.items()} == {
        "t": "timer",
        "m": "message",
        "sig": "signal",
    }
    assert {w.role.value for w in arms.values()} == {"arm"}
    assert arms["m"].correlation_key == "7"
    if winner == "t":
        run.fire("t")
    elif winner == "m":
        run.message("m", "pay", "7")
    else:
        run.signal("sig", "abort")
    assert run.status == "completed"
    assert run.cp.waits == {}
    assert run.facts_of("GatewayArmWon", arm=winner)
    # The losers are stale now.
    for node, wait in arms.items():
        if node == winner:
            continue
        triggers: dict[str, Trigger] = {
            "t": TimerFired(wait_id=wait.id),
            "m": MessageReceived(wait_id=wait.id, name="pay", correlation_key="7"),
            "sig": SignalReceived(wait_id=wait.id, name="abort"),
        }
        trig = triggers[node]
        revision = run.cp.revision
        assert run.send(trig, at=run.now + timedelta(hours=3)).changed is False
        assert run.cp.revision == revision


def test_event_based_gateway_earlier_timer_wins_even_listed_second() -> None:
    run = Run(ebg(("slow", timer("PT2H")), ("fast", timer("PT1H"))))
    run.start()
    slow = run.wait("slow")
    # The instance is next loaded after both deadlines (by the slow timer's own fire).
    run.send(TimerFired(wait_id=slow.id), at=T0 + timedelta(hours=3))
    assert run.facts_of("GatewayArmWon", arm="fast")
    assert not run.facts_of("GatewayArmWon", arm="slow")
    assert run.status == "completed"


def test_message_arm_wins_then_late_timer_is_stale() -> None:
    run = Run(ebg(("t", timer("PT1H")), ("m", message("pay", "=id"))))
    run.start({"id": "a"})
    t = run.wait("t")
    run.advance(minutes=30).message("m", "pay", "a")
    cp_before = encode(run.cp)
    step = run.send(TimerFired(wait_id=t.id), at=T0 + timedelta(hours=1))
    assert step.changed is False and encode(step.checkpoint) == cp_before
    assert [f.kind for f in step.facts] == ["Stale"]


# -- stale triggers --------------------------------------------------------------------


def test_redelivered_trigger_is_stale_and_changes_nothing() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").user_task("a").user_task("b").end_event("e")
    b.sequence("s", "a", "b", "e")
    run = Run(b.build())
    run.start()
    trig = TaskCompleted(wait_id=run.wait("a").id, variables={"v": 1})
    run.send(trig)
    revision, doc = run.cp.revision, encode(run.cp)
    again = run.send(TaskCompleted(wait_id=trig.wait_id, variables={"v": 2}))
    assert again.changed is False and again.effects == ()
    assert encode(run.cp) == doc and run.cp.revision == revision
    assert run.variables["v"] == 1
    # A timer fired early (before its due time) is stale too.
    b2 = ProcessBuilder("q")
    b2.start_event("s").intermediate_catch_event("t", timer("PT1H")).end_event("e")
    b2.sequence("s", "t", "e")
    run2 = Run(b2.build())
    run2.start()
    assert run2.send(TimerFired(wait_id=run2.wait("t").id)).changed is False
    assert run2.send(TimerFired(wait_id="w999"), at=T0 + timedelta(hours=2)).changed is True
    assert run2.status == "completed", "the unknown wait is ignored; the overdue timer fired"


# -- sub-process variable scoping ------------------------------------------------------


def test_sub_process_locals_stay_local_and_outer_writes_propagate() -> None:
    b = ProcessBuilder("p")
    b.start_event("s")
    with b.sub_process("sub", inputs=()):
        b.start_event("ss").script_task("set_outer", "=count + 1", result_variable="count")
        b.user_task("inner").end_event("se")
        b.sequence("ss", "set_outer", "inner", "se")
    b.user_task("after").end_event("e")
    b.sequence("s", "sub", "after", "e")
    run = Run(b.build())
    run.start({"count": 1})
    sub_scope = run.tokens("inner")[0].scope_id
    assert sub_scope != "s0"
    run.complete_task("inner", local_only=True)
    # No output mappings: a task completion's new name lands in the process scope
    # (Camunda 8 propagates to the innermost scope that has it, else the root).
    assert run.variables["count"] == 2
    assert run.variables["local_only"] is True


def test_sub_process_input_mapping_makes_a_local_variable() -> None:
    from dormant.engine_core.model import IoMapping

    b = ProcessBuilder("p")
    b.start_event("s")
    with b.sub_process("sub", inputs=(IoMapping("=total * 2", "doubled"),)):
        b.start_event("ss").script_task("use", "=doubled + 1", result_variable="doubled")
        b.script_task("out", "=doubled", result_variable="seen")
        b.user_task("inner").end_event("se")
        b.sequence("ss", "use", "out", "inner", "se")
    b.user_task("after").end_event("e")
    b.sequence("s", "sub", "after", "e")
    run = Run(b.build())
    run.start({"total": 5})
    inner_scope = run.cp.scopes[run.tokens("inner")[0].scope_id]
    assert inner_scope.variables["doubled"] == 11
    assert "doubled" not in run.variables
    assert run.variables["seen"] == 11
    run.complete_task("inner")
    assert "doubled" not in run.variables
    assert run.token_nodes() == ["after:waiting"]


# -- bounded lineage -------------------------------------------------------------------


def test_lineage_and_checkpoint_size_stay_flat_over_200_cycles() -> None:
    b = ProcessBuilder("poller")
    b.start_event("s").parallel_gateway("fork")
    b.intermediate_catch_event("tick", timer("PT1M"))
    b.script_task("count", "=n + 1", result_variable="n")
    b.exclusive_gateway("more", default="again")
    b.end_event("stop")
    b.user_task("hold").end_event("hold_end")
    b.sequence("s", "fork", "tick", "count", "more")
    b.flow("more", "tick", id="again", default=True)
    b.flow("more", "stop", condition="=n >= 1000")
    b.sequence("fork", "hold", "hold_end")
    run = Run(b.build())
    run.start({"n": 0})
    lineage = list(run.tokens("tick")[0].lineage)
    sizes = []
    for _ in range(200):
        run.fire("tick")
        token = run.tokens("tick")[0]
        assert token.lineage == lineage
        sizes.append(len(json.dumps(encode(run.cp))))
    assert run.variables["n"] == 200
    # The counter grows by a few digits; nothing else may grow.
    assert max(sizes) - min(sizes) <= 12, (min(sizes), max(sizes))


# -- Hydrated / Dehydrated facts -------------------------------------------------------


def test_hydrated_and_dehydrated_facts_on_every_trigger_without_payload() -> None:
    secret = "TOPSECRET-4711"
    b = ProcessBuilder("p")
    b.start_event("s").user_task("a").intermediate_catch_event("m", message("msg", "=key"))
    b.intermediate_catch_event("t", timer("PT5M")).end_event("e")
    b.sequence("s", "a", "m", "t", "e")
    run = Run(b.build())
    run.start({"key": secret, "card": secret})
    run.complete_task("a", note=secret)
    run.message("m", "msg", secret, more=secret)
    run.fire("t")
    hydrated = run.facts_of("Hydrated")
    assert [(f.details["trigger"], f.details["outcome"]) for f in hydrated] == [
        ("start", "continued"),
        ("task_completed", "continued"),
        ("message", "continued"),
        ("timer", "completed"),
    ]
    assert all(f.details["token"] for f in hydrated)
    dehydrated = [f.details for f in run.facts_of("Dehydrated")]
    assert dehydrated == [
        {"waits": 1, "user_task": 1},
        {"waits": 1, "message": 1},
        {"waits": 1, "timer": 1},
        {"waits": 0},
    ]
    for step in run.steps:
        assert len([f for f in step.facts if f.kind == "Hydrated"]) == 1
        assert len([f for f in step.facts if f.kind == "Dehydrated"]) == 1
    for fact in run.facts:
        assert secret not in repr(fact), fact


def test_message_after_the_gateway_timer_deadline_loses() -> None:
    """Time is an input: a message applied after the timer arm's deadline finds the
    timer already fired and the message arm withdrawn (stale)."""
    run = Run(ebg(("t", timer("PT1H")), ("m", message("pay", "=id"))))
    run.start({"id": "a"})
    m = run.wait("m")
    step = run.send(
        MessageReceived(wait_id=m.id, name="pay", correlation_key="a", variables={"paid": True}),
        at=T0 + timedelta(hours=1, seconds=1),
    )
    assert step.changed is True, "the overdue timer fired on load"
    assert run.facts_of("GatewayArmWon", arm="t")
    assert "paid" not in run.variables
    assert run.status == "completed"

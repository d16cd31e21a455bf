"""Operations on running instances in the pure core (issue 12): suspend and resume,
set variables, migrate to another version, modify.

Every checkpoint is round-tripped through JSON between triggers (``enginekit.Run``).
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from dormant.engine_core.builder import ProcessBuilder, message, timer
from dormant.engine_core.checkpoint import encode
from dormant.engine_core.engine import Services, apply
from dormant.engine_core.errors import InvalidOperation
from dormant.engine_core.migration import problems
from dormant.engine_core.model import ProcessDefinition
from dormant.engine_core.operations import projected_waits
from dormant.engine_core.services import JobTypeSettings
from dormant.engine_core.triggers import (
    Cancel,
    IncidentRetry,
    JobHeartbeat,
    MessageReceived,
    MigrateInstance,
    ModifyInstance,
    Resume,
    SetVariables,
    Suspend,
    TimerFired,
)
from tests.core.enginekit import Run


def waits_two_ways(task: str = "review") -> ProcessDefinition:
    """A fork: a timer (PT1M) then ``after_timer``; a message ``paid[=orderId]`` then
    ``after_msg``; and a user task ``task``."""
    b = ProcessBuilder("order")
    b.start_event("s").parallel_gateway("fork")
    b.intermediate_catch_event("wait_timer", timer("PT1M"))
    b.intermediate_catch_event("wait_pay", message("paid", "=orderId"))
    b.user_task(task).user_task("after_timer").user_task("after_msg")
    b.end_event("e1").end_event("e2").end_event("e3")
    b.sequence("s", "fork", "wait_timer", "after_timer", "e1")
    b.sequence("fork", "wait_pay", "after_msg", "e2")
    b.sequence("fork", task, "e3")
    return b.build()


def gate() -> ProcessDefinition:
    """An exclusive gateway on ``=ok`` with no default: ``ok`` unset is an incident."""
    b = ProcessBuilder("gate")
    b.start_event("s").exclusive_gateway("gw").end_event("yes")
    b.sequence("s", "gw")
    b.flow("gw", "yes", condition="=ok")
    return b.build()


def _message(run: Run, key: str = "o-1") -> MessageReceived:
    wait = run.wait("wait_pay", "message")
    return MessageReceived(wait_id=wait.id, name="paid", correlation_key=key)


# -- suspend and resume ---------------------------------------------------------------


def test_held_triggers_apply_once_on_resume_in_arrival_order() -> None:
    run = Run(waits_two_ways())
    run.start({"orderId": "o-1"})
    timer_wait = run.wait("wait_timer", "timer")
    run.send(Suspend())
    assert run.cp.suspended
    # A suspended instance holds no deadline row: the scheduler has nothing to fire.
    assert projected_waits(run.cp)[timer_wait.id].due_at is None
    assert run.cp.waits[timer_wait.id].due_at == timer_wait.due_at
    run.advance(minutes=2)  # the timer comes due while suspended ...
    run.send(TimerFired(wait_id=timer_wait.id))  # ... even a fire that got through is held
    run.advance(seconds=5)
    run.send(_message(run))  # then the message arrives
    assert [h.trigger["kind"] for h in run.cp.held] == ["timer", "message"]
    assert run.token_nodes() == ["review:waiting", "wait_pay:waiting", "wait_timer:waiting"]

    run.send(Resume())
    assert not run.cp.suspended and run.cp.held == []
    assert run.token_nodes() == ["after_msg:waiting", "after_timer:waiting", "review:waiting"]
    # Arrival order: the timer (due before the message came) ran first, so its user
    # task's wait has the lower id; the held fire after it was stale, not a second fire.
    first, second = run.wait("after_timer", "user_task"), run.wait("after_msg", "user_task")
    assert int(first.id[1:]) < int(second.id[1:])
    outcomes = [f.details["outcome"] for f in run.facts_of("HeldTriggerApplied")]
    assert outcomes == ["stale", "applied"]
    assert projected_waits(run.cp) == run.cp.waits


def test_a_timer_due_while_suspended_fires_once_on_resume_without_any_fire() -> None:
    run = Run(waits_two_ways())
    run.start({"orderId": "o-1"})
    run.send(Suspend())
    run.advance(hours=3)
    run.send(_message(run))  # any trigger meanwhile: held, and no timer fires
    assert run.tokens("wait_timer")
    run.send(Resume())
    assert len(run.tokens("after_timer")) == 1 and len(run.tokens("after_msg")) == 1
    assert run.facts_of("Resumed", held=1)


def test_what_a_suspended_instance_refuses_and_what_goes_through() -> None:
    run = Run(gate())
    run.start()
    incident = run.incident("gw")
    with pytest.raises(InvalidOperation, match="not suspended"):
        run.send(Resume())
    run.send(Suspend())
    with pytest.raises(InvalidOperation, match="already suspended"):
        run.send(Suspend())
    with pytest.raises(InvalidOperation, match="is suspended"):
        run.send(IncidentRetry(incident_id=incident.id))
    with pytest.raises(InvalidOperation, match="is suspended"):
        run.send(ModifyInstance(start_before=["yes"]))
    with pytest.raises(InvalidOperation, match="suspended; resume it"):
        run.send(SetVariables(variables={"ok": True}, retry_incidents=True))
    run.send(SetVariables(variables={"ok": True}))  # data changes go through
    run.send(Resume())
    run.retry(incident.id)
    assert run.status == "completed"


def test_cancel_ends_a_suspended_instance_and_its_held_triggers() -> None:
    run = Run(waits_two_ways())
    run.start({"orderId": "o-1"})
    run.send(Suspend())
    run.advance(hours=1)
    run.send(_message(run))
    run.send(Cancel())
    assert run.status == "terminated"
    assert not run.tokens("after_timer")  # the due timer never fired
    with pytest.raises(InvalidOperation, match="terminated"):
        run.send(Resume())


# -- set variables --------------------------------------------------------------------


def test_set_variables_then_retry_in_one_step_records_names_never_values() -> None:
    run = Run(gate())
    run.start({"old": 1, "note": "x"})
    assert run.status == "active_incidents"
    trigger = SetVariables(
        variables={"ok": True, "label": "secret-label"}, unset=["note"], retry_incidents=True
    )
    run.send(trigger)
    assert run.status == "completed"
    assert run.variables == {"old": 1, "ok": True, "label": "secret-label"}
    (fact,) = run.facts_of("VariablesSet")
    assert fact.details == {"scope": "s0", "set": "label,ok", "unset": "note"}
    assert "secret-label" not in json.dumps([f.details for f in run.facts])
    assert run.facts_of("IncidentsRetried", count=1)


def test_set_variables_in_a_sub_process_scope_by_its_node_or_id() -> None:
    b = ProcessBuilder("nested")
    b.start_event("s")
    with b.sub_process("inner"):
        b.start_event("is").user_task("work").end_event("ie")
        b.sequence("is", "work", "ie")
    b.end_event("e")
    b.sequence("s", "inner", "e")
    run = Run(b.build())
    run.start({"a": 1})
    inner = next(s for s in run.cp.scopes.values() if s.node_id == "inner")
    run.send(SetVariables(scope="inner", variables={"local": [1, 2]}))
    assert run.cp.scopes[inner.id].variables == {"local": [1, 2]}
    assert "local" not in run.variables
    run.send(SetVariables(scope=inner.id, unset=["local"]))
    assert run.cp.scopes[inner.id].variables == {}
    with pytest.raises(InvalidOperation, match="no scope 'nowhere'"):
        run.send(SetVariables(scope="nowhere", variables={"x": 1}))
    with pytest.raises(InvalidOperation, match="no variable 'gone'"):
        run.send(SetVariables(unset=["gone"]))
    with pytest.raises(InvalidOperation, match="nothing to change"):
        run.send(SetVariables())


# -- migration ------------------------------------------------------------------------


def _migrate(run: Run, target: ProcessDefinition, version: int, **mapping: str) -> None:
    services = Services(migration_target=target)
    step = apply(
        run.defn,
        run.cp,
        MigrateInstance(version=version, mapping=mapping),
        now=run.now,
        services=services,
    )
    run.cp = step.checkpoint
    run.defn = target
    run.steps.append(step)


def test_migration_repoints_every_wait_keeping_deadline_and_subscription() -> None:
    run = Run(waits_two_ways())
    run.start({"orderId": "o-1"})
    before = {w.node_id: w for w in run.cp.waits.values()}
    target = waits_two_ways(task="check")  # v2 renamed the user task
    _migrate(run, target, 2, review="check")
    assert run.cp.version == 2
    assert run.token_nodes() == ["check:waiting", "wait_pay:waiting", "wait_timer:waiting"]
    after = {w.node_id: w for w in run.cp.waits.values()}
    assert after["wait_timer"].due_at == before["wait_timer"].due_at
    assert (after["wait_pay"].message_name, after["wait_pay"].correlation_key) == ("paid", "o-1")
    assert after["check"].id == before["review"].id  # the same task, the same task id
    assert run.facts_of("Migrated", from_version=1, to_version=2, mapped="review>check")
    run.send(_message(run))
    run.complete_task("check")
    run.advance(minutes=2).fire("wait_timer")
    assert sorted(t.node_id for t in run.tokens()) == ["after_msg", "after_timer"]


def test_a_refused_plan_names_every_reason_and_changes_nothing() -> None:
    run = Run(waits_two_ways())
    run.start({"orderId": "o-1"})
    target = waits_two_ways(task="check")
    before = encode(run.cp)
    found = problems(run.defn, target, run.cp, {"ghost": "check"}, 2)
    assert any("v1 has no node 'ghost'" in p for p in found)
    assert any("'review', which v2 does not have" in p for p in found)
    with pytest.raises(InvalidOperation, match="cannot move from order v1 to v2"):
        _migrate(run, target, 2, ghost="check")
    assert encode(run.cp) == before
    # An incompatible kind is refused too: a user task mapped onto a timer event.
    assert any(
        "userTask" in p for p in problems(run.defn, target, run.cp, {"review": "wait_timer"}, 2)
    )
    assert problems(run.defn, run.defn, run.cp, {}, 1) == ["the instance already runs version 1"]


def test_an_open_incident_moves_with_its_token() -> None:
    run = Run(gate())
    run.start()
    b = ProcessBuilder("gate")
    b.start_event("s").exclusive_gateway("decide").end_event("yes")
    b.sequence("s", "decide")
    b.flow("decide", "yes", condition="=ok")
    _migrate(run, b.build(), 2, gw="decide")
    incident = run.incident("decide")
    run.send(SetVariables(variables={"ok": True}))
    run.retry(incident.id)
    assert run.status == "completed"


# -- modify ---------------------------------------------------------------------------


def test_modify_cancels_a_token_and_starts_one_before_a_node() -> None:
    run = Run(waits_two_ways())
    run.start({"orderId": "o-1"})
    run.send(ModifyInstance(cancel_nodes=["wait_pay"], start_before=["after_msg"]))
    assert run.token_nodes() == ["after_msg:waiting", "review:waiting", "wait_timer:waiting"]
    assert not run.waits("wait_pay")
    assert run.facts_of("Modified", cancelled="wait_pay", started="after_msg", tokens_cancelled=1)


def test_modify_refuses_what_would_leave_the_instance_inconsistent() -> None:
    b = ProcessBuilder("one")
    b.start_event("s").user_task("only").end_event("e")
    b.sequence("s", "only", "e")
    with b.sub_process("inner"):
        b.start_event("is").user_task("deep").end_event("ie")
        b.sequence("is", "deep", "ie")
    run = Run(b.build())
    run.start()
    before = encode(run.cp)
    for trigger, reason in [
        (ModifyInstance(cancel_nodes=["only"]), "leaves the instance with no token"),
        (ModifyInstance(cancel_nodes=["nowhere"]), "no token is at node 'nowhere'"),
        (ModifyInstance(start_before=["deep"]), "runs in 0 scopes"),
        (ModifyInstance(start_before=["ghost"]), "no node 'ghost'"),
        (ModifyInstance(), "nothing to modify"),
    ]:
        with pytest.raises(InvalidOperation, match=reason):
            run.send(trigger)
        assert encode(run.cp) == before
    run.advance(seconds=1)
    run.send(ModifyInstance(cancel_nodes=["only"], start_before=["e"]))
    assert run.status == "completed"


def test_operations_on_an_ended_instance_are_refused() -> None:
    run = Run(gate())
    run.start({"ok": True})
    assert run.status == "completed"
    for trigger in (
        Suspend(),
        SetVariables(variables={"a": 1}),
        ModifyInstance(start_before=["yes"]),
    ):
        with pytest.raises(InvalidOperation, match="completed"):
            run.send(trigger)


# -- per job type settings and the heartbeat -----------------------------------------


def _one_job() -> ProcessDefinition:
    b = ProcessBuilder("jobs")
    b.start_event("s").service_task("report", "long-report").end_event("e")
    b.sequence("s", "report", "e")
    return b.build()


def test_a_job_types_own_timeout_and_backoff_and_a_heartbeat_extends_the_timeout() -> None:
    settings = {"long-report": JobTypeSettings(timeout_seconds=3600, retry_backoff_seconds=10)}
    run = Run(_one_job(), services=Services(job_types=settings))
    run.start()
    wait = run.wait("report", "job")
    assert wait.due_at == run.now + timedelta(seconds=3600)  # not the engine-wide 300 s
    run.advance(minutes=50)
    run.send(JobHeartbeat(wait_id=wait.id, attempt=1, extend_seconds=7200))
    assert run.wait("report", "job").due_at == run.now + timedelta(seconds=7200)
    run.send(JobHeartbeat(wait_id=wait.id, attempt=1))
    assert run.wait("report", "job").due_at == run.now + timedelta(seconds=3600)
    assert not run.send(JobHeartbeat(wait_id=wait.id, attempt=2)).changed  # not running
    run.fail_job("report")
    retry = run.wait("report", "job")
    assert (retry.attempt, retry.due_at) == (2, run.now + timedelta(seconds=10))
    other = Run(_one_job())
    other.start()
    assert other.wait("report", "job").due_at == other.now + timedelta(seconds=300)


def test_a_heartbeat_with_retries_sets_the_attempts_left_and_keeps_the_deadline() -> None:
    """``PATCH /v2/jobs/{key}`` (docs/camunda-api.md): the retries count this attempt."""
    run = Run(_one_job())
    run.start()
    wait = run.wait("report", "job")
    due = wait.due_at
    assert wait.retries_left == 2  # the engine's default: 3 attempts
    run.advance(minutes=1)
    run.send(JobHeartbeat(wait_id=wait.id, attempt=1, retries=1))
    patched = run.wait("report", "job")
    assert (patched.retries_left, patched.due_at) == (0, due)
    run.fail_job("report")
    assert run.incident("report") is not None  # no attempt was left: an incident at once

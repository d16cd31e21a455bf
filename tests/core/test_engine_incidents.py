"""Incidents (docs/incidents.md; tests/README.md maps each, the parts the pure core can show).

A technical failure parks its token in an incident; siblings keep running; operator
actions (retry, resolve, drop) and scheduled retries are triggers like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from dormant.engine_core.builder import ProcessBuilder, error, message, timer
from dormant.engine_core.checkpoint import encode
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.engine import Services
from dormant.engine_core.errors import InvalidModel, InvalidOperation, UnknownIncident
from dormant.engine_core.model import IoMapping, ProcessDefinition, RetryPolicy, TimerKind
from dormant.engine_core.triggers import IncidentDrop, IncidentResolve, IncidentRetry, TimerFired
from tests.core.enginekit import T0, Run


def with_sibling(
    build_failing: Callable[[ProcessBuilder], None], **fields: Any
) -> ProcessDefinition:
    """fork -> [failing branch built by ``build_failing``] + [user task ``side``]."""
    b = ProcessBuilder("p")
    b.start_event("s").parallel_gateway("fork")
    b.user_task("side").end_event("side_end")
    b.sequence("s", "fork")
    b.sequence("fork", "side", "side_end")
    build_failing(b)
    b.flow("fork", "bad")
    return b.build()


def job_branch(retries: str = "3", **fields: Any) -> Callable[[ProcessBuilder], None]:
    def build(b: ProcessBuilder) -> None:
        b.service_task("bad", job_type="charge", job_retries=retries, **fields)
        b.end_event("bad_end")
        b.sequence("bad", "bad_end")

    return build


# -- job failure, retries, exhaustion (T-1, T-4) ---------------------------------------


def test_a_job_with_no_result_within_its_timeout_is_dispatched_again() -> None:
    """A job message lost with a broker, or a worker that vanished: the job's timeout
    dispatches it again as the next attempt (retries untouched); a late result of the
    old attempt is stale, the new attempt's result completes the task."""
    from dormant.engine_core.triggers import JobCompleted

    run = Run(with_sibling(job_branch("3")), services=Services(job_timeout_seconds=60))
    run.start({})
    wait = run.wait("bad", "job")
    assert (wait.attempt, wait.job_running, wait.due_at) == (1, True, T0 + timedelta(seconds=60))
    step = run.fire("bad", kind="job")
    assert [e.attempt for e in run.effects_of(DispatchJob, step)] == [2]
    assert run.facts_of("JobTimedOut", attempt=1)
    again = run.wait("bad", "job")
    assert (again.attempt, again.retries_left) == (2, wait.retries_left)
    late = run.send(JobCompleted(wait_id=again.id, attempt=1))
    assert late.changed is False
    run.send(JobCompleted(wait_id=again.id, attempt=2))
    assert run.token_nodes() == ["side:waiting"]


def test_a_failure_naming_its_retries_and_backoff_overrides_the_policy() -> None:
    """A worker that counts retries itself (the Camunda 8 REST API's job failure):
    N attempts left and a backoff of its own; 0 left is an incident at once."""
    from dormant.engine_core.triggers import JobFailed

    run = Run(with_sibling(job_branch("10")), services=Services(job_retry_backoff_seconds=10))
    run.start({})
    wait = run.wait("bad", "job")
    run.send(JobFailed(wait_id=wait.id, attempt=1, error="e", retries=2, backoff_seconds=3))
    again = run.wait("bad", "job")
    assert (again.attempt, again.retries_left) == (2, 1)
    assert again.due_at == run.now + timedelta(seconds=3)
    run.fire("bad", kind="job")
    run.send(JobFailed(wait_id=again.id, attempt=2, error="gave up", retries=0))
    assert "gave up" in run.incident("bad").cause
    assert not run.waits("bad")


def test_job_failure_retries_with_backoff_then_opens_an_incident() -> None:
    run = Run(with_sibling(job_branch("3")), services=Services(job_retry_backoff_seconds=10))
    run.start({"card": "4111"})
    first = run.effects_of(DispatchJob)
    assert [(e.job_type, e.attempt, e.node_id) for e in first] == [("charge", 1, "bad")]
    run.fail_job("bad", "card declined", "DeclinedError")
    wait = run.wait("bad", "job")
    assert (wait.attempt, wait.due_at) == (2, T0 + timedelta(seconds=10))
    assert run.facts_of("JobRetryScheduled", attempt=2, error_class="DeclinedError")
    step = run.fire("bad", kind="job")
    assert [(e.attempt, e.wait_id) for e in run.effects_of(DispatchJob, step)] == [(2, wait.id)]
    redispatched = run.wait("bad", "job")
    assert redispatched.job_running  # out again: its deadline is now the job timeout
    assert redispatched.due_at == run.now + timedelta(seconds=300)
    run.fail_job("bad")
    assert run.wait("bad", "job").due_at == run.now + timedelta(seconds=20)
    run.fire("bad", kind="job")
    run.fail_job("bad", "still declined", "DeclinedError")
    incident = run.incident("bad")
    assert incident.state.value == "open"
    assert incident.job_type == "charge"
    assert "3 attempt" in incident.cause and "still declined" in incident.cause
    assert incident.cause_class == "DeclinedError"
    assert incident.data["card"] == "4111"
    assert run.status == "active_incidents"
    assert run.token_nodes() == ["bad:incident", "side:waiting"]
    assert not run.waits("bad")
    # The sibling keeps running; the instance does not complete past the incident.
    run.complete_task("side")
    assert run.status == "active_incidents"
    assert run.token_nodes() == ["bad:incident"]


def test_result_for_an_old_attempt_is_stale() -> None:
    run = Run(with_sibling(job_branch("2")))
    run.start()
    old = run.wait("bad", "job")
    run.fail_job("bad")
    from dormant.engine_core.triggers import JobCompleted

    assert run.send(JobCompleted(wait_id=old.id, attempt=1)).changed is False
    run.fire("bad", kind="job")
    assert run.send(JobCompleted(wait_id=old.id, attempt=1)).changed is False
    run.complete_job("bad", ok=True)
    assert run.variables["ok"] is True


# -- expression failures (T-1) ---------------------------------------------------------


def _gateway_branch(b: ProcessBuilder) -> None:
    b.exclusive_gateway("bad")
    b.end_event("x").end_event("y")
    b.flow("bad", "x", condition="=amount > 10")
    b.flow("bad", "y", condition="=amount < 0")


def _non_boolean_branch(b: ProcessBuilder) -> None:
    b.exclusive_gateway("bad", default="dflt")
    b.end_event("x").end_event("y")
    b.flow("bad", "x", condition="=amount")
    b.flow("bad", "y", id="dflt", default=True)


def _null_key_branch(b: ProcessBuilder) -> None:
    b.intermediate_catch_event("bad", message("paid", "=missing")).end_event("x")
    b.sequence("bad", "x")


def _mapping_branch(b: ProcessBuilder) -> None:
    b.service_task("bad", job_type="j", inputs=(IoMapping("=amount +* 1", "v"),))
    b.end_event("x")
    b.sequence("bad", "x")


def _output_mapping_branch(b: ProcessBuilder) -> None:
    b.script_task("bad", "=1", result_variable="r", outputs=(IoMapping("=r +* 2", "out"),))
    b.end_event("x")
    b.sequence("bad", "x")


@pytest.mark.parametrize(
    ("branch", "where"),
    [(_mapping_branch, "mapping to 'v'"), (_output_mapping_branch, "mapping to 'out'")],
)
def test_a_mapping_that_is_not_feel_is_refused_at_deploy(
    branch: Callable[[ProcessBuilder], None], where: str
) -> None:
    """Camunda 8 refuses a model whose expression does not parse; so do we, naming
    the element, the expression and the position, before any instance trips on it."""
    expected = rf"element 'bad': the {where} is not valid FEEL.*at position"
    with pytest.raises(InvalidModel, match=expected):
        with_sibling(branch)


@pytest.mark.parametrize(
    ("branch", "vars_", "cause_class"),
    [
        (_gateway_branch, {"amount": 5}, "NoFlowTaken"),
        (_non_boolean_branch, {"amount": 5}, "ExpressionError"),
        (_null_key_branch, {"amount": 5}, "ExpressionError"),
    ],
    ids=[
        "no-true-condition-no-default",
        "non-boolean-condition",
        "null-correlation-key",
    ],
)
def test_expression_failure_opens_incident_siblings_run(
    branch: Callable[[ProcessBuilder], None], vars_: dict[str, Any], cause_class: str
) -> None:
    run = Run(with_sibling(branch))
    run.start(vars_)
    incident = run.incident("bad")
    assert incident.cause_class == cause_class
    assert incident.state.value == "open"
    assert run.status == "active_incidents"
    assert run.token_nodes() == ["bad:incident", "side:waiting"]
    assert run.facts_of("Incident", action="raised", node="bad", cause_class=cause_class)
    run.complete_task("side")
    assert run.token_nodes() == ["bad:incident"]


# -- uncaught BPMN errors (T-2, T-2a) --------------------------------------------------


def test_uncaught_bpmn_error_from_a_job_opens_an_incident() -> None:
    run = Run(with_sibling(job_branch()))
    run.start()
    run.throw_from_job("bad", "NO_STOCK")
    incident = run.incident("bad")
    assert incident.cause_class == "UnhandledError"
    assert "NO_STOCK" in incident.cause
    assert run.status == "active_incidents"
    assert run.facts_of("Incident", action="raised")


def test_uncaught_error_end_event_fails_the_instance() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").parallel_gateway("fork")
    b.end_event("boom", error("FATAL")).user_task("side").end_event("e")
    b.sequence("s", "fork", "boom")
    b.sequence("fork", "side", "e")
    run = Run(b.build())
    run.start()
    assert run.status == "failed"
    assert run.cp.incidents == {}
    assert run.cp.waits == {} and run.cp.tokens == {}
    assert "FATAL" in (run.cp.failure or "")
    assert run.facts_of("Failed", error_code="FATAL")


# -- retry, resolve, drop (T-7, T-9, T-10, T-14) ---------------------------------------


def failing_script(**fields: Any) -> Callable[[ProcessBuilder], None]:
    """A script whose expression fails until ``fix`` is set."""

    def build(b: ProcessBuilder) -> None:
        b.script_task(
            "bad", "=if fix = null then null.x + 1 else fix", result_variable="r", **fields
        )
        b.exclusive_gateway("check", default="ok")
        b.end_event("x")
        b.sequence("bad", "check")
        b.flow("check", "x", id="ok", default=True)

    return build


def _failing_condition(b: ProcessBuilder) -> None:
    b.exclusive_gateway("bad")
    b.user_task("after").end_event("x")
    b.flow("bad", "after", condition="=fix")
    b.sequence("after", "x")


def test_retry_runs_a_fresh_token_from_the_failed_one_and_a_repeat_updates_the_incident() -> None:
    run = Run(with_sibling(_failing_condition))
    run.start({})
    incident = run.incident("bad")
    failed = run.cp.tokens[incident.token_id]
    run.advance(minutes=1).retry(incident.id)
    again = run.incident("bad")
    retried = run.cp.tokens[again.token_id]
    assert failed.id not in run.cp.tokens, "the failed token is replaced, not kept"
    assert retried.lineage == [*failed.lineage, failed.id], "lineage from the failed token"
    assert again.id == incident.id and again.attempts == 2
    assert again.last_at == T0 + timedelta(minutes=1) and again.first_at == T0
    assert run.facts_of("Incident", action="retried", incident=incident.id)
    side = run.wait("side")
    from dormant.engine_core.triggers import TaskCompleted

    run.send(TaskCompleted(wait_id=side.id, variables={"fix": True}))
    run.retry(incident.id)
    assert run.cp.incidents[incident.id].state.value == "retried"
    assert run.tokens("after")[0].lineage[-1] == retried.id, "the second retry's token"
    assert run.status == "active"
    run.complete_task("after")
    assert run.status == "completed"
    assert run.cp.incidents[incident.id].attempts == 2


def test_incident_snapshot_is_the_failing_attempts_visible_variables() -> None:
    run = Run(with_sibling(_failing_condition))
    run.start({"a": 1})
    incident = run.incident("bad")
    assert incident.data == {"a": 1}
    run.complete_task("side", a=2)
    assert run.incident("bad").data == {"a": 1}, "a later write does not alter the snapshot"
    run.retry(incident.id)
    assert run.incident("bad").data == {"a": 2}, "a failed retry refreshes it"


def test_resolve_continues_without_rerunning_the_node() -> None:
    run = Run(with_sibling(job_branch("1")))
    run.start()
    run.fail_job("bad")
    incident = run.incident("bad")
    step = run.resolve(incident.id)
    assert run.effects_of(DispatchJob, step) == [], "the job is not dispatched again"
    assert run.cp.incidents[incident.id].state.value == "resolved"
    assert run.facts_of("Incident", action="resolved", incident=incident.id)
    assert run.token_nodes() == ["side:waiting"]
    assert run.status == "active"
    run.complete_task("side")
    assert run.status == "completed"


def test_resolving_a_gateway_whose_conditions_still_fail_is_refused_and_changes_nothing() -> None:
    """A resolve leaves by the node's flows; a gateway still failing has none to take."""
    run = Run(with_sibling(_failing_condition))
    run.start({})
    incident = run.incident("bad")
    before = encode(run.cp)
    with pytest.raises(InvalidOperation) as refused:
        run.resolve(incident.id)
    text = str(refused.value)
    assert f"incident {incident.id} of instance i1 cannot be resolved" in text
    assert "retry it once the variables it needs are set, or drop it" in text
    assert encode(run.cp) == before


def test_drop_dead_letters_and_the_instance_never_completes_past_it() -> None:
    run = Run(with_sibling(job_branch("1")))
    run.start()
    run.fail_job("bad")
    incident = run.incident("bad")
    run.drop(incident.id)
    assert run.cp.incidents[incident.id].state.value == "dead_lettered"
    assert run.facts_of("Incident", action="dead-lettered", incident=incident.id)
    run.complete_task("side")
    assert run.status != "completed"
    assert run.tokens("bad"), "the dead-lettered token blocks completion"
    with pytest.raises(InvalidOperation):
        run.retry(incident.id)
    run.cancel()
    assert run.status == "terminated"
    assert run.cp.incidents[incident.id].state.value == "dead_lettered", "kept, with its history"


@pytest.mark.parametrize("op", [IncidentRetry, IncidentResolve, IncidentDrop])
def test_unknown_or_closed_incident_is_refused_and_nothing_changes(
    op: type[IncidentRetry | IncidentResolve | IncidentDrop],
) -> None:
    run = Run(with_sibling(job_branch("1")))
    run.start()
    run.fail_job("bad")
    incident = run.incident("bad")
    doc = encode(run.cp)
    with pytest.raises(UnknownIncident, match=incident.id):
        run.send(op(incident_id="i1.nope"))
    assert encode(run.cp) == doc
    run.resolve(incident.id)
    doc = encode(run.cp)
    with pytest.raises(InvalidOperation, match="resolved"):
        run.send(op(incident_id=incident.id))
    assert encode(run.cp) == doc


# -- scheduled retries (T-8, T-6b) -----------------------------------------------------


@pytest.mark.parametrize("where", ["node", "services"])
def test_retry_policy_schedules_a_deadline_that_fires_the_retry(where: str) -> None:
    policy = RetryPolicy(attempts=2, backoff_seconds=60)
    node_fields = {"retry_policy": policy} if where == "node" else {}
    services = Services(incident_retry_policy=policy) if where == "services" else None

    def build(b: ProcessBuilder) -> None:
        _failing_condition_fields(b, **node_fields)

    run = Run(with_sibling(build), services=services)
    run.start({})
    incident = run.incident("bad")
    assert incident.state.value == "retry_scheduled"
    assert incident.retry_at == T0 + timedelta(seconds=60)
    retry_wait = run.wait("bad", "retry")
    assert retry_wait.due_at == incident.retry_at and retry_wait.incident_id == incident.id
    assert run.facts_of("Incident", action="retry-scheduled")
    run.fire("bad", kind="retry")
    assert run.incident("bad").attempts == 2
    assert run.incident("bad").state.value == "retry_scheduled"
    run.fire("bad", kind="retry")
    final = run.incident("bad")
    assert final.attempts == 3 and final.state.value == "open" and final.retry_at is None
    assert not run.waits("bad", "retry"), "the policy is spent: no more deadlines"


def _failing_condition_fields(b: ProcessBuilder, **fields: Any) -> None:
    b.exclusive_gateway("bad", **fields)
    b.user_task("after").end_event("x")
    b.flow("bad", "after", condition="=fix")
    b.sequence("after", "x")


def test_no_policy_schedules_nothing() -> None:
    run = Run(with_sibling(_failing_condition))
    run.start({})
    assert run.incident("bad").retry_at is None
    assert not run.waits(kind="retry")


def test_manual_retry_withdraws_the_scheduled_one() -> None:
    policy = RetryPolicy(attempts=5, backoff_seconds=60)
    run = Run(with_sibling(lambda b: _failing_condition_fields(b, retry_policy=policy)))
    run.start({})
    incident = run.incident("bad")
    scheduled = run.wait("bad", "retry")
    run.complete_task("side", fix=True)
    run.retry(incident.id)
    assert run.cp.incidents[incident.id].state.value == "retried"
    assert scheduled.id not in run.cp.waits
    assert run.send(TimerFired(wait_id=scheduled.id), at=T0 + timedelta(hours=1)).changed is False


# -- boundaries across an open incident (T-11) -----------------------------------------


def boundary_over_job(interrupting: bool) -> ProcessDefinition:
    b = ProcessBuilder("p")
    b.start_event("s").service_task("bad", job_type="charge", job_retries="1").end_event("e")
    b.boundary_event(
        "remind",
        "bad",
        timer("R2/PT1H", kind=TimerKind.CYCLE),
        cancel_activity=interrupting,
    )
    b.user_task("reminded").end_event("re")
    b.sequence("s", "bad", "e")
    b.sequence("remind", "reminded", "re")
    return b.build()


def test_non_interrupting_boundary_fires_while_incident_open_and_retry_does_not_rearm() -> None:
    run = Run(boundary_over_job(interrupting=False))
    run.start()
    arm = run.wait("remind")
    run.fail_job("bad")
    incident = run.incident("bad")
    assert run.wait("remind").id == arm.id, "raising keeps the boundary armed"
    run.fire("remind")
    assert len(run.tokens("reminded")) == 1
    assert run.incident("bad").state.value == "open"
    after_fire = run.wait("remind")
    run.retry(incident.id)
    assert [w.id for w in run.waits("remind")] == [after_fire.id]
    assert run.waits("remind")[0].due_at == after_fire.due_at
    run.complete_job("bad")
    assert not run.waits("remind")


def test_retry_does_not_rearm_a_one_shot_boundary_that_already_fired() -> None:
    """Bug fixed: the retry decided "armed before?" by looking for boundary waits, so a
    one-shot timer that had fired (no wait left) was armed again and fired twice."""
    b = ProcessBuilder("p")
    b.start_event("s").service_task("bad", job_type="charge", job_retries="1").end_event("e")
    b.boundary_event("remind", "bad", timer("PT1H"), cancel_activity=False)
    b.user_task("reminded").end_event("re")
    b.sequence("s", "bad", "e")
    b.sequence("remind", "reminded", "re")
    run = Run(b.build())
    run.start()
    run.fail_job("bad")
    incident = run.incident("bad")
    run.fire("remind")
    assert not run.waits("remind") and len(run.tokens("reminded")) == 1
    run.retry(incident.id)
    assert not run.waits("remind"), "the retry armed the fired boundary again"
    run.fail_job("bad")
    assert run.incident("bad").attempts == 2 and not run.waits("remind")


def test_interrupting_boundary_overtakes_the_incident() -> None:
    run = Run(boundary_over_job(interrupting=True))
    run.start()
    run.fail_job("bad")
    incident = run.incident("bad")
    run.fire("remind")
    closed = run.cp.incidents[incident.id]
    assert closed.state.value == "overtaken"
    assert run.facts_of("Incident", action="overtaken", incident=incident.id)
    assert run.token_nodes() == ["reminded:waiting"]
    assert run.status == "active"


# -- incident facts (T-14) -------------------------------------------------------------


def test_incident_facts_carry_cause_class_never_payload() -> None:
    secret = "PAN-4111-1111"
    policy = RetryPolicy(attempts=1, backoff_seconds=5)
    run = Run(with_sibling(job_branch("1", retry_policy=policy)))
    run.start({"card": secret})
    run.fail_job("bad", f"declined {secret}", "Declined")
    incident = run.incident("bad")
    assert secret in incident.cause or secret in str(incident.data)
    run.fire("bad", kind="retry")
    assert run.effects_of(DispatchJob, run.last), "the retry dispatches the job again"
    run.complete_job("bad")
    actions = [f.details["action"] for f in run.facts_of("Incident")]
    assert actions == ["raised", "retry-scheduled", "retried", "retry-succeeded"]
    for fact in run.facts_of("Incident"):
        assert fact.details["cause_class"] == "Declined"
    for fact in run.facts:
        assert secret not in repr(fact)


def test_incident_at_an_end_event_resolves_when_its_retry_succeeds() -> None:
    """Bug fixed: an incident at a non-activity closed only via leave_activity, so a
    retried gateway or end event left it open for ever (status stuck at active_incidents)."""

    def build(b: ProcessBuilder) -> None:
        b.end_event("bad", message("notify", "=orderId"))

    run = Run(with_sibling(build))
    run.start({})
    incident = run.incident("bad")
    run.complete_task("side", orderId="o-9")
    assert run.status == "active_incidents"
    step = run.retry(incident.id)
    from dormant.engine_core.effects import ThrowMessage

    assert [(m.name, m.correlation_key) for m in run.effects_of(ThrowMessage, step)] == [
        ("notify", "o-9")
    ]
    assert run.cp.incidents[incident.id].state.value == "retried"
    assert run.status == "completed"


def test_incidents_of_an_instance_are_numbered_from_one() -> None:
    """``<instance>.i1`` is the first incident, ``.i2`` the second: ids drawn from the
    checkpoint's shared counter made the first one ``.i3`` (issue 28)."""
    b = ProcessBuilder("p")
    b.start_event("s").parallel_gateway("fork")
    b.service_task("a", job_type="charge", job_retries="1").end_event("a_end")
    b.service_task("b", job_type="charge", job_retries="1").end_event("b_end")
    b.sequence("s", "fork")
    b.sequence("fork", "a", "a_end")
    b.sequence("fork", "b", "b_end")
    run = Run(b.build())
    run.start({})
    run.fail_job("a")
    run.fail_job("b")
    assert sorted(run.cp.incidents) == ["i1.i1", "i1.i2"]
    assert run.incident("a").id == "i1.i1" and run.incident("b").id == "i1.i2"

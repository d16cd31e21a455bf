"""The foundation elements, one trigger at a time, every checkpoint through JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dormant.engine_core.builder import ProcessBuilder, message, terminate, timer
from dormant.engine_core.checkpoint import (
    CURRENT_SCHEMA,
    Checkpoint,
    InstanceStatus,
    decode,
    encode,
)
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.engine import apply, new_checkpoint
from dormant.engine_core.errors import CheckpointTooNew, CorruptCheckpoint, InvalidOperation
from dormant.engine_core.model import ProcessDefinition, TimerKind
from dormant.engine_core.triggers import (
    Cancel,
    JobCompleted,
    MessageReceived,
    Start,
    TaskCompleted,
    TimerFired,
)
from tests.core.enginekit import Run

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def started(definition: ProcessDefinition, variables: dict[str, Any] | None = None) -> Run:
    """An instance of ``definition``, started with ``variables`` (enginekit.Run checks
    every step: no mutation, revision + 1, checkpoint and trigger through JSON)."""
    run = Run(definition, instance_id="inst-1", now=T0)
    run.start(variables)
    return run


def single(build: Any) -> ProcessDefinition:
    b = ProcessBuilder("p")
    build(b)
    return b.build()


def test_none_start_to_none_end_completes_at_once() -> None:
    run = started(single(lambda b: b.start_event("s").end_event("e").sequence("s", "e")), {"a": 1})
    assert run.cp.status is InstanceStatus.COMPLETED
    assert run.cp.tokens == {} and run.cp.waits == {}
    assert run.variables == {"a": 1}
    assert [f.kind for f in run.last.facts][:3] == ["Started", "EndEventReached", "Completed"]


def test_user_task_waits_then_completes_with_variables() -> None:
    d = single(
        lambda b: (
            b.start_event("s")
            .user_task("review", name="Review", assignee="=owner")
            .end_event("e")
            .sequence("s", "review", "e")
        )
    )
    run = started(d, {"owner": "ann"})
    wait = run.cp.waits[run.wait(kind="user_task").id]
    assert (wait.node_id, wait.task_name, wait.assignee) == ("review", "Review", "ann")
    assert run.cp.status is InstanceStatus.ACTIVE
    run.send(TaskCompleted(wait_id=wait.id, variables={"approved": True}))
    assert run.status == "completed"
    assert run.variables["approved"] is True


def test_service_task_dispatches_a_job_and_merges_its_result() -> None:
    d = single(
        lambda b: (
            b.start_event("s")
            .service_task("charge", job_type="charge-card", job_retries="5")
            .end_event("e")
            .sequence("s", "charge", "e")
        )
    )
    run = started(d, {"amount": 10})
    (job,) = run.last.effects
    assert isinstance(job, DispatchJob)
    assert (job.job_type, job.attempt, job.variables) == ("charge-card", 1, {"amount": 10})
    assert job.idempotency_key == f"inst-1:{job.wait_id}:1"
    assert run.cp.waits[job.wait_id].retries_left == 4
    run.send(JobCompleted(wait_id=job.wait_id, variables={"receipt": "r-1"}))
    assert run.cp.status is InstanceStatus.COMPLETED
    assert run.variables == {"amount": 10, "receipt": "r-1"}


def test_job_type_as_expression() -> None:
    d = single(
        lambda b: (
            b.start_event("s")
            .service_task("t", job_type='="job-" + kind')
            .end_event("e")
            .sequence("s", "t", "e")
        )
    )
    run = started(d, {"kind": "x"})
    assert isinstance(run.last.effects[0], DispatchJob)
    assert run.last.effects[0].job_type == "job-x"


def test_result_of_an_earlier_attempt_is_stale() -> None:
    d = single(
        lambda b: (
            b.start_event("s")
            .service_task("t", job_type="j")
            .end_event("e")
            .sequence("s", "t", "e")
        )
    )
    run = started(d)
    wait_id = run.wait(kind="job").id
    before = run.cp
    step = run.send(JobCompleted(wait_id=wait_id, attempt=2))
    assert step.changed is False and step.facts[0].kind == "Stale"
    assert run.cp == before


def test_script_task_evaluates_feel_into_its_result_variable() -> None:
    d = single(
        lambda b: (
            b.start_event("s")
            .script_task("sum", script="=a + b", result_variable="total")
            .end_event("e")
            .sequence("s", "sum", "e")
        )
    )
    run = started(d, {"a": 2, "b": 3})
    assert run.variables["total"] == 5
    assert run.cp.status is InstanceStatus.COMPLETED


@pytest.mark.parametrize(
    ("amount", "expected_task"),
    [(150, "big"), (50, "small"), (100, "small")],
)
def test_exclusive_gateway_takes_first_true_condition_else_default(
    amount: int, expected_task: str
) -> None:
    def build(b: ProcessBuilder) -> None:
        b.start_event("s").exclusive_gateway("gw").user_task("big").user_task("small")
        b.end_event("e1").end_event("e2")
        b.sequence("s", "gw")
        b.flow("gw", "big", condition="=amount > 100")
        b.flow("gw", "small", default=True)
        b.sequence("big", "e1")
        b.sequence("small", "e2")

    run = started(single(build), {"amount": amount})
    (wait,) = run.cp.waits.values()
    assert wait.node_id == expected_task


def test_exclusive_gateway_with_no_flow_to_take_raises_an_incident() -> None:
    def build(b: ProcessBuilder) -> None:
        b.start_event("s").exclusive_gateway("gw").end_event("e")
        b.sequence("s", "gw")
        b.flow("gw", "e", condition="=x = 1")

    run = started(single(build), {"x": 2})
    assert run.cp.status is InstanceStatus.ACTIVE_INCIDENTS
    (incident,) = run.cp.incidents.values()
    assert incident.node_id == "gw" and incident.cause_class == "NoFlowTaken"


def test_parallel_gateway_forks_and_joins_one_token_per_flow() -> None:
    def build(b: ProcessBuilder) -> None:
        b.start_event("s").parallel_gateway("fork").user_task("a").user_task("b")
        b.parallel_gateway("join").end_event("e")
        b.sequence("s", "fork")
        b.flow("fork", "a")
        b.flow("fork", "b")
        b.flow("a", "join")
        b.flow("b", "join")
        b.sequence("join", "e")

    run = started(single(build))
    tasks = {w.node_id: w.id for w in run.cp.waits.values()}
    assert set(tasks) == {"a", "b"}
    forked = next(t for t in run.cp.tokens.values() if t.node_id == "b")
    assert len(forked.lineage) == 1
    run.send(TaskCompleted(wait_id=tasks["a"]))
    assert run.cp.status is InstanceStatus.ACTIVE
    assert [t.node_id for t in run.cp.tokens.values()].count("join") == 1
    run.send(TaskCompleted(wait_id=tasks["b"]))
    assert run.status == "completed"


def test_timer_catch_records_an_absolute_deadline_and_fires_once_due() -> None:
    d = single(
        lambda b: (
            b.start_event("s")
            .intermediate_catch_event("t", timer("PT5M"))
            .end_event("e")
            .sequence("s", "t", "e")
        )
    )
    run = started(d)
    wait = run.cp.waits[run.wait(kind="timer").id]
    assert wait.due_at == T0 + timedelta(minutes=5)
    early = run.send(TimerFired(wait_id=wait.id), at=T0 + timedelta(minutes=4))
    assert early.changed is False
    run.send(TimerFired(wait_id=wait.id), at=T0 + timedelta(minutes=5))
    assert run.cp.status is InstanceStatus.COMPLETED


def test_timer_date_and_expression() -> None:
    d = single(
        lambda b: (
            b.start_event("s")
            .intermediate_catch_event("t", timer("=deadline", TimerKind.DATE))
            .end_event("e")
            .sequence("s", "t", "e")
        )
    )
    run = started(d, {"deadline": "2026-12-01T10:00:00Z"})
    (wait,) = run.cp.waits.values()
    assert wait.due_at == datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def test_message_catch_correlates_by_key_and_binds_payload() -> None:
    d = single(
        lambda b: (
            b.start_event("s")
            .intermediate_catch_event("pay", message("payment-received", "=orderId"))
            .end_event("e")
            .sequence("s", "pay", "e")
        )
    )
    run = started(d, {"orderId": 42})
    wait = run.cp.waits[run.wait(kind="message").id]
    assert (wait.message_name, wait.correlation_key) == ("payment-received", "42")
    other = run.send(
        MessageReceived(wait_id=wait.id, name="payment-received", correlation_key="43")
    )
    assert other.changed is False
    run.send(
        MessageReceived(
            wait_id=wait.id, name="payment-received", correlation_key="42", variables={"paid": 1}
        )
    )
    assert run.cp.status is InstanceStatus.COMPLETED and run.variables["paid"] == 1


def test_null_correlation_key_is_an_incident_at_the_catch() -> None:
    d = single(
        lambda b: (
            b.start_event("s")
            .intermediate_catch_event("pay", message("m", "=orderId"))
            .end_event("e")
            .sequence("s", "pay", "e")
        )
    )
    run = started(d)
    (incident,) = run.cp.incidents.values()
    assert incident.node_id == "pay" and "correlation key" in incident.cause
    assert run.cp.waits == {}


def test_message_start_event_starts_at_the_named_node() -> None:
    def build(b: ProcessBuilder) -> None:
        b.start_event("by-message", message("order-placed")).user_task("t").end_event("e")
        b.sequence("by-message", "t", "e")

    d = single(build)
    cp = new_checkpoint(d, "i", 1, T0)
    step = apply(
        d, cp, Start(start_node_id="by-message", variables={"o": 1}, start_key="k1"), now=T0
    )
    assert step.checkpoint.start_key == "k1"
    assert [w.node_id for w in step.checkpoint.waits.values()] == ["t"]
    with pytest.raises(InvalidOperation, match="no none start event"):
        apply(d, cp, Start(), now=T0)


def test_terminate_end_ends_every_other_token() -> None:
    def build(b: ProcessBuilder) -> None:
        b.start_event("s").parallel_gateway("fork").user_task("slow").end_event("kill", terminate())
        b.end_event("e")
        b.sequence("s", "fork")
        b.flow("fork", "slow")
        b.flow("fork", "kill")
        b.sequence("slow", "e")

    run = started(single(build))
    assert run.cp.status is InstanceStatus.COMPLETED
    assert run.cp.waits == {} and run.cp.tokens == {}


def test_cancel_withdraws_everything_and_a_second_cancel_is_refused() -> None:
    d = single(lambda b: b.start_event("s").user_task("t").end_event("e").sequence("s", "t", "e"))
    run = started(d)
    run.send(Cancel())
    assert run.cp.status is InstanceStatus.TERMINATED and run.cp.waits == {}
    with pytest.raises(InvalidOperation, match="terminated"):
        apply(d, run.cp, Cancel(), now=T0)


def test_a_trigger_after_the_end_is_stale() -> None:
    d = single(lambda b: b.start_event("s").user_task("t").end_event("e").sequence("s", "t", "e"))
    run = started(d)
    wait_id = run.wait(kind="user_task").id
    run.send(TaskCompleted(wait_id=wait_id))
    again = run.send(TaskCompleted(wait_id=wait_id))
    assert again.changed is False


def test_apply_does_not_mutate_its_input() -> None:
    d = single(lambda b: b.start_event("s").user_task("t").end_event("e").sequence("s", "t", "e"))
    run = started(d)
    before = decode(encode(run.cp))
    apply(d, run.cp, TaskCompleted(wait_id=run.wait(kind="user_task").id), now=T0)
    assert run.cp == before


# -- the checkpoint document -----------------------------------------------------------


def test_checkpoint_round_trips_through_json() -> None:
    d = single(
        lambda b: (
            b.start_event("s")
            .intermediate_catch_event("t", timer("PT1H"))
            .end_event("e")
            .sequence("s", "t", "e")
        )
    )
    run = started(d, {"nested": {"list": [1, 2.5, None, "x"]}})
    raw = json.dumps(encode(run.cp))
    assert decode(raw) == run.cp
    assert json.loads(raw)["schema"] == CURRENT_SCHEMA


def test_checkpoint_schema_is_an_upper_bound() -> None:
    cp = new_checkpoint(
        single(lambda b: b.start_event("s").end_event("e").sequence("s", "e")), "i", 1, T0
    )
    doc = encode(cp)
    assert isinstance(decode(doc), Checkpoint)  # every schema from 1 up to current decodes
    with pytest.raises(CheckpointTooNew, match=f"schema {CURRENT_SCHEMA + 1}.*upgrade dormant"):
        decode({**doc, "schema": CURRENT_SCHEMA + 1})
    for broken in ({**doc, "schema": 0}, {**doc, "schema": "1"}, "not json", [1]):
        with pytest.raises(CorruptCheckpoint):
            decode(broken)  # type: ignore[arg-type]


def test_every_older_schema_walks_up_to_the_current_one() -> None:
    """A document stored by any earlier schema decodes, and is written back as current."""
    d = single(lambda b: b.start_event("s").user_task("t").end_event("e").sequence("s", "t", "e"))
    run = started(d, {"n": 1})
    current = encode(run.cp)
    for schema in range(1, CURRENT_SCHEMA):
        walked = decode({**current, "schema": schema})
        assert walked == run.cp
        assert encode(walked)["schema"] == CURRENT_SCHEMA


def test_facts_never_carry_variable_values() -> None:
    d = single(lambda b: b.start_event("s").user_task("t").end_event("e").sequence("s", "t", "e"))
    secret = "4111-1111-1111-1111"
    run = started(d, {"card": secret})
    run.send(TaskCompleted(wait_id=run.wait(kind="user_task").id, variables={"pin": secret}))
    assert secret not in json.dumps([f.details for f in run.last.facts])


def test_hydrated_and_dehydrated_facts_every_trigger() -> None:
    d = single(
        lambda b: (
            b.start_event("s")
            .user_task("t")
            .intermediate_catch_event("w", timer("PT1M"))
            .end_event("e")
            .sequence("s", "t", "w", "e")
        )
    )
    run = started(d)
    facts = {f.kind: f.details for f in run.last.facts}
    assert facts["Dehydrated"] == {"waits": 1, "user_task": 1}
    run.send(TaskCompleted(wait_id=run.wait(kind="user_task").id))
    facts = {f.kind: f.details for f in run.last.facts}
    assert facts["Hydrated"]["trigger"] == "task_completed"
    assert facts["Hydrated"]["outcome"] == "continued"
    assert facts["Dehydrated"] == {"waits": 1, "timer": 1}


def test_a_redelivered_start_is_stale_and_changes_nothing() -> None:
    d = single(lambda b: b.start_event("s").user_task("t").end_event("e").sequence("s", "t", "e"))
    run = started(d, {"a": 1})
    step = run.start({"a": 2})
    assert not step.changed and step.effects == ()
    assert [(f.kind, f.details) for f in step.facts] == [
        ("Stale", {"trigger": "start", "reason": "already started"})
    ]
    assert run.variables == {"a": 1}

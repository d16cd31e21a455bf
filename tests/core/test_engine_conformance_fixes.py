"""Engine fixes found by the Camunda 8 conformance run (tests/integration/
test_conformance_camunda8.py), each pinned here in the pure core."""

from __future__ import annotations

from dormant.engine_core.builder import ProcessBuilder, message, timer
from dormant.engine_core.model import ProcessDefinition
from tests.core.enginekit import Run


def _two_ends() -> ProcessDefinition:
    b = ProcessBuilder("two-ends")
    b.start_event("s").exclusive_gateway("g").end_event("a").end_event("b")
    b.sequence("s", "g").flow("g", "a", condition="=x = 1").flow("g", "b", default=True)
    return b.build()


def test_the_end_event_reached_is_in_the_history() -> None:
    """A completed instance has no tokens left: only the fact says which end it took."""
    run = Run(_two_ends())
    run.start({"x": 2})
    assert run.status == "completed"
    assert [f.details["node"] for f in run.facts_of("EndEventReached")] == ["b"]
    other = Run(_two_ends(), instance_id="i2")
    other.start({"x": 1})
    assert [f.details["node"] for f in other.facts_of("EndEventReached")] == ["a"]


def _receive_with_timeout() -> ProcessDefinition:
    """ticket-booking / customer-scoring: a keyed receive task with a timer boundary."""
    b = ProcessBuilder("booking")
    b.start_event("s").receive_task("wait", "paid", "=paymentRequestId").end_event("ok")
    b.boundary_event("late", "wait", timer("PT30S")).end_event("cancelled")
    b.sequence("s", "wait", "ok").sequence("late", "cancelled")
    return b.build()


def test_failed_activation_arms_no_boundary() -> None:
    """A null correlation key fails the receive task's activation: an incident there,
    and no boundary timer that would later carry the token past it (Camunda 8 opens an
    element's subscriptions together, after its expressions evaluated)."""
    run = Run(_receive_with_timeout())
    run.start()
    assert run.incident("wait").cause_class == "ExpressionError"
    assert run.waits() == []
    run.advance(minutes=5)
    assert run.status == "active_incidents"
    assert [t.node_id for t in run.tokens()] == ["wait"]


def test_retry_after_failed_activation_arms_the_boundaries() -> None:
    run = Run(_receive_with_timeout())
    run.start()
    inc = run.incident("wait")
    run.cp.scopes["s0"].variables["paymentRequestId"] = "p-1"  # the operator fixed the data
    run.retry(inc.id)
    assert sorted((w.node_id, w.kind.value) for w in run.waits()) == [
        ("late", "timer"),
        ("wait", "message"),
    ]


def test_a_job_incident_keeps_its_boundary_armed() -> None:
    """Only ACTIVATION failures un-arm: a job that failed after activation keeps its
    timeout boundary, which may still interrupt the incident (docs/incidents.md)."""
    b = ProcessBuilder("job")
    b.start_event("s").service_task("charge", "charge", job_retries="1").end_event("ok")
    b.boundary_event("late", "charge", timer("PT1H")).end_event("timeout")
    b.sequence("s", "charge", "ok").sequence("late", "timeout")
    run = Run(b.build())
    run.start()
    run.fail_job("charge")
    assert run.incident("charge")
    assert [w.node_id for w in run.waits()] == ["late"]


def _order_with_duplicate_guard() -> ProcessDefinition:
    """c8-benchmark msg_process: a keyed non-interrupting message event sub-process."""
    b = ProcessBuilder("order")
    b.start_event("s").user_task("work").end_event("e").sequence("s", "work", "e")
    with b.event_sub_process("dup"):
        b.start_event("again", message("ORDER", "=orderId"), is_interrupting=False)
        b.end_event("dup_end").sequence("again", "dup_end")
    return b.build()


def test_event_sub_process_subscription_failing_at_start_is_an_incident() -> None:
    """orderId unset: the event sub-process cannot subscribe (N3). That is an incident
    at the start event, not an exception out of ``apply``."""
    run = Run(_order_with_duplicate_guard())
    run.start()
    assert run.status == "active_incidents"
    assert run.incident("s").cause_class == "ExpressionError"
    assert run.waits() == []


def test_event_sub_process_subscribes_at_start_and_retry_resubscribes() -> None:
    ok = Run(_order_with_duplicate_guard())
    ok.start({"orderId": "o-1"})
    assert sorted(w.node_id for w in ok.waits()) == ["again", "work"]
    run = Run(_order_with_duplicate_guard(), instance_id="i2")
    run.start()
    run.cp.scopes["s0"].variables["orderId"] = "o-2"  # the operator fixed the data
    run.retry(run.incident("s").id)
    assert sorted(w.node_id for w in run.waits()) == ["again", "work"]

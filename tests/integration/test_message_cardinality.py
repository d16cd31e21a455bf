"""Message cardinality as Zeebe documents it, on both shapes with a real worker: a
published message correlates at most once per process id (the first matching
subscription), every other process gets it too, a message start starts at most one
instance per process id, and a signal still reaches every holder."""

from __future__ import annotations

import time

import pytest

from tests.integration.conftest import Stack, wait_for
from tests.integration.test_breadth import message_def, process

pytestmark = pytest.mark.integration


def catcher(key: str, message: str) -> str:
    return process(
        key,
        '<bpmn:startEvent id="s"/><bpmn:intermediateCatchEvent id="wait">'
        '<bpmn:messageEventDefinition messageRef="m"/></bpmn:intermediateCatchEvent>'
        '<bpmn:endEvent id="e"/>',
        [("s", "wait"), ("wait", "e")],
        extra=message_def("m", message),
    )


def test_a_message_reaches_one_instance_per_process_and_every_process(
    shared_stack: Stack,
) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(catcher("mc-orders", "mc-paid"))
    c.deploy(catcher("mc-audit", "mc-paid"))
    first = c.start("mc-orders", {"orderId": "o-1"})
    wait_for(lambda: c.instance(first).waits, what="the first order's wait")
    second = c.start("mc-orders", {"orderId": "o-1"})
    audit = c.start("mc-audit", {"orderId": "o-1"})
    for iid in (second, audit):
        wait_for(lambda iid=iid: c.instance(iid).waits, what="the message wait")

    c.send_message("mc-paid", "o-1", {"paid": True})
    assert stack.wait_status(first, "completed").variables["paid"] is True
    assert stack.wait_status(audit, "completed").variables["paid"] is True
    time.sleep(1.0)
    assert c.instance(second).status == "active", "one instance per process id"
    # A second message goes to the instance still waiting.
    c.send_message("mc-paid", "o-1", {"paid": "again"})
    assert stack.wait_status(second, "completed").variables["paid"] == "again"


def test_a_buffered_message_reaches_each_process_once(shared_stack: Stack) -> None:
    """A message with a TTL stays buffered whether or not it was taken at publish: a
    subscription opened later takes it if its process has not had it yet."""
    stack, c = shared_stack, shared_stack.client
    c.deploy(catcher("mb-orders", "mb-paid"))
    c.deploy(catcher("mb-audit", "mb-paid"))

    # Nobody waits at publish: the first instance of each process takes it.
    c.send_message("mb-paid", "o-1", {"paid": 1}, ttl=120)
    first = c.start("mb-orders", {"orderId": "o-1"})
    assert stack.wait_status(first, "completed").variables["paid"] == 1
    second = c.start("mb-orders", {"orderId": "o-1"})
    audit = c.start("mb-audit", {"orderId": "o-1"})
    assert stack.wait_status(audit, "completed").variables["paid"] == 1
    wait_for(lambda: c.instance(second).waits, what="the second order's wait")
    time.sleep(1.0)
    assert c.instance(second).status == "active", "its process had the message already"

    # Taken at publish by one process: another process's later instance still takes it.
    waiting = c.start("mb-orders", {"orderId": "o-2"})
    wait_for(lambda: c.instance(waiting).waits, what="the waiting order")
    c.send_message("mb-paid", "o-2", {"paid": 2}, ttl=120)
    assert stack.wait_status(waiting, "completed").variables["paid"] == 2
    late_audit = c.start("mb-audit", {"orderId": "o-2"})
    assert stack.wait_status(late_audit, "completed").variables["paid"] == 2
    late_order = c.start("mb-orders", {"orderId": "o-2"})
    wait_for(lambda: c.instance(late_order).waits, what="the late order's wait")
    time.sleep(1.0)
    assert c.instance(late_order).status == "active"


def test_a_message_start_starts_one_instance_per_process_beside_a_holder(
    shared_stack: Stack,
) -> None:
    stack, c = shared_stack, shared_stack.client
    starter = process(
        "mc-starter",
        '<bpmn:startEvent id="s1"><bpmn:messageEventDefinition messageRef="m"/>'
        '</bpmn:startEvent><bpmn:startEvent id="s2"><bpmn:messageEventDefinition '
        'messageRef="m2"/></bpmn:startEvent><bpmn:userTask id="t"/><bpmn:endEvent id="e"/>',
        [("s1", "t"), ("s2", "t"), ("t", "e")],
        extra=message_def("m", "mc-open") + message_def("m2", "mc-other"),
    )
    c.deploy(starter)
    c.deploy(catcher("mc-waiter", "mc-open"))
    waiter = c.start("mc-waiter", {"orderId": "o-9"})
    wait_for(lambda: c.instance(waiter).waits, what="the waiter's wait")
    c.send_message("mc-open", "o-9")
    stack.wait_status(waiter, "completed")
    started = wait_for(lambda: c.instances(key="mc-starter"), what="the started instance")
    time.sleep(1.0)
    assert len(c.instances(key="mc-starter")) == len(started) == 1


def test_a_signal_still_reaches_every_instance(shared_stack: Stack) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(
        process(
            "mc-sig",
            '<bpmn:startEvent id="s"/><bpmn:intermediateCatchEvent id="wait">'
            '<bpmn:signalEventDefinition signalRef="sig"/></bpmn:intermediateCatchEvent>'
            '<bpmn:endEvent id="e"/>',
            [("s", "wait"), ("wait", "e")],
            extra='<bpmn:signal id="sig" name="mc-go"/>',
        )
    )
    ids = [c.start("mc-sig") for _ in range(2)]
    for iid in ids:
        wait_for(lambda iid=iid: c.instance(iid).waits, what="the signal wait")
    c.signal("mc-go")
    for iid in ids:
        stack.wait_status(iid, "completed")

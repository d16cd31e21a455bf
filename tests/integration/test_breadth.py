"""The rest of BPMN on the real services: Client → broker → ``dormant worker`` (jobs in
``tests.integration.test_tasks_jobs``) → Store, with ``dormant beat`` scanning deadlines.

One worker and one beat per shape (``shared_stack``); every test uses its own process
keys, message and signal names. What is asserted is what a user sees: instance status,
variables, history facts, and the hold rows (user tasks, subscriptions, start timers).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import func, select

from dormant.persistence.store import NewInstance
from dormant.persistence.tables import start_timers, subscriptions
from tests.integration.conftest import Stack, wait_for

pytestmark = pytest.mark.integration

HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
    'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" '
    'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" id="d" targetNamespace="t">'
)


def process(key: str, body: str, flows: list[tuple[str, str]], extra: str = "") -> str:
    """A process of ``body`` (XML) wired by ``flows`` (source, target[, condition])."""
    xml = []
    for i, flow in enumerate(flows):
        source, target, *cond = flow
        if cond:
            xml.append(
                f'<bpmn:sequenceFlow id="f{i}" sourceRef="{source}" targetRef="{target}">'
                f'<bpmn:conditionExpression xsi:type="bpmn:tFormalExpression">{cond[0]}'
                "</bpmn:conditionExpression></bpmn:sequenceFlow>"
            )
        else:
            xml.append(f'<bpmn:sequenceFlow id="f{i}" sourceRef="{source}" targetRef="{target}"/>')
    return (
        f'{HEAD}<bpmn:process id="{key}" isExecutable="true">{body}{"".join(xml)}'
        f"</bpmn:process>{extra}</bpmn:definitions>"
    )


def job(node_id: str, job_type: str, inner: str = "", attrs: str = "") -> str:
    return (
        f'<bpmn:serviceTask id="{node_id}"{attrs}><bpmn:extensionElements>'
        f'<zeebe:taskDefinition type="{job_type}" retries="1"/>'
        f"</bpmn:extensionElements>{inner}</bpmn:serviceTask>"
    )


def message_def(ref: str, name: str, key: str = "=orderId") -> str:
    return (
        f'<bpmn:message id="{ref}" name="{name}"><bpmn:extensionElements>'
        f'<zeebe:subscription correlationKey="{key}"/></bpmn:extensionElements></bpmn:message>'
    )


def facts(stack: Stack, iid: str, kind: str) -> list[dict[str, Any]]:
    return [f.details for f in stack.client.history(iid) if f.kind == kind]


def ended_at(stack: Stack, iid: str) -> list[str]:
    return [d["node"] for d in facts(stack, iid, "EndEventReached")]


def children(stack: Stack, parent: str, key: str) -> list[Any]:
    return [i for i in stack.client.instances(key=key) if i.parent_instance_id == parent]


def count(stack: Stack, table: Any, *where: Any) -> int:
    with stack.client._store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar())


# -- call activity ------------------------------------------------------------------------


def call_parent(key: str, child: str) -> str:
    return process(
        key,
        '<bpmn:startEvent id="s"/>'
        f'<bpmn:callActivity id="call"><bpmn:extensionElements>'
        f'<zeebe:calledElement processId="{child}"/></bpmn:extensionElements>'
        '</bpmn:callActivity><bpmn:endEvent id="e"/>',
        [("s", "call"), ("call", "e")],
    )


def child_with(key: str, node: str) -> str:
    return process(
        key,
        f'<bpmn:startEvent id="s"/>{node}<bpmn:endEvent id="ce"/>',
        [("s", "work"), ("work", "ce")],
    )


def test_call_activity_merges_the_child_result_into_the_parent(shared_stack: Stack) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(child_with("ca-child", job("work", "test-double")))
    c.deploy(call_parent("ca-parent", "ca-child"))
    pid = c.start("ca-parent", {"n": 21})
    parent = stack.wait_status(pid, "completed")
    assert parent.variables["doubled"] == 42 and parent.variables["n"] == 21
    [child] = children(stack, pid, "ca-child")
    assert child.status == "completed" and child.variables["doubled"] == 42
    # The child is its own instance with its own history: the job ran there.
    assert [d["node"] for d in facts(stack, child.id, "JobDispatched")] == ["work"]
    assert facts(stack, pid, "JobDispatched") == []
    assert ended_at(stack, pid) == ["e"]


def test_cancelling_the_parent_cancels_the_child(shared_stack: Stack) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(child_with("cc-child", '<bpmn:userTask id="work" name="Pack"/>'))
    c.deploy(call_parent("cc-parent", "cc-child"))
    pid = c.start("cc-parent")
    child = wait_for(lambda: children(stack, pid, "cc-child"), what="the child instance")[0]
    wait_for(lambda: c.user_tasks(child.id), what="the child's user task")
    c.cancel(pid)
    stack.wait_status(pid, "terminated")
    stack.wait_status(child.id, "terminated")
    assert c.user_tasks(child.id) == []  # the child's hold row went with it


def test_child_failure_is_an_incident_at_the_call_activity_and_retry_runs_a_new_child(
    shared_stack: Stack,
) -> None:
    """The child fails (its job's retries are used up); the incident is the caller's,
    at the call activity. Deploying a fixed child and retrying runs a NEW child on the
    latest version (version binding: latest deployed), and the parent completes."""
    stack, c = shared_stack, shared_stack.client
    assert c.deploy(child_with("cf-child", job("work", "test-fail"))).version == 1
    c.deploy(call_parent("cf-parent", "cf-child"))
    pid = c.start("cf-parent", {"n": 4})
    parent = stack.wait_status(pid, "active_incidents")
    [incident] = parent.incidents
    assert incident.node_id == "call" and incident.cause_class == "ChildFailed"
    [first] = children(stack, pid, "cf-child")
    assert first.status == "failed" and first.incidents == []
    assert c.incidents(first.id) == []  # the incident is only the caller's
    assert c.deploy(child_with("cf-child", job("work", "test-double"))).version == 2
    c.retry_incident(incident.id)
    parent = stack.wait_status(pid, "completed")
    assert parent.variables["doubled"] == 8
    retried = [i for i in children(stack, pid, "cf-child") if i.id != first.id]
    assert [(i.status, i.version) for i in retried] == [("completed", 2)]
    assert c.incident(incident.id).state == "retried"


def test_calling_an_undeployed_process_is_an_incident_healed_by_deploy_and_retry(
    shared_stack: Stack,
) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(call_parent("cu-parent", "cu-child"))
    pid = c.start("cu-parent", {"n": 1})
    [incident] = stack.wait_status(pid, "active_incidents").incidents
    assert (incident.node_id, incident.cause_class) == ("call", "UnknownProcess")
    assert "cu-child" in incident.cause
    assert children(stack, pid, "cu-child") == []
    c.deploy(child_with("cu-child", job("work", "test-double")))
    c.retry_incident(incident.id)
    assert stack.wait_status(pid, "completed").variables["doubled"] == 2


# -- multi-instance -----------------------------------------------------------------------


def multi_instance(key: str, sequential: bool) -> str:
    loop = (
        f'<bpmn:multiInstanceLoopCharacteristics isSequential="{str(sequential).lower()}">'
        '<bpmn:extensionElements><zeebe:loopCharacteristics inputCollection="=items" '
        'inputElement="n" outputCollection="results" outputElement="=doubled"/>'
        "</bpmn:extensionElements></bpmn:multiInstanceLoopCharacteristics>"
    )
    return process(
        key,
        '<bpmn:startEvent id="s"/>' + job("each", "test-double", loop) + '<bpmn:endEvent id="e"/>',
        [("s", "each"), ("each", "e")],
    )


@pytest.mark.parametrize("sequential", [False, True], ids=["parallel", "sequential"])
def test_multi_instance_runs_a_job_per_element_and_collects_in_input_order(
    shared_stack: Stack, sequential: bool
) -> None:
    stack, c = shared_stack, shared_stack.client
    key = f"mi-{'seq' if sequential else 'par'}"
    c.deploy(multi_instance(key, sequential))
    items = [5, 1, 4, 2, 3]
    iid = c.start(key, {"items": items})
    view = stack.wait_status(iid, "completed")
    assert view.variables["results"] == [2 * n for n in items]
    assert view.variables["items"] == items
    # One job (one attempt) per inner instance, each with its own wait.
    dispatched = facts(stack, iid, "JobDispatched")
    assert [(d["node"], d["attempt"]) for d in dispatched] == [("each", 1)] * len(items)
    assert "n" not in view.variables  # the input element is local to its inner instance


# -- errors and compensation ----------------------------------------------------------------


def test_error_thrown_by_a_job_is_caught_by_the_boundary_on_its_task(
    shared_stack: Stack,
) -> None:
    stack, c = shared_stack, shared_stack.client
    xml = process(
        "job-error",
        '<bpmn:startEvent id="s"/>'
        + job("charge", "test-bpmn-error-code")
        + '<bpmn:boundaryEvent id="declined" attachedToRef="charge">'
        '<bpmn:errorEventDefinition errorRef="err"/></bpmn:boundaryEvent>'
        '<bpmn:boundaryEvent id="any" attachedToRef="charge">'
        "<bpmn:errorEventDefinition/></bpmn:boundaryEvent>"
        '<bpmn:endEvent id="ok"/><bpmn:endEvent id="refused"/><bpmn:endEvent id="other"/>',
        [("s", "charge"), ("charge", "ok"), ("declined", "refused"), ("any", "other")],
        extra='<bpmn:error id="err" name="Declined" errorCode="card-declined"/>',
    )
    c.deploy(xml)
    by_code = c.start("job-error", {"code": "card-declined"})
    catch_all = c.start("job-error", {"code": "no-such-code"})
    assert stack.wait_status(by_code, "completed").incidents == []
    assert stack.wait_status(catch_all, "completed").incidents == []
    assert ended_at(stack, by_code) == ["refused"]
    assert ended_at(stack, catch_all) == ["other"]


def test_compensation_throw_runs_the_handler_of_the_completed_activity(
    shared_stack: Stack,
) -> None:
    stack, c = shared_stack, shared_stack.client
    xml = process(
        "compensate",
        '<bpmn:startEvent id="s"/>'
        + job("book", "test-double")
        + '<bpmn:boundaryEvent id="comp" attachedToRef="book">'
        "<bpmn:compensateEventDefinition/></bpmn:boundaryEvent>"
        + job("unbook", "test-undo", attrs=' isForCompensation="true"')
        + '<bpmn:association id="a1" associationDirection="One" sourceRef="comp" '
        'targetRef="unbook"/>'
        '<bpmn:userTask id="decide" name="Keep the booking?"/>'
        '<bpmn:intermediateThrowEvent id="undo"><bpmn:compensateEventDefinition/>'
        '</bpmn:intermediateThrowEvent><bpmn:endEvent id="e"/>',
        [("s", "book"), ("book", "decide"), ("decide", "undo"), ("undo", "e")],
    )
    c.deploy(xml)
    iid = c.start("compensate", {"n": 3})
    [task] = wait_for(lambda: c.user_tasks(iid), what="the decision task")
    # The handler has not run: a completed activity is only in the ledger.
    assert "undone" not in c.instance(iid).variables
    c.complete_task(task.id)
    view = stack.wait_status(iid, "completed")
    assert view.variables["undone"] == 6
    assert facts(stack, iid, "Compensating") == [{"node": "undo", "handlers": 1}]
    assert [d["node"] for d in facts(stack, iid, "JobDispatched")] == ["book", "unbook"]


# -- inclusive gateway --------------------------------------------------------------------


def test_inclusive_join_waits_for_exactly_the_branches_taken(shared_stack: Stack) -> None:
    stack, c = shared_stack, shared_stack.client
    xml = process(
        "inclusive",
        '<bpmn:startEvent id="s"/><bpmn:inclusiveGateway id="fork"/>'
        '<bpmn:userTask id="a" name="A"/>'
        '<bpmn:intermediateCatchEvent id="b"><bpmn:timerEventDefinition>'
        "<bpmn:timeDuration>PT1S</bpmn:timeDuration></bpmn:timerEventDefinition>"
        "</bpmn:intermediateCatchEvent>"
        + job("c", "test-double")
        + '<bpmn:inclusiveGateway id="join"/><bpmn:endEvent id="e"/>',
        [
            ("s", "fork"),
            ("fork", "a", "=takeA"),
            ("fork", "b", "=takeB"),
            ("fork", "c", "=takeC"),
            ("a", "join"),
            ("b", "join"),
            ("c", "join"),
            ("join", "e"),
        ],
    )
    c.deploy(xml)
    iid = c.start("inclusive", {"takeA": True, "takeB": True, "takeC": False, "n": 1})
    [task] = wait_for(lambda: c.user_tasks(iid), what="branch a")
    # Branch b's timer fires and reaches the join, which waits for branch a only.
    wait_for(
        lambda: any(t.node_id == "join" for t in c.instance(iid).tokens),
        timeout=15,
        what="branch b at the join",
    )
    time.sleep(0.5)
    view = c.instance(iid)
    assert view.status == "active" and ended_at(stack, iid) == []
    c.complete_task(task.id, {"a": "done"})
    view = stack.wait_status(iid, "completed")
    assert ended_at(stack, iid) == ["e"]  # joined once: one token reached the end
    assert facts(stack, iid, "JobDispatched") == []  # branch c was not taken
    assert "doubled" not in view.variables


# -- timer start with a cycle -------------------------------------------------------------


def test_timer_start_cycle_starts_two_instances_then_stops(shared_stack: Stack) -> None:
    stack, c = shared_stack, shared_stack.client
    xml = process(
        "cycle",
        '<bpmn:startEvent id="ts"><bpmn:timerEventDefinition>'
        "<bpmn:timeCycle>R2/PT1S</bpmn:timeCycle></bpmn:timerEventDefinition>"
        '</bpmn:startEvent><bpmn:endEvent id="e"/>',
        [("ts", "e")],
    )
    c.deploy(xml)
    assert count(stack, start_timers, start_timers.c.key == "cycle") == 1
    wait_for(lambda: len(c.instances(key="cycle")) == 2, timeout=15, what="two timer starts")
    wait_for(
        lambda: count(stack, start_timers, start_timers.c.key == "cycle") == 0,
        what="the start timer row to go",
    )
    time.sleep(2.5)  # two more periods: no third instance
    started = c.instances(key="cycle")
    assert [i.status for i in started] == ["completed", "completed"]


# -- event sub-process --------------------------------------------------------------------


def test_interrupting_message_event_sub_process_cancels_the_main_flow(
    shared_stack: Stack,
) -> None:
    stack, c = shared_stack, shared_stack.client
    xml = process(
        "esp",
        '<bpmn:startEvent id="s"/><bpmn:userTask id="work" name="Work"/>'
        '<bpmn:endEvent id="e"/>'
        '<bpmn:subProcess id="cancelling" triggeredByEvent="true">'
        '<bpmn:startEvent id="cs" isInterrupting="true">'
        '<bpmn:messageEventDefinition messageRef="m"/></bpmn:startEvent>'
        '<bpmn:endEvent id="cancelled"/>'
        '<bpmn:sequenceFlow id="cf" sourceRef="cs" targetRef="cancelled"/></bpmn:subProcess>',
        [("s", "work"), ("work", "e")],
        extra=message_def("m", "esp-cancel"),
    )
    c.deploy(xml)
    iid = c.start("esp", {"orderId": "o-7"})
    wait_for(lambda: c.user_tasks(iid), what="the main flow's user task")
    assert count(stack, subscriptions, subscriptions.c.instance_id == iid) == 1
    c.send_message("esp-cancel", "o-7", {"reason": "customer"})
    view = stack.wait_status(iid, "completed")
    assert view.variables["reason"] == "customer"
    assert ended_at(stack, iid) == ["cancelled"]
    assert facts(stack, iid, "EventSubProcessStarted")
    assert c.user_tasks(iid) == []  # the interrupted user task's row is gone
    assert count(stack, subscriptions, subscriptions.c.instance_id == iid) == 0


# -- throwing messages and signals to other instances -----------------------------------


def test_message_throw_correlates_to_another_instance(shared_stack: Stack) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(
        process(
            "catcher",
            '<bpmn:startEvent id="s"/><bpmn:intermediateCatchEvent id="wait">'
            '<bpmn:messageEventDefinition messageRef="m"/></bpmn:intermediateCatchEvent>'
            '<bpmn:endEvent id="e"/>',
            [("s", "wait"), ("wait", "e")],
            extra=message_def("m", "mt-shipped"),
        )
    )
    c.deploy(
        process(
            "thrower",
            '<bpmn:startEvent id="s"/><bpmn:intermediateThrowEvent id="tell">'
            "<bpmn:extensionElements><zeebe:ioMapping>"
            '<zeebe:input source="=carrier" target="shippedBy"/>'
            "</zeebe:ioMapping></bpmn:extensionElements>"
            '<bpmn:messageEventDefinition messageRef="m"/></bpmn:intermediateThrowEvent>'
            '<bpmn:endEvent id="e"/>',
            [("s", "tell"), ("tell", "e")],
            extra=message_def("m", "mt-shipped"),
        )
    )
    mine = c.start("catcher", {"orderId": "o-1"})
    other = c.start("catcher", {"orderId": "o-2"})
    for iid in (mine, other):
        wait_for(lambda iid=iid: c.instance(iid).waits, what="the message wait")
    thrower = c.start("thrower", {"orderId": "o-1", "carrier": "dhl"})
    stack.wait_status(thrower, "completed")
    view = stack.wait_status(mine, "completed")
    assert view.variables == {"orderId": "o-1", "shippedBy": "dhl"}
    time.sleep(0.5)
    assert c.instance(other).status == "active"  # another key: not delivered


def test_signal_end_event_wakes_another_instances_signal_catch(shared_stack: Stack) -> None:
    stack, c = shared_stack, shared_stack.client
    signal = '<bpmn:signal id="sig" name="br-go"/>'
    c.deploy(
        process(
            "sig-catcher",
            '<bpmn:startEvent id="s"/><bpmn:intermediateCatchEvent id="wait">'
            '<bpmn:signalEventDefinition signalRef="sig"/></bpmn:intermediateCatchEvent>'
            '<bpmn:endEvent id="e"/>',
            [("s", "wait"), ("wait", "e")],
            extra=signal,
        )
    )
    c.deploy(
        process(
            "sig-thrower",
            '<bpmn:startEvent id="s"/><bpmn:endEvent id="go">'
            '<bpmn:signalEventDefinition signalRef="sig"/></bpmn:endEvent>',
            [("s", "go")],
            extra=signal,
        )
    )
    waiting = c.start("sig-catcher")
    wait_for(lambda: c.instance(waiting).waits, what="the signal wait")
    assert count(stack, subscriptions, subscriptions.c.instance_id == waiting) == 1
    thrower = c.start("sig-thrower")
    stack.wait_status(thrower, "completed")
    stack.wait_status(waiting, "completed")
    assert ended_at(stack, waiting) == ["e"]
    assert count(stack, subscriptions, subscriptions.c.instance_id == waiting) == 0


def test_outbox_trigger_ids_are_never_reused(store: Any, now: Any) -> None:
    """SQLite reuses a deleted row's id; the trigger id each effect is published under
    must not follow it, or the child drops its CancelChild as a duplicate of its start."""
    from dormant.engine_core.triggers import Cancel

    store.deployments.deploy(child_with("ids-child", '<bpmn:userTask id="work"/>'), now)
    store.deployments.deploy(call_parent("ids-parent", "ids-child"), now)
    started = store.start(NewInstance("ids-parent", "p-1", {}), now=now)
    [start_row] = store.outbox.outbox_rows(started.outbox_ids)
    store.outbox.mark_published(start_row.id)  # published: the row is deleted
    cancelled = store.apply("p-1", Cancel(), now)
    [cancel_row] = store.outbox.outbox_rows(cancelled.outbox_ids)
    assert (start_row.kind, cancel_row.kind) == ("StartChild", "CancelChild")
    assert start_row.payload["trigger_id"] == "p-1@1.0"
    assert cancel_row.payload["trigger_id"] == "p-1@2.0"


def test_version_tag_binding_starts_the_newest_tagged_version(store: Any, now: Any) -> None:
    from dormant.engine_core.errors import UnknownProcess

    def tagged(tag: str, end: str) -> str:
        xml = process(
            "vt-child", f'<bpmn:startEvent id="s"/><bpmn:endEvent id="{end}"/>', [("s", end)]
        )
        ext = f'<bpmn:extensionElements><zeebe:versionTag value="{tag}"/></bpmn:extensionElements>'
        return xml.replace('isExecutable="true">', f'isExecutable="true">{ext}', 1)

    store.deployments.deploy(tagged("v1", "a"), now)
    store.deployments.deploy(tagged("v1", "b"), now)
    store.deployments.deploy(tagged("v2", "c"), now)
    assert (
        store.start(NewInstance("vt-child", "i-1", {}, version_tag="v1"), now=now).instance_id
        == "i-1"
    )
    assert store.queries.instance("i-1").version == 2  # the newest of the two tagged v1
    with pytest.raises(UnknownProcess, match="'v3'"):
        store.start(NewInstance("vt-child", "i-2", {}, version_tag="v3"), now=now)

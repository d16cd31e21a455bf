"""Triggers through real processes: Client → broker → ``dormant worker`` → Store, with
``dormant beat`` scanning deadlines — on PostgreSQL + Redis and on the embedded default.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from dormant.engine_core.errors import (
    InvalidMessage,
    InvalidModel,
    InvalidVariables,
    UnknownProcess,
    UnsupportedElement,
)
from tests.integration.conftest import Stack, wait_for

pytestmark = pytest.mark.integration

HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
    'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" '
    'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" id="d" targetNamespace="t">'
)


def linear(key: str, *nodes: str, extra: str = "") -> str:
    """A process start → nodes... → end; each node is an XML element with id n1, n2, ..."""
    ids = ["start"] + [f"n{i + 1}" for i in range(len(nodes))] + ["end"]
    flows = "".join(
        f'<bpmn:sequenceFlow id="f{i}" sourceRef="{a}" targetRef="{b}"/>'
        for i, (a, b) in enumerate(itertools.pairwise(ids))
    )
    body = "".join(node.replace("{id}", f"n{i + 1}") for i, node in enumerate(nodes))
    return (
        f'{HEAD}<bpmn:process id="{key}" isExecutable="true"><bpmn:startEvent id="start"/>'
        f'{body}<bpmn:endEvent id="end"/>{flows}</bpmn:process>{extra}</bpmn:definitions>'
    )


TIMER = (
    '<bpmn:intermediateCatchEvent id="{id}"><bpmn:timerEventDefinition>'
    '<bpmn:timeDuration xsi:type="bpmn:tFormalExpression">PT1S</bpmn:timeDuration>'
    "</bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>"
)
MESSAGE = (
    '<bpmn:intermediateCatchEvent id="{id}">'
    '<bpmn:messageEventDefinition messageRef="m1"/></bpmn:intermediateCatchEvent>'
)
MESSAGE_DEF = (
    '<bpmn:message id="m1" name="paid"><bpmn:extensionElements>'
    '<zeebe:subscription correlationKey="=orderId"/></bpmn:extensionElements></bpmn:message>'
)
USER = '<bpmn:userTask id="{id}" name="Approve"/>'


def job(job_type: str) -> str:
    return (
        '<bpmn:serviceTask id="{id}"><bpmn:extensionElements>'
        f'<zeebe:taskDefinition type="{job_type}" retries="1"/>'
        "</bpmn:extensionElements></bpmn:serviceTask>"
    )


PARALLEL = (
    f'{HEAD}<bpmn:process id="fork" isExecutable="true"><bpmn:startEvent id="start"/>'
    '<bpmn:parallelGateway id="split"/><bpmn:parallelGateway id="join"/>'
    '<bpmn:serviceTask id="work"><bpmn:extensionElements>'
    '<zeebe:taskDefinition type="test-double"/></bpmn:extensionElements></bpmn:serviceTask>'
    + TIMER.replace("{id}", "wait")
    + '<bpmn:endEvent id="end"/>'
    '<bpmn:sequenceFlow id="a" sourceRef="start" targetRef="split"/>'
    '<bpmn:sequenceFlow id="b" sourceRef="split" targetRef="work"/>'
    '<bpmn:sequenceFlow id="c" sourceRef="split" targetRef="wait"/>'
    '<bpmn:sequenceFlow id="d1" sourceRef="work" targetRef="join"/>'
    '<bpmn:sequenceFlow id="e" sourceRef="wait" targetRef="join"/>'
    '<bpmn:sequenceFlow id="f" sourceRef="join" targetRef="end"/>'
    "</bpmn:process></bpmn:definitions>"
)


def test_timer_fires_through_the_deadline_table_and_beat(shared_stack: Stack) -> None:
    stack = shared_stack
    stack.client.deploy(linear("timer", TIMER))
    started = time.monotonic()
    iid = stack.client.start("timer")
    waiting = wait_for(
        lambda: [w for w in stack.client.instance(iid).waits if w.kind == "timer"],
        what="timer wait",
    )
    assert waiting[0].due_at is not None
    stack.wait_status(iid, "completed")
    assert time.monotonic() - started >= 1.0


def test_message_wakes_the_instance_with_its_key_only(shared_stack: Stack) -> None:
    stack = shared_stack
    c = stack.client
    c.deploy(linear("msg", MESSAGE, extra=MESSAGE_DEF))
    a = c.start("msg", {"orderId": "o-1"})
    b = c.start("msg", {"orderId": "o-2"})
    for iid in (a, b):
        wait_for(
            lambda iid=iid: any(w.kind == "message" for w in c.instance(iid).waits),
            what="message wait",
        )
    c.send_message("paid", "o-1", {"amount": 12})
    done = stack.wait_status(a, "completed")
    assert done.variables["amount"] == 12
    time.sleep(1.0)
    other = c.instance(b)
    assert other.status == "active"
    assert [w.correlation_key for w in other.waits] == ["o-2"]


def test_user_task_completes(shared_stack: Stack) -> None:
    stack = shared_stack
    c = stack.client
    c.deploy(linear("user", USER))
    iid = c.start("user", {"x": 1}, business_key="bk-1")
    tasks = wait_for(lambda: c.user_tasks(iid), what="user task")
    assert [(t.node_id, t.name) for t in tasks] == [("n1", "Approve")]
    c.complete_task(tasks[0].id, {"approved": True})
    view = stack.wait_status(iid, "completed")
    assert view.variables == {"x": 1, "approved": True}
    assert view.business_key == "bk-1"
    assert c.user_tasks(iid) == []


def test_job_result_lands_in_the_variables(shared_stack: Stack) -> None:
    stack = shared_stack
    c = stack.client
    c.deploy(linear("job", job("test-double")))
    iid = c.start("job", {"n": 21})
    view = stack.wait_status(iid, "completed")
    assert view.variables["doubled"] == 42
    # The job saw its idempotency key (instance:wait:attempt) in its headers.
    assert view.variables["job_key"].startswith(f"{iid}:")


def test_job_results_never_reach_the_worker_log(shared_stack: Stack) -> None:
    """Payload values stay out of logs, Celery's own success line included."""
    stack = shared_stack
    c = stack.client
    c.deploy(linear("job", job("test-double")))
    iid = c.start("job", {"n": 123457})
    view = stack.wait_status(iid, "completed")
    assert view.variables["doubled"] == 246914
    worker_log = "\n".join(p.text() for p in stack.procs if p.name.startswith("worker"))
    assert "test-double" in worker_log  # the job ran in this worker and was logged...
    assert "246914" not in worker_log and "123457" not in worker_log  # ...without payload


def test_job_bpmn_error_and_failure_open_incidents(shared_stack: Stack) -> None:
    stack = shared_stack
    c = stack.client
    c.deploy(linear("failing", job("test-fail")))
    iid = c.start("failing")
    view = stack.wait_status(iid, "active_incidents")
    assert view.incidents and "declined" in view.incidents[0].cause
    assert view.incidents[0].cause_class == "ValueError"


def test_parallel_fork_joins(shared_stack: Stack) -> None:
    stack = shared_stack
    c = stack.client
    c.deploy(PARALLEL)
    iid = c.start("fork", {"n": 2})
    view = stack.wait_status(iid, "completed")
    assert view.variables["doubled"] == 4


def test_worker_restart_between_two_triggers(bare_stack: Stack) -> None:
    s = bare_stack
    s.client.deploy(linear("twice", USER, USER.replace("Approve", "Ship")))
    worker, _ = s.worker_and_beat()
    iid = s.client.start("twice")
    first = wait_for(lambda: s.client.user_tasks(iid), what="first user task")
    worker.stop()
    s.client.complete_task(first[0].id, {"step": 1})  # queued while no worker runs
    time.sleep(0.5)
    assert s.client.instance(iid).waits[0].node_id == "n1"
    worker = s.worker("worker-again")
    second = wait_for(
        lambda: [t for t in s.client.user_tasks(iid) if t.node_id == "n2"], what="second user task"
    )
    worker.stop()
    s.worker("worker-third")
    s.client.complete_task(second[0].id, {"step": 2})
    view = s.wait_status(iid, "completed")
    assert view.variables == {"step": 2}


MALFORMED = "<bpmn:definitions"
UNSUPPORTED = (
    f'{HEAD}<bpmn:process id="odd" isExecutable="true"><bpmn:startEvent id="start"/>'
    '<bpmn:complexGateway id="cg"/><bpmn:sequenceFlow id="f" sourceRef="start" targetRef="cg"/>'
    "</bpmn:process></bpmn:definitions>"
)


def _nothing_written(s: Stack) -> None:
    from sqlalchemy import func, select

    from dormant.persistence.tables import definitions, inbox, instances

    with s.client._store.engine.connect() as conn:
        counts = {
            t.name: conn.execute(select(func.count()).select_from(t)).scalar()
            for t in (definitions, instances, inbox)
        }
    assert counts == {"definitions": 1, "instances": 0, "inbox": 0}, counts


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda c: c.deploy(MALFORMED), InvalidModel),
        (lambda c: c.deploy(UNSUPPORTED), UnsupportedElement),
        (lambda c: c.start("no-such-process"), UnknownProcess),
        (lambda c: c.send_message("", "k"), InvalidMessage),
        (lambda c: c.start("user", {"x": object()}), InvalidVariables),
        (lambda c: c.start("user", {"x": float("nan")}), InvalidVariables),
        (lambda c: c.start("user", ["not", "an", "object"]), InvalidVariables),
    ],
    ids=[
        "malformed-xml",
        "unsupported-element",
        "unknown-key",
        "empty-message-name",
        "object",
        "nan",
        "list",
    ],
)
def test_bad_input_is_refused_by_the_client_and_writes_nothing(
    bare_stack: Stack, call: Any, error: type[Exception]
) -> None:
    bare_stack.client.deploy(linear("user", USER))
    with pytest.raises(error) as raised:
        call(bare_stack.client)
    assert str(raised.value)
    _nothing_written(bare_stack)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("deploy", "{tmp}/bad.bpmn"), "bad.bpmn"),
        (("deploy", "{tmp}/odd.bpmn"), "cg"),
        (("start", "no-such-process"), "no-such-process"),
        (("send-message", "", "--key", "k"), "message name"),
        (("start", "user", "--var", "novalue"), "novalue"),
    ],
    ids=["malformed-xml", "unsupported-element", "unknown-key", "empty-message-name", "bad-var"],
)
def test_bad_input_is_refused_by_the_cli_and_writes_nothing(
    bare_stack: Stack, args: tuple[str, ...], needle: str
) -> None:
    bare_stack.client.deploy(linear("user", USER))
    (bare_stack.tmp / "bad.bpmn").write_text(MALFORMED)
    (bare_stack.tmp / "odd.bpmn").write_text(UNSUPPORTED)
    result = bare_stack.run_cli(*(a.replace("{tmp}", str(bare_stack.tmp)) for a in args))
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and needle in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    _nothing_written(bare_stack)


def test_inbox_sweep_republishes_a_trigger_whose_publish_was_lost(shared_stack: Stack) -> None:
    """A trigger made durable in the inbox but never published (a broker that lost it)
    is re-published by beat's sweep and applied once."""
    stack = shared_stack
    from dormant.persistence import inbox

    c = stack.client
    c.deploy(linear("user", USER))
    iid = "lost-start-0001"
    inbox.record(
        c._store.engine,
        "dormant.start",
        "trigger.start",
        {"key": "user", "instance_id": iid, "variables": {"x": 1}, "business_key": None},
    )
    view = wait_for(lambda: c.instance(iid), timeout=30, what="the swept start")
    assert view.status == "active" and view.variables == {"x": 1}

"""Ad-hoc sub-processes and execution listeners on the real services: Client → broker →
``dormant worker`` (jobs in ``tests.integration.test_tasks_jobs``) → Store, on both
shapes (PostgreSQL + Redis, and the embedded SQLite default)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import Stack
from tests.integration.test_breadth import ended_at, facts, job, process

pytestmark = pytest.mark.integration


def ad_hoc_model(key: str) -> str:
    """A job and a user task named by ``toRun``; the condition holds once the job has
    written ``doubled``, and the remaining user task is cancelled (the default)."""
    return process(
        key,
        '<bpmn:startEvent id="s"/>'
        '<bpmn:adHocSubProcess id="tools"><bpmn:extensionElements>'
        '<zeebe:adHoc activeElementsCollection="=toRun"/></bpmn:extensionElements>'
        f"{job('double', 'test-double')}"
        '<bpmn:userTask id="review" name="Review"/>'
        '<bpmn:completionCondition xsi:type="bpmn:tFormalExpression">'
        "=is defined(doubled) and doubled &gt; 0</bpmn:completionCondition>"
        "</bpmn:adHocSubProcess>"
        '<bpmn:endEvent id="e"/>',
        [("s", "tools"), ("tools", "e")],
    )


def test_ad_hoc_runs_the_named_elements_and_cancels_the_rest(shared_stack: Stack) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(ad_hoc_model("adhoc-tools"))
    iid = c.start("adhoc-tools", {"n": 5, "toRun": ["review", "double"]})
    done = stack.wait_status(iid, "completed")
    assert done.variables["doubled"] == 10
    assert c.user_tasks(iid) == []  # the review task was cancelled with its hold row
    assert [d["node"] for d in facts(stack, iid, "JobDispatched")] == ["double"]
    assert ended_at(stack, iid) == ["e"]


def test_ad_hoc_with_a_bad_collection_is_an_incident_healed_by_retry(
    shared_stack: Stack,
) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(ad_hoc_model("adhoc-bad"))
    iid = c.start("adhoc-bad", {"n": 2, "toRun": ["nope"]})
    view = stack.wait_status(iid, "active_incidents")
    [incident] = view.incidents
    assert incident.node_id == "tools"
    assert "activeElementsCollection" in incident.cause and "'nope'" in incident.cause
    # The operator fixes the data and retries: the collection is evaluated again.
    c.set_variables(iid, {"toRun": ["double"]}, retry_incidents=True)
    done = stack.wait_status(iid, "completed")
    assert done.variables["doubled"] == 4
    assert c.incident(incident.id).state == "retried"


def listener_model(key: str) -> str:
    """A service task whose start listeners set ``n`` (read by its job) and then run a
    job that fails until its flag file exists; an end listener audits the result."""
    listeners = (
        "<zeebe:executionListeners>"
        '<zeebe:executionListener eventType="start" type="test-listener-set-n"/>'
        '<zeebe:executionListener eventType="start" type="inc-flag" retries="1"/>'
        '<zeebe:executionListener eventType="end" type="test-listener-audit"/>'
        "</zeebe:executionListeners>"
    )
    return process(
        key,
        '<bpmn:startEvent id="s"/>'
        '<bpmn:serviceTask id="work"><bpmn:extensionElements>'
        f'<zeebe:taskDefinition type="test-double" retries="1"/>{listeners}'
        "</bpmn:extensionElements></bpmn:serviceTask>"
        '<bpmn:endEvent id="e"/>',
        [("s", "work"), ("work", "e")],
    )


def test_execution_listeners_set_what_the_element_reads_and_fail_into_an_incident(
    shared_stack: Stack, tmp_path: Path
) -> None:
    stack, c = shared_stack, shared_stack.client
    flag = tmp_path / f"listener-{stack.kind}"
    c.deploy(listener_model("listened"))
    iid = c.start("listened", {"n": 1, "flag": str(flag)})
    view = stack.wait_status(iid, "active_incidents")
    [incident] = view.incidents
    assert incident.node_id == "work"
    assert "start execution listener 'inc-flag' failed" in incident.cause
    assert facts(stack, iid, "JobDispatched")[-1]["job_type"] == "inc-flag"
    flag.touch()  # the operator's fix
    c.retry_incident(incident.id)
    done = stack.wait_status(iid, "completed")
    # The first listener set n = 7 locally; the task's job read it.
    assert done.variables["doubled"] == 14 and done.variables["n"] == 1
    assert done.variables["audited"] == 14  # the end listener saw the result
    listened = [d["job_type"] for d in facts(stack, iid, "ExecutionListener")]
    assert listened == ["test-listener-set-n", "inc-flag", "inc-flag", "test-listener-audit"]
    assert len(Path(f"{flag}.runs").read_text().splitlines()) == 2
    assert c.incident(incident.id).state == "retried"

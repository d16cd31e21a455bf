"""Ad-hoc sub-processes and execution listeners on the real services: Client → broker →
``dormant worker`` (jobs in ``tests.integration.test_tasks_jobs``) → Store, on both
shapes (PostgreSQL + Redis, and the embedded SQLite default)."""

from __future__ import annotations

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
    assert c.incident(incident.id).state == "resolved"

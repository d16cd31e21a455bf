"""The incidents projection follows the checkpoint in the same transaction, so an
operator finds any incident by id or filter, open or closed, without a scan."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from dormant.engine_core.errors import InvalidOperation, UnknownIncident
from dormant.engine_core.triggers import IncidentResolve, JobFailed, TaskCompleted
from dormant.persistence.store import NewInstance

MODEL = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
  xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">
  <bpmn:process id="charge" isExecutable="true">
    <bpmn:startEvent id="s"/>
    <bpmn:serviceTask id="job" name="Charge"><bpmn:extensionElements>
      <zeebe:taskDefinition type="charge-card" retries="1"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:userTask id="review"/>
    <bpmn:endEvent id="e"/>
    <bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="job"/>
    <bpmn:sequenceFlow id="f2" sourceRef="job" targetRef="review"/>
    <bpmn:sequenceFlow id="f3" sourceRef="review" targetRef="e"/>
  </bpmn:process>
  <bpmn:process id="gate" isExecutable="true">
    <bpmn:startEvent id="gs"/>
    <bpmn:exclusiveGateway id="gw"/>
    <bpmn:endEvent id="ge"/>
    <bpmn:sequenceFlow id="g1" sourceRef="gs" targetRef="gw"/>
    <bpmn:sequenceFlow id="g2" sourceRef="gw" targetRef="ge">
      <bpmn:conditionExpression>=amount &gt; 10</bpmn:conditionExpression>
    </bpmn:sequenceFlow>
  </bpmn:process>
</bpmn:definitions>"""


def test_incidents_are_found_by_filter_and_id_in_every_state(store: Any, now: datetime) -> None:
    store.deployments.deploy(MODEL, now)
    store.start(NewInstance("charge", "i-1", {}), now=now)
    store.start(NewInstance("charge", "i-2", {}), now=now)
    (job_wait,) = store.queries.checkpoint("i-1").waits
    store.apply("i-1", JobFailed(wait_id=job_wait, error="card declined"), now)
    (open_incident,) = store.queries.incidents(state="open")
    assert (open_incident.instance_id, open_incident.node_id) == ("i-1", "job")
    assert store.queries.incidents(key="charge", node_id="job") == [open_incident]
    assert store.queries.incidents(instance_id="i-2") == []
    store.apply("i-1", IncidentResolve(incident_id=open_incident.id), now)
    assert store.queries.incidents(state="open") == []
    assert store.queries.incident(open_incident.id).state == "resolved"
    (task,) = store.queries.user_tasks("i-1")
    _, wait_id = store.queries.task(task.id)
    store.apply("i-1", TaskCompleted(wait_id=wait_id), now)
    assert store.queries.instance("i-1").status == "completed"
    assert store.queries.incident(open_incident.id).state == "resolved"  # kept after the end
    with pytest.raises(UnknownIncident, match="no incident 'nope'"):
        store.queries.incident("nope")


def test_resolving_a_gateway_that_still_has_no_flow_changes_nothing(
    store: Any, now: datetime
) -> None:
    store.deployments.deploy(MODEL, now)
    store.start(NewInstance("gate", "g-1", {"amount": 1}), now=now)
    (incident,) = store.queries.incidents(instance_id="g-1")
    before = store.queries.checkpoint("g-1")
    with pytest.raises(InvalidOperation, match="cannot be resolved: no outgoing flow"):
        store.apply("g-1", IncidentResolve(incident_id=incident.id), now)
    assert store.queries.checkpoint("g-1") == before

"""Deployments and bindings on the real services (PostgreSQL + Redis and the embedded
default, a real worker): a call activity and a business rule task bound by
``deployment`` or ``versionTag`` run the version deployed with the caller (or tagged),
and a call activity whose child is missing is an incident with no boundary armed."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from dormant.persistence.instance_rows import checkpoint_of
from dormant.persistence.tables import deadlines, instances
from tests.integration.conftest import Stack, wait_for
from tests.integration.test_breadth import children, process

pytestmark = pytest.mark.integration


def script_child(key: str, value: str, tag: str | None = None) -> str:
    tagged = f'<bpmn:extensionElements><zeebe:versionTag value="{tag}"/></bpmn:extensionElements>'
    body = (
        '<bpmn:startEvent id="s"/>'
        '<bpmn:scriptTask id="work"><bpmn:extensionElements>'
        f'<zeebe:script expression="=&quot;{value}&quot;" resultVariable="which"/>'
        '</bpmn:extensionElements></bpmn:scriptTask><bpmn:endEvent id="ce"/>'
    )
    xml = process(key, body, [("s", "work"), ("work", "ce")])
    if tag:
        xml = xml.replace('isExecutable="true">', f'isExecutable="true">{tagged}', 1)
    return xml


def caller(
    key: str, child: str, binding: str = "latest", extra: str = "", boundary: str = ""
) -> str:
    return process(
        key,
        '<bpmn:startEvent id="s"/>'
        '<bpmn:callActivity id="call"><bpmn:extensionElements>'
        f'<zeebe:calledElement processId="{child}" bindingType="{binding}"{extra}/>'
        f"</bpmn:extensionElements></bpmn:callActivity>{boundary}"
        '<bpmn:endEvent id="e"/>' + ('<bpmn:endEvent id="late_end"/>' if boundary else ""),
        [("s", "call"), ("call", "e")] + ([("late", "late_end")] if boundary else []),
    )


DMN = """<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="https://www.omg.org/spec/DMN/20191111/MODEL/"
    xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="rates" name="rates" namespace="t">
  <decision id="{did}" name="Rate">
    <extensionElements><zeebe:versionTag value="{tag}"/></extensionElements>
    <literalExpression><text>{value}</text></literalExpression>
  </decision>
</definitions>"""


def rule_caller(key: str, did: str, binding: str, extra: str = "") -> str:
    return process(
        key,
        '<bpmn:startEvent id="s"/>'
        '<bpmn:businessRuleTask id="rate"><bpmn:extensionElements>'
        f'<zeebe:calledDecision decisionId="{did}" resultVariable="rate" '
        f'bindingType="{binding}"{extra}/>'
        '</bpmn:extensionElements></bpmn:businessRuleTask><bpmn:endEvent id="e"/>',
        [("s", "rate"), ("rate", "e")],
    )


def test_call_activity_bound_by_deployment_runs_the_child_deployed_with_it(
    shared_stack: Stack,
) -> None:
    stack, c = shared_stack, shared_stack.client
    first = c.deploy_all(
        caller("bd-parent", "bd-child", "deployment"), script_child("bd-child", "one")
    )
    assert {d.deployment_key for d in first} == {first[0].deployment_key}
    assert [(r.id, r.version) for r in first[0].resources] == [("bd-parent", 1), ("bd-child", 1)]
    assert c.deploy(script_child("bd-child", "two")).version == 2  # a later deployment
    c.deploy(caller("bd-latest", "bd-child"))
    bound = c.start("bd-parent")
    latest = c.start("bd-latest")
    assert stack.wait_status(bound, "completed").variables["which"] == "one"
    assert stack.wait_status(latest, "completed").variables["which"] == "two"
    assert [i.version for i in children(stack, bound, "bd-child")] == [1]
    shown = c.deployment(first[0].deployment_key)
    assert [(r.kind, r.id, r.version, r.created) for r in shown.resources] == [
        ("process", "bd-parent", 1, True),
        ("process", "bd-child", 1, True),
    ]


def test_call_activity_bound_by_version_tag(shared_stack: Stack) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(script_child("bt-child", "tagged", tag="stable"))
    c.deploy(script_child("bt-child", "newer", tag="next"))
    c.deploy(caller("bt-parent", "bt-child", "versionTag", ' versionTag="stable"'))
    pid = c.start("bt-parent")
    assert stack.wait_status(pid, "completed").variables["which"] == "tagged"


def test_decisions_bound_by_deployment_and_by_version_tag(shared_stack: Stack) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy_all(
        rule_caller("bdd-parent", "bdd-rate", "deployment"),
        DMN.format(did="bdd-rate", tag="a", value="10"),
    )
    c.deploy(DMN.format(did="bdd-rate", tag="b", value="20"))
    c.deploy(rule_caller("bdd-tagged", "bdd-rate", "versionTag", ' versionTag="a"'))
    c.deploy(rule_caller("bdd-latest", "bdd-rate", "latest"))
    results = {k: c.start(k) for k in ("bdd-parent", "bdd-tagged", "bdd-latest")}
    rates = {k: stack.wait_status(i, "completed").variables["rate"] for k, i in results.items()}
    assert rates == {"bdd-parent": 10, "bdd-tagged": 10, "bdd-latest": 20}
    missing = c.deploy(rule_caller("bdd-missing", "bdd-rate", "versionTag", ' versionTag="zz"'))
    [incident] = stack.wait_status(c.start(missing.key), "active_incidents").incidents
    assert (incident.node_id, incident.cause_class) == ("rate", "DecisionNotDeployed")


def checkpoint_waits(stack: Stack, instance_id: str) -> list[Any]:
    with stack.client._store.engine.connect() as conn:
        row = conn.execute(
            select(instances.c.id, instances.c.key, instances.c.checkpoint).where(
                instances.c.id == instance_id
            )
        ).one()
    return list(checkpoint_of(row).waits.values())


def deadline_rows(stack: Stack, instance_id: str) -> int:
    with stack.client._store.engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count())
                .select_from(deadlines)
                .where(deadlines.c.instance_id == instance_id)
            ).scalar_one()
        )


def test_missing_child_is_an_incident_with_no_armed_boundary(shared_stack: Stack) -> None:
    stack, c = shared_stack, shared_stack.client
    boundary = (
        '<bpmn:boundaryEvent id="late" attachedToRef="call"><bpmn:timerEventDefinition>'
        "<bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition>"
        "</bpmn:boundaryEvent>"
    )
    c.deploy(caller("mc-parent", "mc-child", boundary=boundary))
    pid = c.start("mc-parent")
    [incident] = stack.wait_status(pid, "active_incidents").incidents
    assert (incident.node_id, incident.cause_class) == ("call", "UnknownProcess")
    assert "mc-child" in incident.cause
    assert checkpoint_waits(stack, pid) == [], "no timer boundary, no call wait"
    assert deadline_rows(stack, pid) == 0, "no deadline row for the boundary"
    assert children(stack, pid, "mc-child") == []
    c.deploy(script_child("mc-child", "here"))
    c.retry_incident(incident.id)
    assert stack.wait_status(pid, "completed").variables["which"] == "here"
    wait_for(lambda: deadline_rows(stack, pid) == 0, what="no deadline left")

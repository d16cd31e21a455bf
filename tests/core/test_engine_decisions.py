"""Business rule tasks that call a DMN decision (``zeebe:calledDecision``), pure core.

The shell lends the latest deployed decisions as ``Services.decisions``; the task
evaluates inline and completes with ``{resultVariable: result}``. A missing decision
or a broken hit policy is an incident at the task (N5), and a retry once the decision
is there goes on.
"""

from __future__ import annotations

import dataclasses

import pytest

from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.dmn import Decision, read_dmn
from dormant.engine_core.engine import Services
from dormant.engine_core.errors import InvalidModel
from dormant.engine_core.model import ProcessDefinition
from tests.core.enginekit import Run

DMN = """<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="https://www.omg.org/spec/DMN/20191111/MODEL/" id="d" name="D"
             namespace="http://camunda.org/schema/1.0/dmn">
  <decision id="risk" name="Risk">
    <decisionTable id="t" hitPolicy="UNIQUE">
      <input id="i1" label="Amount">
        <inputExpression id="ie1" typeRef="number"><text>amount</text></inputExpression>
      </input>
      <output id="o1" name="level" typeRef="string"/>
      <output id="o2" name="review" typeRef="boolean"/>
      <rule id="r1">
        <inputEntry id="e1"><text>&lt; 1000</text></inputEntry>
        <outputEntry id="e2"><text>"low"</text></outputEntry>
        <outputEntry id="e3"><text>false</text></outputEntry>
      </rule>
      <rule id="r2">
        <inputEntry id="e4"><text>&gt;= 1000</text></inputEntry>
        <outputEntry id="e5"><text>"high"</text></outputEntry>
        <outputEntry id="e6"><text>true</text></outputEntry>
      </rule>
      <rule id="r3">
        <inputEntry id="e7"><text>&gt; 5000</text></inputEntry>
        <outputEntry id="e8"><text>"extreme"</text></outputEntry>
        <outputEntry id="e9"><text>true</text></outputEntry>
      </rule>
    </decisionTable>
  </decision>
</definitions>
"""


def process(task_extensions: str) -> ProcessDefinition:
    xml = f"""<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
                  xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="defs">
  <bpmn:process id="loan" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:businessRuleTask id="assess" name="Assess risk">
      <bpmn:extensionElements>{task_extensions}</bpmn:extensionElements>
    </bpmn:businessRuleTask>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="assess"/>
    <bpmn:sequenceFlow id="f2" sourceRef="assess" targetRef="end"/>
  </bpmn:process>
</bpmn:definitions>"""
    return read_bpmn(xml)[0]


CALLS_RISK = '<zeebe:calledDecision decisionId="risk" resultVariable="risk"/>'


def decisions() -> dict[str, Decision]:
    return {d.id: d for d in read_dmn(DMN)}


def test_the_reader_takes_decision_id_and_result_variable() -> None:
    node = process('<zeebe:calledDecision decisionId="=which" resultVariable="out"/>').node(
        "assess"
    )
    assert (node.decision_id, node.result_variable, node.job_type) == ("=which", "out", None)


@pytest.mark.parametrize(
    ("extensions", "message"),
    [
        ("", "neither a called decision"),
        ('<zeebe:calledDecision decisionId="risk"/>', "without a resultVariable"),
        (CALLS_RISK + '<zeebe:taskDefinition type="t"/>', "both a called decision and a job"),
        ('<zeebe:calledDecision decisionId="=1 +" resultVariable="r"/>', "not valid FEEL"),
    ],
)
def test_invalid_business_rule_tasks_are_refused(extensions: str, message: str) -> None:
    with pytest.raises(InvalidModel, match=message):
        process(extensions)


def test_decision_result_goes_into_the_result_variable() -> None:
    run = Run(process(CALLS_RISK), services=Services(decisions=decisions()))
    run.start({"amount": 200})
    assert run.status == "completed"
    assert run.variables["risk"] == {"level": "low", "review": False}
    assert run.effects == [], "a called decision is no job"


def test_output_mappings_apply_to_the_result() -> None:
    ext = CALLS_RISK + (
        '<zeebe:ioMapping><zeebe:output source="=risk.level" target="level"/></zeebe:ioMapping>'
    )
    run = Run(process(ext), services=Services(decisions=decisions()))
    run.start({"amount": 2000})
    assert run.status == "completed"
    assert run.variables["level"] == "high"


def test_decision_id_expression_is_evaluated() -> None:
    ext = '<zeebe:calledDecision decisionId="=table" resultVariable="r"/>'
    run = Run(process(ext), services=Services(decisions=decisions()))
    run.start({"table": "risk", "amount": 1})
    assert run.variables["r"] == {"level": "low", "review": False}


def test_undeployed_decision_is_an_incident_and_a_retry_after_deploy_succeeds() -> None:
    run = Run(process(CALLS_RISK))  # no decisions lent
    run.start({"amount": 200})
    assert run.status == "active_incidents"
    incident = run.incident("assess")
    assert incident.cause_class == "DecisionNotDeployed"
    assert "'risk'" in incident.cause and "deploy" in incident.cause

    run.services = Services(decisions=decisions())  # the shell now lends the deployed one
    run.retry(incident.id)
    assert run.status == "completed"
    assert run.variables["risk"]["level"] == "low"


def test_hit_policy_violation_is_a_decision_evaluation_incident() -> None:
    run = Run(process(CALLS_RISK), services=Services(decisions=decisions()))
    run.start({"amount": 9000})  # r2 and r3 both match a UNIQUE table
    assert run.status == "active_incidents"
    incident = run.incident("assess")
    assert incident.cause_class == "DecisionEvaluationError"
    assert "UNIQUE" in incident.cause


def test_other_services_settings_are_kept_when_decisions_are_lent() -> None:
    base = Services(default_job_retries=7)
    lent = dataclasses.replace(base, decisions=decisions())
    assert lent.default_job_retries == 7 and "risk" in lent.decisions

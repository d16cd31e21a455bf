"""DMN decisions through the Store, on SQLite and PostgreSQL: deploy a .dmn and a .bpmn,
run a business rule task, and heal an undeployed decision by deploying and retrying.

What is asserted is the shell's half: the decisions table versions by content, the
Store lends the LATEST decisions to each step (seen by the next trigger after a
deploy, with no restart), and ``dormant deploy FILE.dmn`` prints id and version.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from click.testing import CliRunner
from sqlalchemy import select

from dormant.engine_core.triggers import IncidentRetry
from dormant.persistence.store import NewInstance, Store
from dormant.persistence.tables import decisions

DMN = """<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="https://www.omg.org/spec/DMN/20191111/MODEL/" id="dish" name="Dish"
             namespace="http://camunda.org/schema/1.0/dmn">
  <decision id="dish" name="Dish">
    <informationRequirement id="ir"><requiredDecision href="#season"/></informationRequirement>
    <decisionTable id="t" hitPolicy="FIRST">
      <input id="i1" label="Season">
        <inputExpression id="ie1" typeRef="string"><text>season</text></inputExpression>
      </input>
      <output id="o1" name="dish" typeRef="string"/>
      <rule id="r1">
        <inputEntry id="a1"><text>"Fall"</text></inputEntry>
        <outputEntry id="b1"><text>"{fall}"</text></outputEntry>
      </rule>
      <rule id="r2">
        <inputEntry id="a2"><text>-</text></inputEntry>
        <outputEntry id="b2"><text>"Salad"</text></outputEntry>
      </rule>
    </decisionTable>
  </decision>
  <decision id="season" name="Season">
    <variable id="v" name="season"/>
    <literalExpression id="l">
      <text>if month &gt; 8 then "Fall" else "Spring"</text>
    </literalExpression>
  </decision>
</definitions>
"""

BPMN = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
                  xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">
  <bpmn:process id="dinner" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="choose"/>
    <bpmn:businessRuleTask id="choose" name="Choose dish">
      <bpmn:extensionElements>
        <zeebe:calledDecision decisionId="dish" resultVariable="dish"/>
      </bpmn:extensionElements>
    </bpmn:businessRuleTask>
    <bpmn:sequenceFlow id="f2" sourceRef="choose" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>
"""


def test_deploy_dmn_and_bpmn_then_run(store: Store, now: datetime) -> None:
    deployed = store.deployments.deploy(DMN.replace("{fall}", "Stew"), now)
    assert [(d.key, d.version, d.created, d.kind) for d in deployed] == [
        ("dish", 1, True, "decision"),
        ("season", 1, True, "decision"),
    ]
    again = store.deployments.deploy(DMN.replace("{fall}", "Stew"), now)
    assert [(d.key, d.version, d.created) for d in again] == [
        ("dish", 1, False),
        ("season", 1, False),
    ], "identical content bumps no version"
    assert again[0].deployment_key != deployed[0].deployment_key, "but it is a deployment"
    assert store.deployments.deploy(BPMN, now)[0].key == "dinner"

    store.start(NewInstance("dinner", "i1", {"month": 10}), now=now)
    view = store.queries.instance("i1")
    assert view.status == "completed"
    assert view.variables["dish"] == "Stew"

    # One changed decision: every resource of the deployment gets a new version (so a
    # binding by deployment finds them together); the next instance uses it.
    redeployed = store.deployments.deploy(
        DMN.replace("{fall}", "Goulash"), now + timedelta(seconds=1)
    )
    assert [(d.key, d.version, d.created) for d in redeployed] == [
        ("dish", 2, True),
        ("season", 2, True),
    ]
    store.start(NewInstance("dinner", "i2", {"month": 10}), now=now)
    assert store.queries.instance("i2").variables["dish"] == "Goulash"
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(decisions.c.decision_id, decisions.c.version).order_by(
                decisions.c.decision_id, decisions.c.version
            )
        ).all()
    assert [tuple(r) for r in rows] == [("dish", 1), ("dish", 2), ("season", 1), ("season", 2)]


def test_undeployed_decision_is_an_incident_healed_by_deploy_and_retry(
    store: Store, now: datetime
) -> None:
    store.deployments.deploy(BPMN, now)
    store.start(NewInstance("dinner", "i1", {"month": 3}), now=now)
    view = store.queries.instance("i1")
    assert view.status == "active_incidents"
    [incident] = view.incidents
    assert (incident.node_id, incident.cause_class) == ("choose", "DecisionNotDeployed")
    assert "'dish'" in incident.cause

    store.deployments.deploy(DMN.replace("{fall}", "Stew"), now)
    store.apply("i1", IncidentRetry(incident_id=incident.id), now + timedelta(seconds=5))
    view = store.queries.instance("i1")
    assert view.status == "completed"
    assert view.variables["dish"] == "Salad"


def test_cli_deploys_a_dmn_file(tmp_path: Path) -> None:
    from dormant.tasks.cli import cli

    model = tmp_path / "dish.dmn"
    model.write_text(DMN.replace("{fall}", "Stew"))
    env = {"DORMANT_DATABASE_URL": f"sqlite:///{tmp_path / 'dormant.sqlite3'}"}
    result = CliRunner(env=env).invoke(cli, ["deploy", str(model)])
    assert result.exit_code == 0, result.output
    assert result.output.split("\n")[:2] == ["dish 1", "season 1"]

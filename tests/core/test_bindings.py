"""Resource bindings in the core: a call activity binds its child's version (latest,
deployment, versionTag) before it arms its boundaries, and a business rule task binds
its decision the same way; nothing matching is an incident with nothing armed."""

from __future__ import annotations

from typing import Any

import pytest

from dormant.engine_core.bindings import (
    Binding,
    DecisionVersion,
    ProcessVersion,
    bind_decision,
    bind_process,
)
from dormant.engine_core.builder import ProcessBuilder, timer
from dormant.engine_core.dmn import read_dmn
from dormant.engine_core.effects import StartChild
from dormant.engine_core.expressions import TechnicalFailure
from dormant.engine_core.model import ProcessDefinition
from dormant.engine_core.services import Services
from tests.core.enginekit import Run

CATALOG = {
    "parent": (ProcessVersion(1, 10), ProcessVersion(2, 20)),
    "child": (
        ProcessVersion(1, 10, "v1"),
        ProcessVersion(2, 15, "v2"),
        ProcessVersion(3, 30, "v1"),
    ),
}


def caller(**fields: Any) -> ProcessDefinition:
    b = ProcessBuilder("parent")
    b.start_event("s").call_activity("call", "child", **fields).end_event("e")
    b.sequence("s", "call", "e")
    b.boundary_event("late", "call", timer("PT1H"))
    b.end_event("late_end")
    b.sequence("late", "late_end")
    return b.build()


def started_version(run: Run) -> int | None:
    (start,) = run.effects_of(StartChild)
    version: int | None = start.version
    return version


@pytest.mark.parametrize(
    ("binding", "tag", "expected"),
    [
        ("latest", None, 3),
        ("deployment", None, 1),
        ("versionTag", "v1", 3),
        ("versionTag", "v2", 2),
    ],
)
def test_call_activity_binds_the_version_its_binding_chooses(
    binding: str, tag: str | None, expected: int
) -> None:
    run = Run(
        caller(called_binding=binding, called_version_tag=tag),
        services=Services(processes=CATALOG),
    )
    run.start()  # the parent runs as version 1, deployed in deployment 10
    assert started_version(run) == expected
    assert run.waits("late"), "the boundary is armed once the child is bound"


def test_a_missing_child_is_an_incident_with_no_boundary_armed() -> None:
    for fields, catalog in (
        ({}, {"parent": CATALOG["parent"]}),  # no version of the child at all
        ({"called_binding": "versionTag", "called_version_tag": "v9"}, CATALOG),
        ({"called_binding": "deployment"}, {**CATALOG, "parent": (ProcessVersion(1, 99),)}),
        ({}, {**CATALOG, "child": (ProcessVersion(1, 10, none_start=False),)}),
    ):
        run = Run(caller(**fields), services=Services(processes=catalog))
        run.start()
        incident = run.incident("call")
        assert incident.cause_class == "UnknownProcess"
        assert "'child'" in incident.cause
        assert run.waits() == [], "no timer boundary, no call wait beside the incident"
        assert run.effects_of(StartChild) == []
        assert incident.boundaries_armed is False


def test_deploying_the_child_then_retrying_binds_and_arms() -> None:
    run = Run(caller(), services=Services(processes={"parent": CATALOG["parent"]}))
    run.start()
    incident = run.incident("call")
    run.services = Services(processes=CATALOG)
    run.retry(incident.id)
    assert started_version(run) == 3
    assert run.waits("late") and run.waits("call", "call")


def test_without_a_catalog_the_shell_binds_latest_after_the_commit() -> None:
    run = Run(caller())
    run.start()
    (start,) = run.effects_of(StartChild)
    assert (start.version, start.version_tag) == (None, None)
    tagged = Run(caller(called_binding="versionTag", called_version_tag="v1"))
    tagged.start()
    assert tagged.effects_of(StartChild)[0].version_tag == "v1"
    pinned = Run(caller(called_binding="deployment"))
    pinned.start()
    assert pinned.incident("call").cause_class == "UnknownProcess"


DMN = """<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="https://www.omg.org/spec/DMN/20191111/MODEL/"
             xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" name="d" namespace="x">
  <decision id="rate" name="Rate">
    <extensionElements><zeebe:versionTag value="{tag}"/></extensionElements>
    <literalExpression><text>{value}</text></literalExpression>
  </decision>
</definitions>"""


def decision_version(version: int, deployment: int, tag: str, value: int) -> DecisionVersion:
    (decision,) = read_dmn(DMN.format(tag=tag, value=value))
    assert decision.version_tag == tag
    return DecisionVersion(version, deployment, tag, {"rate": decision})


def rule_task(binding: str, tag: str | None = None) -> ProcessDefinition:
    b = ProcessBuilder("parent")
    b.start_event("s").business_rule_task(
        "br",
        decision_id="rate",
        result_variable="r",
        decision_binding=binding,
        decision_version_tag=tag,
    ).user_task("after").end_event("e")
    b.sequence("s", "br", "after", "e")
    return b.build()


DECISIONS = {
    "rate": (
        decision_version(1, 10, "t1", 100),
        decision_version(2, 20, "t2", 200),
        decision_version(3, 30, "t1", 300),
    )
}


@pytest.mark.parametrize(
    ("binding", "tag", "expected"),
    [("latest", None, 999), ("deployment", None, 100), ("versionTag", "t1", 300)],
)
def test_business_rule_task_binds_its_decision(
    binding: str, tag: str | None, expected: int
) -> None:
    (latest,) = read_dmn(DMN.format(tag="t3", value=999))
    services = Services(decisions={"rate": latest}, decision_versions=DECISIONS, processes=CATALOG)
    run = Run(rule_task(binding, tag), services=services)
    run.start()
    assert run.variables["r"] == expected


def test_a_missing_bound_decision_is_an_incident() -> None:
    run = Run(
        rule_task("versionTag", "t9"),
        services=Services(decision_versions=DECISIONS, processes=CATALOG),
    )
    run.start()
    incident = run.incident("br")
    assert incident.cause_class == "DecisionNotDeployed" and "'t9'" in incident.cause


def test_bind_functions_name_what_is_deployed() -> None:
    with pytest.raises(TechnicalFailure, match=r"deployed versions: 1, 2, 3"):
        bind_process(
            CATALOG, "child", Binding.DEPLOYMENT, version_tag=None, deployment=5, where="x"
        )
    with pytest.raises(TechnicalFailure, match=r"deployed versions: none"):
        bind_decision({}, "rate", Binding.LATEST, version_tag=None, deployment=None, where="x")

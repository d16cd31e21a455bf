"""Names that their columns cannot hold (issue 24, row 8).

A message or signal name, a job type, an element id, a process id: each is written to a
``VARCHAR(255)`` column (persistence/tables.py) or used as a name the shell logs. One
that does not fit is refused at deploy with one line naming the element and the limit
(``engine_core/validate.py``), or -- computed by FEEL at run time -- is an incident at
the node, never a failed insert whose retry can never succeed. Log lines and incident
causes quote such values cut short (``engine_core/inputs.py``, ``shorten``).
"""

from __future__ import annotations

import pytest

from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.builder import ProcessBuilder, message, signal
from dormant.engine_core.dmn import read_dmn
from dormant.engine_core.errors import InvalidModel
from dormant.engine_core.inputs import shorten
from dormant.engine_core.model import ProcessDefinition
from tests.core.enginekit import Run

LONG = "n" * 300


def _message_start(name: str) -> ProcessDefinition:
    b = ProcessBuilder("names")
    b.start_event("start", message(name)).end_event("end")
    b.sequence("start", "end")
    return b.build()


def _signal_catch(name: str) -> ProcessDefinition:
    b = ProcessBuilder("names")
    b.start_event("start").intermediate_catch_event("wait", signal(name)).end_event("end")
    b.sequence("start", "wait", "end")
    return b.build()


def _message_throw(name: str) -> ProcessDefinition:
    b = ProcessBuilder("names")
    b.start_event("start").intermediate_throw_event("send", message(name)).end_event("end")
    b.sequence("start", "send", "end")
    return b.build()


def _job(job_type: str, element_id: str = "work", key: str = "names") -> ProcessDefinition:
    b = ProcessBuilder(key)
    b.start_event("start").service_task(element_id, job_type).end_event("end")
    b.sequence("start", element_id, "end")
    return b.build()


def _call(called: str) -> ProcessDefinition:
    b = ProcessBuilder("names")
    b.start_event("start").call_activity("call", called).end_event("end")
    b.sequence("start", "call", "end")
    return b.build()


def _user_task(name: str) -> ProcessDefinition:
    b = ProcessBuilder("names")
    b.start_event("start").user_task("approve", name=name).end_event("end")
    b.sequence("start", "approve", "end")
    return b.build()


@pytest.mark.parametrize(
    ("build", "names"),
    [
        (lambda: _message_start(LONG), "startEvent 'start': message name"),
        (lambda: _signal_catch(LONG), "intermediateCatchEvent 'wait': signal name"),
        (lambda: _message_throw(LONG), "intermediateThrowEvent 'send': message name"),
        (lambda: _job(LONG), "serviceTask 'work': job type"),
        (lambda: _job("charge", element_id="w" * 300), "serviceTask 'wwwwwwwwww"),
        (lambda: _job("charge", key="k" * 300), "process id"),
        (lambda: _call(LONG), "callActivity 'call': called process id"),
        (lambda: _user_task(LONG), "userTask 'approve': name"),
    ],
)
def test_a_name_longer_than_its_column_is_refused_at_deploy_in_one_line(
    build: object, names: str
) -> None:
    with pytest.raises(InvalidModel) as info:
        build()  # type: ignore[operator]
    text = str(info.value)
    assert names in text, text
    assert "300 characters long, more than the limit of 255" in text, text
    assert "\n" not in text and len(text) < 400, text


def test_names_that_fit_deploy() -> None:
    _message_start("n" * 255)
    _job("j" * 255, element_id="e" * 255, key="k" * 255)


@pytest.mark.parametrize(
    ("build", "what"),
    [
        (lambda: _job("=kind"), "job type"),
        (lambda: _message_throw("=kind"), "message name"),
    ],
)
def test_a_computed_name_longer_than_its_column_is_an_incident_at_the_node(
    build: object, what: str
) -> None:
    run = Run(build())  # type: ignore[operator]
    run.start({"kind": "k" * 100_000})
    incident = run.incident()
    assert what in incident.cause
    assert "100000 characters long, more than the limit of 255" in incident.cause
    assert len(incident.cause) < 600, "the value is quoted cut short"
    assert run.status == "active_incidents"


def test_a_long_expression_is_quoted_cut_short_in_an_incident() -> None:
    expression = "=" + " + ".join(['"a"'] * 10_000) + " + 1"
    run = Run(_job(expression))
    run.start()
    assert len(run.incident().cause) < 600


def test_shorten_cuts_a_value_and_says_how_long_it_was() -> None:
    assert shorten("abc") == "'abc'"
    cut = shorten("x" * 100_000)
    assert len(cut) < 120 and "100,000 characters" in cut
    assert shorten(None) == "None"


def test_an_expression_error_quotes_a_long_expression_cut_short() -> None:
    from dormant.engine_core.errors import ExpressionError
    from dormant.engine_core.feel import evaluate

    expression = " + ".join(['"a"'] * 10_000) + " +"
    with pytest.raises(ExpressionError) as info:
        evaluate(expression, {})
    text = str(info.value)
    assert len(text) < 600 and "characters)" in text, text[:300]


def test_a_failing_long_condition_is_quoted_cut_short_in_its_incident() -> None:
    b = ProcessBuilder("cond")
    b.start_event("start").exclusive_gateway("x")
    b.end_event("yes").end_event("no")
    b.sequence("start", "x")
    b.flow("x", "yes", condition="=" + " + ".join(["1"] * 10_000))
    b.flow("x", "no", condition="=false")
    run = Run(b.build())
    run.start()
    assert len(run.incident("x").cause) < 600


DMN = """<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="https://www.omg.org/spec/DMN/20191111/MODEL/"
             xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" name="d" namespace="x">
  <decision id="{did}" name="Rate">
    <extensionElements><zeebe:versionTag value="{tag}"/></extensionElements>
    <literalExpression><text>1</text></literalExpression>
  </decision>
</definitions>"""

BPMN = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="x">
  <bpmn:process id="tagged" isExecutable="true">
    <bpmn:extensionElements><zeebe:versionTag value="{tag}"/></bpmn:extensionElements>
    <bpmn:startEvent id="s"/><bpmn:endEvent id="e"/>
    <bpmn:sequenceFlow id="f" sourceRef="s" targetRef="e"/>
  </bpmn:process>
</bpmn:definitions>"""


@pytest.mark.parametrize(
    ("read", "names"),
    [
        (lambda: read_dmn(DMN.format(did=LONG, tag="v1")), "decision id"),
        (lambda: read_dmn(DMN.format(did="rate", tag=LONG)), "decision 'rate': version tag"),
        (lambda: read_bpmn(BPMN.format(tag=LONG)), "process 'tagged': version tag"),
    ],
)
def test_decision_ids_and_version_tags_longer_than_their_columns_are_refused(
    read: object, names: str
) -> None:
    with pytest.raises(InvalidModel) as info:
        read()  # type: ignore[operator]
    text = str(info.value)
    assert names in text and "more than the limit of 255" in text and len(text) < 400, text
    assert read_dmn(DMN.format(did="rate", tag="v1"))[0].version_tag == "v1"

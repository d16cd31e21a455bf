"""Ad-hoc sub-processes as Zeebe 8.8 runs them: the active elements collection, the
completion condition read at the end of each inner path, cancelRemainingInstances,
boundaries, the incidents for bad input, and what the reader refuses."""

from __future__ import annotations

import pytest

from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.builder import ProcessBuilder, error, timer
from dormant.engine_core.errors import InvalidModel, UnsupportedElement
from dormant.engine_core.model import IoMapping, LoopSpec, ProcessDefinition
from dormant.engine_core.services import Services
from dormant.engine_core.triggers import JobCompleted
from tests.core.enginekit import Run


def _tools(
    condition: str | None = None, *, cancel: bool = True, collection: str = "=toRun"
) -> ProcessDefinition:
    """start -> ad-hoc {a, b -> c} -> end; a and b are jobs, c a plain task after b."""
    b = ProcessBuilder("tools")
    b.start_event("s")
    with b.ad_hoc_sub_process(
        "ah", active_elements=collection, completion_condition=condition, cancel_remaining=cancel
    ):
        b.service_task("a", job_type="ja").service_task("b", job_type="jb").task("c")
        b.sequence("b", "c")
    b.end_event("e")
    b.sequence("s", "ah", "e")
    return b.build()


def test_the_collection_activates_the_elements_it_names() -> None:
    run = Run(_tools())
    run.start({"toRun": ["b"]})
    assert run.token_nodes() == ["ah:waiting", "b:waiting"]
    assert [w.job_type for w in run.waits(kind="job")] == ["jb"]
    run.complete_job("b", checked=True)
    # b's flow carries its token on to c; the path ends there and, with no
    # condition, the last path ending completes the sub-process.
    assert run.status == "completed"
    assert run.variables["checked"] is True
    assert [f.details["node"] for f in run.facts_of("EndEventReached")] == ["e"]


def test_without_a_condition_it_completes_when_every_activated_element_has() -> None:
    run = Run(_tools())
    run.start({"toRun": ["a", "b"]})
    run.complete_job("a")
    assert run.status == "active"
    assert run.token_nodes() == ["ah:waiting", "b:waiting"]
    run.complete_job("b")
    assert run.status == "completed"


def test_an_empty_collection_activates_nothing_and_the_sub_process_stays_active() -> None:
    run = Run(_tools())
    run.start({"toRun": []})
    assert run.token_nodes() == ["ah:waiting"]
    assert run.status == "active"


def test_an_element_may_be_named_twice_and_runs_twice() -> None:
    run = Run(_tools())
    run.start({"toRun": ["a", "a"]})
    assert len(run.waits("a", "job")) == 2


def test_condition_met_cancels_the_remaining_elements_by_default() -> None:
    run = Run(_tools("=done = true"))
    run.start({"toRun": ["a", "b"], "done": False})
    wait_a = run.wait("a", "job")
    run.complete_job("b", done=True)  # b -> c: the path ends at c, the condition holds
    assert run.status == "completed"
    assert run.cp.waits == {}
    assert wait_a.id not in run.cp.waits
    assert run.facts_of("AdHocConditionRead", node="ah", met=True)


def test_condition_not_met_keeps_the_sub_process_active_even_when_empty() -> None:
    """Zeebe reads the condition at each path end; false there leaves the sub-process
    active (only a boundary or a later path can end it)."""
    run = Run(_tools("=done = true"))
    run.start({"toRun": ["a"], "done": False})
    run.complete_job("a")
    assert run.token_nodes() == ["ah:waiting"]
    assert run.status == "active"
    assert run.facts_of("AdHocConditionRead", node="ah", met=False)


def test_condition_met_without_cancel_waits_for_the_others() -> None:
    run = Run(_tools("=done = true", cancel=False))
    run.start({"toRun": ["a", "b"], "done": False})
    run.complete_job("b", done=True)
    assert run.status == "active"
    assert run.token_nodes() == ["a:waiting", "ah:waiting"]
    run.complete_job("a")
    assert run.status == "completed"


def test_the_condition_reads_the_sub_process_scope() -> None:
    """Input mappings are local to the sub-process; the condition sees them."""
    b = ProcessBuilder("scoped")
    b.start_event("s")
    with b.ad_hoc_sub_process(
        "ah",
        active_elements="=[first]",
        completion_condition="=limit > 1",
        inputs=(IoMapping("=2", "limit"), IoMapping('="t"', "first")),
    ) as inner:
        inner.task("t")
    b.end_event("e").sequence("s", "ah", "e")
    run = Run(b.build())
    run.start()
    assert run.status == "completed"
    assert "limit" not in run.variables  # local to the sub-process, gone with it


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"toRun": "a"}, "evaluated to a string, expected a list of element ids"),
        ({"toRun": None}, "evaluated to null"),
        ({}, "evaluated to null"),
        ({"toRun": ["a", 3]}, "a list holding a number"),
        ({"toRun": ["a", "zzz"]}, "names 'zzz', not an element of it"),
        ({"toRun": ["c"]}, "names 'c', not an element of it"),  # c has an incoming flow
    ],
)
def test_a_bad_collection_is_an_incident_naming_the_attribute(
    variables: dict[str, object], expected: str
) -> None:
    run = Run(_tools())
    run.start(variables)
    incident = run.incident("ah")
    assert "activeElementsCollection" in incident.cause
    assert expected in incident.cause
    assert run.token_nodes() == ["ah:incident"]
    assert run.waits() == []  # nothing half-started
    run.cp.scopes["s0"].variables["toRun"] = ["a"]  # the operator fixes the data
    run.retry(incident.id)
    assert run.token_nodes() == ["a:waiting", "ah:waiting"]


def test_a_collection_past_the_loop_limit_is_an_incident() -> None:
    run = Run(_tools(), services=Services(max_loop_items=3))
    run.start({"toRun": ["a"] * 4})
    assert run.incident("ah").cause_class == "LoopTooLarge"


def test_a_non_boolean_condition_is_an_incident_at_the_element_naming_the_attribute() -> None:
    run = Run(_tools("=done"))
    run.start({"toRun": ["a"]})
    run.complete_job("a")
    incident = run.incident("a")
    assert "completionCondition" in incident.cause and "evaluated to null" in incident.cause
    run.cp.scopes["s0"].variables["done"] = True
    run.retry(incident.id)  # the element runs again, its path ends, the condition holds
    run.complete_job("a")
    assert run.status == "completed"


def test_an_interrupting_boundary_on_the_sub_process_ends_everything_inside() -> None:
    b = ProcessBuilder("bounded")
    b.start_event("s")
    with b.ad_hoc_sub_process("ah", active_elements="=toRun"):
        b.service_task("a", job_type="ja").service_task("b2", job_type="jb")
    b.boundary_event("late", "ah", timer("PT1M")).end_event("timed_out")
    b.end_event("e").sequence("s", "ah", "e").sequence("late", "timed_out")
    run = Run(b.build())
    run.start({"toRun": ["a", "b2"]})
    assert len(run.waits(kind="job")) == 2
    run.fire("late")
    assert run.status == "completed"
    assert [f.details["node"] for f in run.facts_of("EndEventReached")] == ["timed_out"]
    assert run.cp.waits == {}


def test_an_error_thrown_inside_is_caught_by_a_boundary_on_the_sub_process() -> None:
    b = ProcessBuilder("caught")
    b.start_event("s")
    with b.ad_hoc_sub_process("ah", active_elements='=["a"]'):
        b.service_task("a", job_type="ja")
    b.boundary_event("oops", "ah", error("E1")).end_event("handled")
    b.end_event("e").sequence("s", "ah", "e").sequence("oops", "handled")
    run = Run(b.build())
    run.start()
    run.throw_from_job("a", "E1")
    assert [f.details["node"] for f in run.facts_of("EndEventReached")] == ["handled"]


def test_a_multi_instance_ad_hoc_runs_one_scope_per_item() -> None:
    b = ProcessBuilder("mi")
    b.start_event("s")
    with b.ad_hoc_sub_process(
        "ah",
        active_elements='=["a"]',
        loop=LoopSpec(sequential=False, input_collection="=[1, 2]", input_element="n"),
    ):
        b.service_task("a", job_type="ja")
    b.end_event("e").sequence("s", "ah", "e")
    run = Run(b.build())
    run.start()
    waits = run.waits("a", "job")
    assert len(waits) == 2
    assert len({w.scope_id or run.cp.tokens[w.token_id or ""].scope_id for w in waits}) == 2
    for wait in waits:
        run.send(JobCompleted(wait_id=wait.id, attempt=wait.attempt, variables={}))
    assert run.status == "completed"


# -- the reader ---------------------------------------------------------------------

_DOC = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
  xmlns:zeebe="http://camunda.org/schema/zeebe/1.0"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" id="d">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="s"/>
    <bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="ah"/>
    <bpmn:adHocSubProcess id="ah" {attrs}>
      <bpmn:extensionElements>{ext}</bpmn:extensionElements>
      <bpmn:task id="a"/>
      {inner}
    </bpmn:adHocSubProcess>
    <bpmn:sequenceFlow id="f2" sourceRef="ah" targetRef="e"/>
    <bpmn:endEvent id="e"/>
  </bpmn:process>
</bpmn:definitions>
"""


def _doc(attrs: str = "", ext: str = "", inner: str = "") -> str:
    return _DOC.format(attrs=attrs, ext=ext, inner=inner)


def test_the_reader_takes_the_zeebe_settings() -> None:
    d = read_bpmn(
        _doc(
            'cancelRemainingInstances="false"',
            '<zeebe:adHoc activeElementsCollection="=toRun"/>',
            '<bpmn:completionCondition xsi:type="bpmn:tFormalExpression">=ok'
            "</bpmn:completionCondition>",
        )
    )[0]
    spec = d.node("ah").ad_hoc
    assert spec is not None
    assert (spec.active_elements, spec.completion_condition, spec.cancel_remaining) == (
        "=toRun",
        "=ok",
        False,
    )
    run = Run(d)
    run.start({"toRun": ["a"], "ok": True})
    assert run.status == "completed"


@pytest.mark.parametrize(
    ("attrs", "ext", "inner", "names"),
    [
        ("", '<zeebe:adHoc outputCollection="results"/>', "", "outputElement"),
        ("", '<zeebe:adHoc outputElement="=r"/>', "", "outputCollection"),
        (
            "",
            '<zeebe:taskDefinition type="agent"/><zeebe:adHoc activeElementsCollection="=x"/>',
            "",
            "activeElementsCollection",
        ),
        (
            "",
            '<zeebe:taskDefinition type="agent"/>',
            "<bpmn:completionCondition>=done</bpmn:completionCondition>",
            "completionCondition",
        ),
        ('ordering="Sequential"', "", "", "ordering"),
    ],
)
def test_what_dormant_does_not_run_is_refused_naming_element_and_attribute(
    attrs: str, ext: str, inner: str, names: str
) -> None:
    with pytest.raises(UnsupportedElement) as info:
        read_bpmn(_doc(attrs, ext, inner))
    assert "'ah'" in str(info.value) and names in str(info.value)


@pytest.mark.parametrize(
    ("inner", "names"),
    [
        ('<bpmn:startEvent id="in_s"/>', "start or end events"),
        ('<bpmn:endEvent id="in_e"/>', "start or end events"),
    ],
)
def test_start_and_end_events_inside_are_refused(inner: str, names: str) -> None:
    with pytest.raises(InvalidModel, match=names):
        read_bpmn(_doc(inner=inner))


def test_an_ad_hoc_without_an_activity_is_refused() -> None:
    b = ProcessBuilder("empty")
    b.start_event("s")
    with b.ad_hoc_sub_process("ah", active_elements="=[]"):
        b.intermediate_throw_event("x")
    b.end_event("e").sequence("s", "ah", "e")
    with pytest.raises(InvalidModel, match="at least one activity"):
        b.build()


def test_zeebe_ad_hoc_elsewhere_is_refused() -> None:
    doc = _doc().replace(
        '<bpmn:task id="a"/>',
        '<bpmn:task id="a"><bpmn:extensionElements><zeebe:adHoc activeElementsCollection="=x"/>'
        "</bpmn:extensionElements></bpmn:task>",
    )
    with pytest.raises(UnsupportedElement, match="zeebe:adHoc"):
        read_bpmn(doc)


def test_a_bad_feel_collection_is_refused_at_deploy() -> None:
    with pytest.raises(InvalidModel, match="activeElementsCollection"):
        read_bpmn(_doc(ext='<zeebe:adHoc activeElementsCollection="=[1,"/>'))

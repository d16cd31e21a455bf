# ruff: noqa: E501  -- inline BPMN fixtures read best on one line each
"""The BPMN reader and the builder: every element, extension, refusal and invalid case."""

from __future__ import annotations

import pytest

from dormant.engine_core.bpmn import MAX_SCOPE_DEPTH, read_bpmn
from dormant.engine_core.builder import ProcessBuilder, error, message, timer
from dormant.engine_core.errors import InvalidModel, UnsupportedElement
from dormant.engine_core.model import (
    EventDefinition,
    EventKind,
    IoMapping,
    LoopSpec,
    NodeKind,
    ProcessDefinition,
    RetryPolicy,
    TimerKind,
    TimerSpec,
)

HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
    'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" '
    'xmlns:dormant="http://dormant.dev/schema/1.0" id="d">'
)
GLOBALS = (
    '<bpmn:message id="m1" name="order-paid"><bpmn:extensionElements>'
    '<zeebe:subscription correlationKey="=orderId"/></bpmn:extensionElements></bpmn:message>'
    '<bpmn:signal id="s1" name="stop"/>'
    '<bpmn:error id="e1" errorCode="E42"/>'
    '<bpmn:escalation id="x1" escalationCode="ESC"/>'
)


def doc(body: str, *, start: bool = True, pid: str = "p", extra: str = "") -> str:
    s = '<bpmn:startEvent id="start"/>' if start else ""
    return f'{HEAD}<bpmn:process id="{pid}" isExecutable="true">{s}{body}</bpmn:process>{GLOBALS}{extra}</bpmn:definitions>'


def one(body: str, **kw: object) -> ProcessDefinition:
    (d,) = read_bpmn(doc(body, **kw))  # type: ignore[arg-type]
    return d


def ext(inner: str) -> str:
    return f"<bpmn:extensionElements>{inner}</bpmn:extensionElements>"


# -- elements -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("xml", "kind"),
    [
        ('<bpmn:task id="n"/>', NodeKind.TASK),
        ('<bpmn:userTask id="n"/>', NodeKind.USER_TASK),
        ('<bpmn:manualTask id="n"/>', NodeKind.MANUAL_TASK),
        (
            '<bpmn:serviceTask id="n">'
            + ext('<zeebe:taskDefinition type="t"/>')
            + "</bpmn:serviceTask>",
            NodeKind.SERVICE_TASK,
        ),
        (
            '<bpmn:sendTask id="n">' + ext('<zeebe:taskDefinition type="t"/>') + "</bpmn:sendTask>",
            NodeKind.SEND_TASK,
        ),
        (
            '<bpmn:businessRuleTask id="n">'
            + ext('<zeebe:taskDefinition type="t"/>')
            + "</bpmn:businessRuleTask>",
            NodeKind.BUSINESS_RULE_TASK,
        ),
        (
            '<bpmn:scriptTask id="n">'
            + ext('<zeebe:script expression="=1" resultVariable="r"/>')
            + "</bpmn:scriptTask>",
            NodeKind.SCRIPT_TASK,
        ),
        ('<bpmn:receiveTask id="n" messageRef="m1"/>', NodeKind.RECEIVE_TASK),
        (
            '<bpmn:callActivity id="n">'
            + ext('<zeebe:calledElement processId="c"/>')
            + "</bpmn:callActivity>",
            NodeKind.CALL_ACTIVITY,
        ),
        ('<bpmn:exclusiveGateway id="n"/>', NodeKind.EXCLUSIVE_GATEWAY),
        ('<bpmn:parallelGateway id="n"/>', NodeKind.PARALLEL_GATEWAY),
        ('<bpmn:inclusiveGateway id="n"/>', NodeKind.INCLUSIVE_GATEWAY),
        ('<bpmn:endEvent id="n"/>', NodeKind.END_EVENT),
        ('<bpmn:intermediateThrowEvent id="n"/>', NodeKind.INTERMEDIATE_THROW_EVENT),
    ],
)
def test_each_node_kind(xml: str, kind: NodeKind) -> None:
    d = one(xml)
    assert d.node("n").kind is kind
    assert d.node("n").parent is None
    assert d.children[None] == ("start", "n")


def test_service_task_extensions() -> None:
    d = one(
        '<bpmn:serviceTask id="n" name="Charge">'
        + ext(
            '<zeebe:taskDefinition type="=jobType" retries="5"/>'
            '<zeebe:taskHeaders><zeebe:header key="a" value="1"/><zeebe:header key="b" value="2"/></zeebe:taskHeaders>'
            '<zeebe:ioMapping><zeebe:input source="=x" target="y"/><zeebe:output source="=r" target="out"/></zeebe:ioMapping>'
            '<dormant:retryPolicy attempts="3" backoff="PT10S"/>'
            '<zeebe:properties><zeebe:property name="k" value="v"/></zeebe:properties>'
            '<other:thing xmlns:other="urn:x"/>'
        )
        + "</bpmn:serviceTask>"
    )
    n = d.node("n")
    assert (n.name, n.job_type, n.job_retries) == ("Charge", "=jobType", "5")
    assert n.task_headers == (("a", "1"), ("b", "2"))
    assert n.inputs == (IoMapping("=x", "y"),)
    assert n.outputs == (IoMapping("=r", "out"),)
    assert n.retry_policy == RetryPolicy(3, 10.0)


def test_old_task_definition_with_children() -> None:
    d = one(
        '<bpmn:serviceTask id="n">'
        + ext(
            "<zeebe:taskDefinition><zeebe:type>t</zeebe:type><zeebe:retries>2</zeebe:retries></zeebe:taskDefinition>"
        )
        + "</bpmn:serviceTask>"
    )
    assert (d.node("n").job_type, d.node("n").job_retries) == ("t", "2")


def test_user_task_call_activity_script_and_loop() -> None:
    d = one(
        '<bpmn:userTask id="u">'
        + ext(
            '<zeebe:userTask/><zeebe:assignmentDefinition assignee="=boss" candidateGroups="ops"/>'
            '<zeebe:formDefinition formId="f1"/><zeebe:taskSchedule dueDate="=d"/>'
        )
        + '<bpmn:multiInstanceLoopCharacteristics isSequential="true">'
        + ext(
            '<zeebe:loopCharacteristics inputCollection="=items" inputElement="item" outputCollection="res" outputElement="=r"/>'
        )
        + "<bpmn:completionCondition>=done</bpmn:completionCondition>"
        + "</bpmn:multiInstanceLoopCharacteristics></bpmn:userTask>"
        + '<bpmn:callActivity id="c">'
        + ext('<zeebe:calledElement processId="child" propagateAllChildVariables="false"/>')
        + "</bpmn:callActivity>"
        + '<bpmn:scriptTask id="s">'
        + ext('<zeebe:script expression="=a + b" resultVariable="sum"/>')
        + "</bpmn:scriptTask>"
    )
    u = d.node("u")
    assert (u.assignee, u.candidate_groups, u.form_id, u.due_date) == ("=boss", "ops", "f1", "=d")
    assert u.loop == LoopSpec(True, "=items", "item", "res", "=r", None, "=done")
    c = d.node("c")
    assert (
        c.called_process,
        c.propagate_all_child_variables,
        c.propagate_all_parent_variables,
    ) == (
        "child",
        False,
        True,
    )
    assert (d.node("s").script, d.node("s").result_variable) == ("=a + b", "sum")


def test_event_definitions() -> None:
    d = one(
        '<bpmn:intermediateCatchEvent id="msg"><bpmn:messageEventDefinition messageRef="m1"/></bpmn:intermediateCatchEvent>'
        '<bpmn:intermediateCatchEvent id="tmr"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>'
        '<bpmn:intermediateCatchEvent id="sig"><bpmn:signalEventDefinition signalRef="s1"/></bpmn:intermediateCatchEvent>'
        '<bpmn:endEvent id="err"><bpmn:errorEventDefinition errorRef="e1"/></bpmn:endEvent>'
        '<bpmn:endEvent id="trm"><bpmn:terminateEventDefinition/></bpmn:endEvent>'
        '<bpmn:intermediateThrowEvent id="esc"><bpmn:escalationEventDefinition escalationRef="x1"/></bpmn:intermediateThrowEvent>'
        '<bpmn:intermediateThrowEvent id="cmp"><bpmn:compensateEventDefinition waitForCompletion="false"/></bpmn:intermediateThrowEvent>'
        '<bpmn:intermediateThrowEvent id="lt"><bpmn:linkEventDefinition name="L"/></bpmn:intermediateThrowEvent>'
        '<bpmn:intermediateCatchEvent id="lc"><bpmn:linkEventDefinition name="L"/></bpmn:intermediateCatchEvent>'
        '<bpmn:startEvent id="ts"><bpmn:timerEventDefinition><bpmn:timeCycle>R/P1D</bpmn:timeCycle></bpmn:timerEventDefinition></bpmn:startEvent>'
        '<bpmn:startEvent id="ds"><bpmn:timerEventDefinition><bpmn:timeDate>2030-01-01T00:00:00Z</bpmn:timeDate></bpmn:timerEventDefinition></bpmn:startEvent>'
    )
    assert d.node("msg").event == EventDefinition(
        EventKind.MESSAGE, message_name="order-paid", correlation_key="=orderId"
    )
    assert d.node("tmr").event.timer == TimerSpec(TimerKind.DURATION, "PT1H")
    assert d.node("ts").event.timer == TimerSpec(TimerKind.CYCLE, "R/P1D")
    assert d.node("ds").event.timer == TimerSpec(TimerKind.DATE, "2030-01-01T00:00:00Z")
    assert d.node("sig").event.signal_name == "stop"
    assert d.node("err").event.error_code == "E42"
    assert d.node("trm").event.kind is EventKind.TERMINATE
    assert d.node("esc").event.escalation_code == "ESC"
    assert d.node("cmp").event == EventDefinition(EventKind.COMPENSATE, wait_for_completion=False)
    assert d.node("lt").event.link_name == d.node("lc").event.link_name == "L"
    assert [n.id for n in d.timer_starts()] == ["ts", "ds"]


def test_flows_boundaries_defaults_and_sub_processes() -> None:
    d = one(
        '<bpmn:serviceTask id="a" default="f2">'
        + ext('<zeebe:taskDefinition type="t"/>')
        + "</bpmn:serviceTask>"
        '<bpmn:boundaryEvent id="b1" attachedToRef="a" cancelActivity="false"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1M</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:boundaryEvent>'
        '<bpmn:boundaryEvent id="b2" attachedToRef="a"><bpmn:errorEventDefinition/></bpmn:boundaryEvent>'
        '<bpmn:subProcess id="sp"><bpmn:startEvent id="s2"/><bpmn:endEvent id="e2"/>'
        '<bpmn:sequenceFlow id="g1" sourceRef="s2" targetRef="e2"/>'
        '<bpmn:subProcess id="esp" triggeredByEvent="true"><bpmn:startEvent id="es" isInterrupting="false">'
        '<bpmn:messageEventDefinition messageRef="m1"/></bpmn:startEvent><bpmn:endEvent id="ee"/>'
        '<bpmn:sequenceFlow id="g2" sourceRef="es" targetRef="ee"/></bpmn:subProcess></bpmn:subProcess>'
        '<bpmn:endEvent id="end"/>'
        '<bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="a"/>'
        '<bpmn:sequenceFlow id="f1" sourceRef="a" targetRef="sp"><bpmn:conditionExpression>=ok</bpmn:conditionExpression></bpmn:sequenceFlow>'
        '<bpmn:sequenceFlow id="f2" sourceRef="a" targetRef="end"/>'
        '<bpmn:sequenceFlow id="f3" sourceRef="sp" targetRef="end"/>'
    )
    a = d.node("a")
    assert (a.incoming, a.outgoing, a.default_flow, a.boundaries) == (
        ("f0",),
        ("f1", "f2"),
        "f2",
        ("b1", "b2"),
    )
    assert d.flow("f1").condition == "=ok"
    assert d.node("b1").attached_to == "a" and d.node("b1").cancel_activity is False
    assert d.node("b2").cancel_activity is True and d.node("b2").event.error_code is None
    assert d.node("end").incoming == ("f2", "f3")
    assert d.children["sp"] == ("s2", "e2", "esp")
    assert d.children["esp"] == ("es", "ee")
    assert d.node("esp").kind is NodeKind.EVENT_SUB_PROCESS
    assert d.node("es").parent == "esp" and d.node("es").is_interrupting is False
    assert d.node("e2").parent == "sp"


def test_compensation_association() -> None:
    d = one(
        '<bpmn:serviceTask id="a">'
        + ext('<zeebe:taskDefinition type="t"/>')
        + "</bpmn:serviceTask>"
        '<bpmn:boundaryEvent id="cb" attachedToRef="a"><bpmn:compensateEventDefinition/></bpmn:boundaryEvent>'
        '<bpmn:serviceTask id="undo" isForCompensation="true">'
        + ext('<zeebe:taskDefinition type="u"/>')
        + "</bpmn:serviceTask>"
        '<bpmn:association id="as" sourceRef="cb" targetRef="undo"/>'
        '<bpmn:textAnnotation id="ta"><bpmn:text>note</bpmn:text></bpmn:textAnnotation>'
        '<bpmn:association id="as2" sourceRef="a" targetRef="ta"/>'
    )
    assert d.node("cb").compensation_handler == "undo"
    assert d.node("undo").is_for_compensation


def test_executable_selection_and_ignored_elements() -> None:
    xml = (
        f'{HEAD}<bpmn:collaboration id="col"><bpmn:participant id="pa" processRef="p1"/></bpmn:collaboration>'
        '<bpmn:process id="p1"><bpmn:documentation>doc</bpmn:documentation>'
        '<bpmn:laneSet id="ls"><bpmn:lane id="l1"/></bpmn:laneSet>'
        '<bpmn:dataObject id="do"/><bpmn:startEvent id="s"/></bpmn:process>'
        '<bpmn:process id="p2" isExecutable="false"><bpmn:startEvent id="s2"/></bpmn:process>'
        '<bpmn:process id="p3" isExecutable="true" name="Three"><bpmn:startEvent id="s3"/></bpmn:process>'
        "</bpmn:definitions>"
    )
    assert [(d.key, d.name) for d in read_bpmn(xml)] == [("p1", None), ("p3", "Three")]
    assert read_bpmn(xml.encode()) == read_bpmn(xml)


# -- refusals -------------------------------------------------------------------------

TD = ext('<zeebe:taskDefinition type="t"/>')


@pytest.mark.parametrize(
    ("body", "element_id", "element_type"),
    [
        ('<bpmn:transaction id="tx" name="Pay"/>', "tx", "transaction"),
        ('<bpmn:complexGateway id="cg" name="Pay"/>', "cg", "complexGateway"),
        (
            '<bpmn:adHocSubProcess id="ah" name="Pay">'
            '<bpmn:extensionElements><zeebe:taskDefinition type="agent"/></bpmn:extensionElements>'
            '<bpmn:task id="x"/><bpmn:completionCondition>=done</bpmn:completionCondition>'
            "</bpmn:adHocSubProcess>",
            "ah",
            "adHocSubProcess",
        ),
        ('<bpmn:callChoreography id="cc" name="Pay"/>', "cc", "callChoreography"),
        ('<bpmn:dataStore id="ds" name="Pay"/>', "ds", "dataStore"),
        (
            '<bpmn:task id="t" name="Pay"><bpmn:standardLoopCharacteristics/></bpmn:task>',
            "t",
            "task",
        ),
        (
            '<bpmn:intermediateCatchEvent id="c" name="Pay"><bpmn:conditionalEventDefinition/></bpmn:intermediateCatchEvent>',
            "c",
            "intermediateCatchEvent",
        ),
        (
            '<bpmn:endEvent id="c" name="Pay"><bpmn:cancelEventDefinition/></bpmn:endEvent>',
            "c",
            "endEvent",
        ),
        (
            '<bpmn:intermediateCatchEvent id="c" name="Pay"><bpmn:signalEventDefinition signalRef="s1"/><bpmn:timerEventDefinition><bpmn:timeDuration>PT1S</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>',
            "c",
            "intermediateCatchEvent",
        ),
        (
            '<bpmn:startEvent id="st" name="Pay">'
            + ext(
                "<zeebe:executionListeners>"
                '<zeebe:executionListener eventType="start" type="x"/>'
                "</zeebe:executionListeners>"
            )
            + "</bpmn:startEvent>",
            "st",
            "startEvent",
        ),
        (
            '<bpmn:userTask id="ut" name="Pay">'
            + ext(
                '<zeebe:taskListeners><zeebe:taskListener eventType="canceling" type="x"/>'
                "</zeebe:taskListeners>"
            )
            + "</bpmn:userTask>",
            "ut",
            "userTask",
        ),
        (
            '<bpmn:userTask id="ut" name="Pay">'
            + ext("<zeebe:somethingNew/>")
            + "</bpmn:userTask>",
            "ut",
            "userTask",
        ),
        (
            '<bpmn:callActivity id="ca" name="Pay">'
            + ext('<zeebe:calledElement processId="c" bindingType="pinned"/>')
            + "</bpmn:callActivity>",
            "ca",
            "callActivity",
        ),
        (
            '<bpmn:businessRuleTask id="br" name="Pay">'
            + ext('<zeebe:calledDecision decisionId="d" resultVariable="r" bindingType="newest"/>')
            + "</bpmn:businessRuleTask>",
            "br",
            "businessRuleTask",
        ),
        (
            '<bpmn:startEvent id="es" name="Pay"><bpmn:errorEventDefinition/></bpmn:startEvent>',
            "es",
            "startEvent",
        ),
        (
            '<bpmn:eventBasedGateway id="g" name="Pay" instantiate="true"/>',
            "g",
            "eventBasedGateway",
        ),
        (
            '<bpmn:eventBasedGateway id="g" name="Pay" eventGatewayType="Parallel"/>',
            "g",
            "eventBasedGateway",
        ),
        (
            '<bpmn:intermediateCatchEvent id="c" name="Pay" parallelMultiple="true"><bpmn:signalEventDefinition signalRef="s1"/></bpmn:intermediateCatchEvent>',
            "c",
            "intermediateCatchEvent",
        ),
    ],
)
def test_refused_elements_name_id_type_and_name(
    body: str, element_id: str, element_type: str
) -> None:
    with pytest.raises(UnsupportedElement) as info:
        read_bpmn(doc(body))
    assert (info.value.element_id, info.value.element_type, info.value.element_name) == (
        element_id,
        element_type,
        "Pay",
    )
    assert repr(element_id) in str(info.value) and element_type in str(info.value)


def test_latest_binding_is_the_one_dormant_runs() -> None:
    definition = one(
        '<bpmn:callActivity id="ca">'
        + ext('<zeebe:calledElement processId="c" bindingType="latest"/>')
        + "</bpmn:callActivity>"
    )
    assert definition.nodes["ca"].called_process == "c"
    assert definition.nodes["ca"].called_version_tag is None


def test_version_tag_binding_and_the_process_version_tag() -> None:
    caller = one(
        '<bpmn:callActivity id="ca">'
        + ext('<zeebe:calledElement processId="c" bindingType="versionTag" versionTag="v1"/>')
        + "</bpmn:callActivity>"
    )
    assert caller.nodes["ca"].called_version_tag == "v1" and caller.version_tag is None
    assert one(ext('<zeebe:versionTag value="v1"/>')).version_tag == "v1"
    with pytest.raises(InvalidModel, match=r"'ca'.*versionTag"):
        one(
            '<bpmn:callActivity id="ca">'
            + ext('<zeebe:calledElement processId="c" bindingType="versionTag"/>')
            + "</bpmn:callActivity>"
        )


def test_every_binding_type_is_read_for_processes_and_decisions() -> None:
    for binding, tag in (("latest", None), ("deployment", None), ("versionTag", "v2")):
        extra = f' versionTag="{tag}"' if tag else ""
        caller = one(
            '<bpmn:callActivity id="ca">'
            + ext(f'<zeebe:calledElement processId="c" bindingType="{binding}"{extra}/>')
            + "</bpmn:callActivity>"
            + '<bpmn:businessRuleTask id="br">'
            + ext(
                f'<zeebe:calledDecision decisionId="d" resultVariable="r" '
                f'bindingType="{binding}"{extra}/>'
            )
            + "</bpmn:businessRuleTask>"
        )
        ca, br = caller.nodes["ca"], caller.nodes["br"]
        assert (ca.called_binding, ca.called_version_tag) == (binding, tag)
        assert (br.decision_binding, br.decision_version_tag) == (binding, tag)
    with pytest.raises(InvalidModel, match=r"'br'.*versionTag"):
        one(
            '<bpmn:businessRuleTask id="br">'
            + ext(
                '<zeebe:calledDecision decisionId="d" resultVariable="r" bindingType="versionTag"/>'
            )
            + "</bpmn:businessRuleTask>"
        )


def test_process_level_listeners_are_read() -> None:
    xml = doc(
        ext(
            "<zeebe:executionListeners>"
            '<zeebe:executionListener eventType="end" type="x"/>'
            "</zeebe:executionListeners>"
        )
    )
    [definition] = read_bpmn(xml)
    assert [(x.event, x.job_type) for x in definition.execution_listeners] == [("end", "x")]


# -- invalid models -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("xml", "needle"),
    [
        (
            doc(
                '<bpmn:endEvent id="e"/><bpmn:sequenceFlow id="f" sourceRef="start" targetRef="nope"/>'
            ),
            "'nope'",
        ),
        (
            doc('<bpmn:endEvent id="e"/><bpmn:sequenceFlow id="f" sourceRef="zip" targetRef="e"/>'),
            "'zip'",
        ),
        (
            doc(
                '<bpmn:subProcess id="sp"><bpmn:startEvent id="s2"/><bpmn:endEvent id="e2"/></bpmn:subProcess><bpmn:sequenceFlow id="f" sourceRef="start" targetRef="e2"/>'
            ),
            "'f'",
        ),
        (
            doc(
                '<bpmn:boundaryEvent id="b" attachedToRef="ghost"><bpmn:errorEventDefinition/></bpmn:boundaryEvent>'
            ),
            "'ghost'",
        ),
        (
            doc(
                '<bpmn:exclusiveGateway id="g" default="f9"/><bpmn:endEvent id="e"/><bpmn:sequenceFlow id="f1" sourceRef="g" targetRef="e"/>'
            ),
            "'f9'",
        ),
        (
            doc(
                '<bpmn:intermediateCatchEvent id="c"><bpmn:messageEventDefinition messageRef="m9"/></bpmn:intermediateCatchEvent>'
            ),
            "'m9'",
        ),
        (
            doc(
                '<bpmn:intermediateCatchEvent id="c"><bpmn:signalEventDefinition signalRef="s9"/></bpmn:intermediateCatchEvent>'
            ),
            "'s9'",
        ),
        (
            doc('<bpmn:endEvent id="c"><bpmn:errorEventDefinition errorRef="e9"/></bpmn:endEvent>'),
            "'e9'",
        ),
        (doc('<bpmn:serviceTask id="st"/>'), "'st'"),
        (
            doc(
                '<bpmn:intermediateCatchEvent id="nk"><bpmn:messageEventDefinition messageRef="m2"/></bpmn:intermediateCatchEvent>',
                extra='<bpmn:message id="m2" name="x"/>',
            ),
            "'nk'",
        ),
        (doc('<bpmn:subProcess id="sp"><bpmn:endEvent id="e2"/></bpmn:subProcess>'), "'sp'"),
        (
            doc(
                '<bpmn:eventBasedGateway id="eg"/><bpmn:task id="t1"/><bpmn:task id="t2"/><bpmn:sequenceFlow id="y1" sourceRef="eg" targetRef="t1"/><bpmn:sequenceFlow id="y2" sourceRef="eg" targetRef="t2"/>'
            ),
            "'eg'",
        ),
        (doc('<bpmn:scriptTask id="sc"/>'), "'sc'"),
        (
            doc(
                '<bpmn:callActivity id="ca">'
                + ext("<zeebe:calledElement/>")
                + "</bpmn:callActivity>"
            ),
            "'ca'",
        ),
        (doc('<bpmn:endEvent id="e"/>', start=False), "'p'"),
        (doc('<bpmn:task id="dup"/><bpmn:task id="dup"/>'), "'dup'"),
        (
            doc(
                '<bpmn:intermediateCatchEvent id="t"><bpmn:timerEventDefinition><bpmn:timeDuration> </bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>'
            ),
            "'t'",
        ),
        (
            doc(
                '<bpmn:task id="r">'
                + ext('<dormant:retryPolicy attempts="-1" backoff="PT1S"/>')
                + "</bpmn:task>"
            ),
            "'r'",
        ),
        (
            doc(
                '<bpmn:task id="r">'
                + ext('<dormant:retryPolicy attempts="1" backoff="PT0S"/>')
                + "</bpmn:task>"
            ),
            "'r'",
        ),
        (
            doc(
                '<bpmn:task id="r">'
                + ext('<dormant:retryPolicy attempts="1" backoff="soon"/>')
                + "</bpmn:task>"
            ),
            "'r'",
        ),
        (
            doc(
                '<bpmn:intermediateThrowEvent id="lt"><bpmn:linkEventDefinition name="X"/></bpmn:intermediateThrowEvent>'
            ),
            "'lt'",
        ),
        (
            doc(
                '<bpmn:boundaryEvent id="cb" attachedToRef="start"><bpmn:compensateEventDefinition/></bpmn:boundaryEvent>'
            ),
            "'cb'",
        ),
        (
            f'{HEAD}<bpmn:process id="p" isExecutable="false"><bpmn:startEvent id="s"/></bpmn:process></bpmn:definitions>',
            "executable",
        ),
        (doc('<bpmn:endEvent id="start"/>', start=True), "duplicate id 'start' (endEvent)"),
        (
            f'{HEAD}<bpmn:process isExecutable="true"><bpmn:startEvent id="s"/></bpmn:process></bpmn:definitions>',
            "a process has no id",
        ),
        (
            doc('<bpmn:endEvent id="e"/><bpmn:sequenceFlow sourceRef="start" targetRef="e"/>'),
            "a sequence flow has no id",
        ),
        (doc('<bpmn:userTask name="nameless"/>'), "a userTask has no id"),
        (
            doc(
                '<bpmn:intermediateCatchEvent id="c"><bpmn:signalEventDefinition/></bpmn:intermediateCatchEvent>'
            ),
            "element 'c': signal event without a signalRef",
        ),
        (
            doc(
                "".join(f"<bpmn:subProcess id='sp{i}'>" for i in range(MAX_SCOPE_DEPTH + 2))
                + "</bpmn:subProcess>" * (MAX_SCOPE_DEPTH + 2)
            ),
            f"nests sub-processes more than {MAX_SCOPE_DEPTH} levels deep",
        ),
        ('<definitions xmlns="urn:not-bpmn"/>', "not a BPMN"),
        (f"{HEAD}<bpmn:process id='p'>", "malformed XML at line 2, column"),
        ("", "line"),
    ],
)
def test_invalid_models(xml: str, needle: str) -> None:
    with pytest.raises(InvalidModel) as info:
        read_bpmn(xml)
    assert needle in str(info.value)


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL">&lol3;</bpmn:definitions>"""

EXTERNAL = """<?xml version="1.0"?>
<!DOCTYPE d [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL">&xxe;</bpmn:definitions>"""


@pytest.mark.parametrize("xml", [BILLION_LAUGHS, EXTERNAL])
def test_entity_attacks_refused(xml: str) -> None:
    with pytest.raises(InvalidModel, match="line 2"):
        read_bpmn(xml)


# -- builder --------------------------------------------------------------------------


def test_builder_equals_reader_for_an_order_process() -> None:
    xml = doc(
        '<bpmn:serviceTask id="charge">'
        + ext('<zeebe:taskDefinition type="charge-card"/>')
        + "</bpmn:serviceTask>"
        '<bpmn:boundaryEvent id="late" attachedToRef="charge"><bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:boundaryEvent>'
        '<bpmn:exclusiveGateway id="ok" default="to_fail"/>'
        '<bpmn:subProcess id="ship"><bpmn:startEvent id="s2"/><bpmn:receiveTask id="wait" messageRef="m1"/><bpmn:endEvent id="e2"/>'
        '<bpmn:sequenceFlow id="g1" sourceRef="s2" targetRef="wait"/><bpmn:sequenceFlow id="g2" sourceRef="wait" targetRef="e2"/>'
        '<bpmn:subProcess id="esp" triggeredByEvent="true"><bpmn:startEvent id="es"><bpmn:errorEventDefinition errorRef="e1"/></bpmn:startEvent>'
        '<bpmn:endEvent id="ee"/><bpmn:sequenceFlow id="g3" sourceRef="es" targetRef="ee"/></bpmn:subProcess></bpmn:subProcess>'
        '<bpmn:endEvent id="fail"/><bpmn:endEvent id="done"/>'
        '<bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="charge"/>'
        '<bpmn:sequenceFlow id="f1" sourceRef="charge" targetRef="ok"/>'
        '<bpmn:sequenceFlow id="to_ship" sourceRef="ok" targetRef="ship"><bpmn:conditionExpression>=paid = true</bpmn:conditionExpression></bpmn:sequenceFlow>'
        '<bpmn:sequenceFlow id="to_fail" sourceRef="ok" targetRef="fail"/>'
        '<bpmn:sequenceFlow id="f4" sourceRef="ship" targetRef="done"/>'
        '<bpmn:sequenceFlow id="f5" sourceRef="late" targetRef="fail"/>',
        pid="order",
    )
    b = ProcessBuilder("order")
    b.start_event("start").service_task("charge", job_type="charge-card")
    b.boundary_event("late", attached_to="charge", event=timer("PT1H"))
    b.exclusive_gateway("ok", default="to_fail")
    with b.sub_process("ship"):
        b.start_event("s2").receive_task("wait", "order-paid", "=orderId").end_event("e2")
        b.flow("s2", "wait", id="g1").flow("wait", "e2", id="g2")
        with b.event_sub_process("esp"):
            b.start_event("es", error("E42")).end_event("ee").flow("es", "ee", id="g3")
    b.end_event("fail").end_event("done")
    b.flow("start", "charge", id="f0").flow("charge", "ok", id="f1")
    b.flow("ok", "ship", id="to_ship", condition="=paid = true")
    b.flow("ok", "fail", id="to_fail")
    b.flow("ship", "done", id="f4").flow("late", "fail", id="f5")
    assert b.build() == read_bpmn(xml)[0]


def test_builder_sequence_and_default_flag() -> None:
    b = ProcessBuilder("p", name="P")
    b.start_event("s", message("go")).inclusive_gateway("g").task("a").task("c").end_event("e")
    b.sequence("s", "g", "a", "e").flow("g", "c", default=True).flow("c", "e")
    d = b.build()
    assert d.node("g").outgoing == ("g->a", "g->c") and d.node("g").default_flow == "g->c"
    assert d.node("e").incoming == ("a->e", "c->e")
    assert d.message_starts()[0].id == "s"


@pytest.mark.parametrize(
    "make",
    [
        lambda b: b.task("a").flow("s", "zz"),
        lambda b: b.service_task("a", job_type=""),
        lambda b: b.boundary_event("x", attached_to="nope", event=timer("PT1S")),
        lambda b: b.task("s"),
    ],
)
def test_builder_runs_the_same_validation(make: object) -> None:
    b = ProcessBuilder("p").start_event("s")
    with pytest.raises(InvalidModel):
        make(b)  # type: ignore[operator]
        b.build()

"""No evaluation failure escapes ``apply`` (issue 8, item 6).

Every place the core evaluates a model expression — conditions, correlation keys,
message and signal names, timers, mappings, job types and retries, called elements,
decision ids, multi-instance collections, assignees — is driven here with an
expression that fails. The outcome must always be an incident at the node whose
expression failed, on a live token an operator can retry: never an exception out of
``apply``, never an incident on a token that is already gone.

``=boom`` stands for any failing evaluation (a FEEL bound exceeded, say): the FEEL
evaluator is wrapped so that an expression naming ``boom`` raises ``ExpressionError``,
and one naming ``crash`` raises an error that is not dormant's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dormant.engine_core import feel
from dormant.engine_core.builder import ProcessBuilder, error, message, signal, timer
from dormant.engine_core.checkpoint import IncidentState, TokenState
from dormant.engine_core.errors import ExpressionError
from dormant.engine_core.model import IoMapping, LoopSpec, ProcessDefinition
from tests.core.enginekit import Run

_real_evaluate = feel.evaluate


def _failing_evaluate(source: str, variables: Any, **kw: Any) -> Any:
    if "boom" in source:
        raise ExpressionError("evaluation budget exceeded", expression=source)
    if "crash" in source:
        raise RecursionError("maximum recursion depth exceeded")
    return _real_evaluate(source, variables, **kw)


@pytest.fixture(autouse=True)
def failing_feel(monkeypatch: pytest.MonkeyPatch) -> None:
    from dormant.engine_core import dmn

    monkeypatch.setattr(feel, "evaluate", _failing_evaluate)
    monkeypatch.setattr(dmn, "evaluate", _failing_evaluate)


BOOM = (IoMapping("=boom", "x"),)


def _p() -> ProcessBuilder:
    return ProcessBuilder("p")


# Each case: the model, what to do after the start, the node whose expression fails.
Drive = Callable[[Run], None]


def _nothing(run: Run) -> None:
    pass


def case_exclusive_condition() -> ProcessDefinition:
    b = _p().start_event("start").exclusive_gateway("n").end_event("a").end_event("b")
    return b.sequence("start", "n").flow("n", "a", condition="=boom").flow("n", "b").build()


def case_inclusive_fork_condition() -> ProcessDefinition:
    b = _p().start_event("start").inclusive_gateway("n").end_event("a")
    return b.sequence("start", "n").flow("n", "a", condition="=boom").build()


def _inclusive_join(condition: str) -> ProcessDefinition:
    b = _p().start_event("start").parallel_gateway("fork").task("t1").task("t2")
    b.inclusive_gateway("n").end_event("end")
    b.sequence("start", "fork").sequence("fork", "t1", "n").sequence("fork", "t2", "n")
    return b.flow("n", "end", condition=condition).build()


def case_inclusive_join_condition() -> ProcessDefinition:
    return _inclusive_join("=boom")


def case_inclusive_join_chooses_no_flow() -> ProcessDefinition:
    return _inclusive_join("=false")


def case_conditional_flow_out_of_a_task() -> ProcessDefinition:
    b = _p().start_event("start").task("n").end_event("a").end_event("b")
    b.sequence("start", "n").flow("n", "a", condition="=boom").flow("n", "b", condition="=true")
    return b.build()


def _one(node: Callable[[ProcessBuilder], ProcessBuilder], node_id: str = "n") -> ProcessDefinition:
    b = node(_p().start_event("start")).end_event("end")
    return b.sequence("start", node_id, "end").build()


def case_task_input_mapping() -> ProcessDefinition:
    return _one(lambda b: b.task("n", inputs=BOOM))


def case_task_output_mapping() -> ProcessDefinition:
    return _one(lambda b: b.task("n", outputs=BOOM))


def case_script() -> ProcessDefinition:
    return _one(lambda b: b.script_task("n", "=boom", "r"))


def case_script_not_dormants_error() -> ProcessDefinition:
    return _one(lambda b: b.script_task("n", "=crash", "r"))


def case_job_type() -> ProcessDefinition:
    return _one(lambda b: b.service_task("n", "=boom"))


def case_job_retries() -> ProcessDefinition:
    return _one(lambda b: b.service_task("n", "charge", job_retries="=boom"))


def case_called_element() -> ProcessDefinition:
    return _one(lambda b: b.call_activity("n", "=boom"))


def case_call_activity_input_mapping() -> ProcessDefinition:
    return _one(lambda b: b.call_activity("n", "child", inputs=BOOM))


def case_decision_id() -> ProcessDefinition:
    return _one(lambda b: b.business_rule_task("n", decision_id="=boom", result_variable="r"))


def case_assignee() -> ProcessDefinition:
    return _one(lambda b: b.user_task("n", assignee="=boom"))


def case_candidate_groups() -> ProcessDefinition:
    return _one(lambda b: b.user_task("n", candidate_groups="=boom"))


def case_mi_input_collection() -> ProcessDefinition:
    return _one(lambda b: b.task("n", loop=LoopSpec(False, input_collection="=boom")))


def case_mi_cardinality() -> ProcessDefinition:
    return _one(lambda b: b.task("n", loop=LoopSpec(True, cardinality="=boom")))


def case_mi_output_element() -> ProcessDefinition:
    loop = LoopSpec(True, cardinality="=2", output_collection="out", output_element="=boom")
    return _one(lambda b: b.task("n", loop=loop))


def case_mi_completion_condition() -> ProcessDefinition:
    loop = LoopSpec(True, cardinality="=3", completion_condition="=boom")
    return _one(lambda b: b.task("n", loop=loop))


def case_mi_sub_process_completion_condition() -> ProcessDefinition:
    b = _p().start_event("start")
    loop = LoopSpec(True, cardinality="=2", completion_condition="=boom")
    with b.sub_process("n", loop=loop):
        b.start_event("s1").end_event("e1").sequence("s1", "e1")
    return b.end_event("end").sequence("start", "n", "end").build()


def case_timer_catch() -> ProcessDefinition:
    return _one(lambda b: b.intermediate_catch_event("n", timer("=boom")))


def case_message_catch_key() -> ProcessDefinition:
    return _one(lambda b: b.intermediate_catch_event("n", message("paid", "=boom")))


def case_message_catch_name() -> ProcessDefinition:
    return _one(lambda b: b.intermediate_catch_event("n", message("=boom", "k")))


def case_receive_task_key() -> ProcessDefinition:
    return _one(lambda b: b.receive_task("n", "paid", "=boom"))


def case_signal_catch_name() -> ProcessDefinition:
    return _one(lambda b: b.intermediate_catch_event("n", signal("=boom")))


def case_message_throw_key() -> ProcessDefinition:
    return _one(lambda b: b.intermediate_throw_event("n", message("paid", "=boom")))


def case_message_throw_payload() -> ProcessDefinition:
    return _one(lambda b: b.intermediate_throw_event("n", message("paid", "k"), inputs=BOOM))


def case_signal_throw_name() -> ProcessDefinition:
    return _one(lambda b: b.intermediate_throw_event("n", signal("=boom")))


def _on_user_task(boundary: Callable[[ProcessBuilder], ProcessBuilder]) -> ProcessDefinition:
    b = boundary(_p().start_event("start").user_task("u").end_event("end").end_event("after"))
    return b.sequence("start", "u", "end").sequence("n", "after").build()


def case_timer_boundary() -> ProcessDefinition:
    return _on_user_task(lambda b: b.boundary_event("n", "u", timer("=boom")))


def case_message_boundary_key() -> ProcessDefinition:
    return _on_user_task(lambda b: b.boundary_event("n", "u", message("paid", "=boom")))


def case_event_based_gateway_arm() -> ProcessDefinition:
    b = _p().start_event("start").event_based_gateway("n")
    b.intermediate_catch_event("m", message("paid", "=boom"))
    b.intermediate_catch_event("t", timer("PT1H")).end_event("e1").end_event("e2")
    return b.sequence("start", "n", "m", "e1").sequence("n", "t", "e2").build()


def case_event_sub_process_key_at_start() -> ProcessDefinition:
    b = _p().start_event("n").user_task("u").end_event("end")
    with b.event_sub_process("esp"):
        b.start_event("es", message("paid", "=boom")).end_event("ee").sequence("es", "ee")
    return b.sequence("n", "u", "end").build()


def case_event_sub_process_timer_at_start() -> ProcessDefinition:
    b = _p().start_event("n").user_task("u").end_event("end")
    with b.event_sub_process("esp"):
        b.start_event("es", timer("=boom")).end_event("ee").sequence("es", "ee")
    return b.sequence("n", "u", "end").build()


def case_sub_process_input_mapping() -> ProcessDefinition:
    b = _p().start_event("start")
    with b.sub_process("n", inputs=BOOM):
        b.start_event("s1").end_event("e1").sequence("s1", "e1")
    return b.end_event("end").sequence("start", "n", "end").build()


def case_sub_process_output_mapping() -> ProcessDefinition:
    b = _p().start_event("start")
    with b.sub_process("n", outputs=BOOM):
        b.start_event("s1").task("t1").end_event("e1").sequence("s1", "t1", "e1")
    return b.end_event("end").sequence("start", "n", "end").build()


def case_sub_process_event_sub_process_key() -> ProcessDefinition:
    b = _p().start_event("start")
    with b.sub_process("n"):
        b.start_event("s1").user_task("u1").end_event("e1").sequence("s1", "u1", "e1")
        with b.event_sub_process("esp"):
            b.start_event("es", message("paid", "=boom")).end_event("ee").sequence("es", "ee")
    return b.end_event("end").sequence("start", "n", "end").build()


def _signal_event_sub_process(**start_fields: Any) -> ProcessBuilder:
    b = _p().start_event("start").user_task("u").end_event("end").sequence("start", "u", "end")
    return b


def case_nested_event_sub_process_key_when_its_parent_starts() -> ProcessDefinition:
    b = _signal_event_sub_process()
    with b.event_sub_process("esp"):
        b.start_event("n", signal("go"), is_interrupting=False).user_task("eu")
        b.end_event("ee").sequence("n", "eu", "ee")
        with b.event_sub_process("inner"):
            b.start_event("is", message("paid", "=boom")).end_event("ie").sequence("is", "ie")
    return b.build()


def case_event_sub_process_start_output_mapping() -> ProcessDefinition:
    b = _signal_event_sub_process()
    with b.event_sub_process("esp"):
        b.start_event("n", signal("go"), is_interrupting=False, outputs=BOOM)
        b.end_event("ee").sequence("n", "ee")
    return b.build()


def case_interrupting_boundary_output_mapping() -> ProcessDefinition:
    return _on_user_task(lambda b: b.boundary_event("n", "u", signal("go"), outputs=BOOM))


def case_non_interrupting_boundary_output_mapping() -> ProcessDefinition:
    return _on_user_task(
        lambda b: b.boundary_event("n", "u", signal("go"), cancel_activity=False, outputs=BOOM)
    )


def case_message_catch_output_mapping() -> ProcessDefinition:
    return _one(lambda b: b.intermediate_catch_event("n", message("paid", "k"), outputs=BOOM))


def case_user_task_output_mapping() -> ProcessDefinition:
    return _one(lambda b: b.user_task("n", outputs=BOOM))


def case_error_boundary_output_mapping() -> ProcessDefinition:
    b = _p().start_event("start").service_task("job", "charge").end_event("end")
    b.boundary_event("n", "job", _error("E1"), outputs=BOOM).end_event("after")
    return b.sequence("start", "job", "end").sequence("n", "after").build()


def case_error_event_sub_process_output_mapping() -> ProcessDefinition:
    b = _p().start_event("start").service_task("job", "charge").end_event("end")
    with b.event_sub_process("esp"):
        b.start_event("n", _error("E1"), outputs=BOOM).end_event("ee").sequence("n", "ee")
    return b.sequence("start", "job", "end").build()


def case_call_activity_output_mapping() -> ProcessDefinition:
    return _one(lambda b: b.call_activity("n", "child", outputs=BOOM))


def _error(code: str) -> Any:
    return error(code)


def _complete_user_task(run: Run) -> None:
    run.complete_task("n")


def _signal_go(node: str) -> Drive:
    def drive(run: Run) -> None:
        run.signal(node, "go")

    return drive


def _message_paid(run: Run) -> None:
    run.message("n", "paid", "k")


def _throw_e1(run: Run) -> None:
    run.throw_from_job("job", "E1")


def _child_done(run: Run) -> None:
    run.child_completed("n", r=1)


CASES: list[tuple[Callable[[], ProcessDefinition], Drive, str]] = [
    (case_exclusive_condition, _nothing, "n"),
    (case_inclusive_fork_condition, _nothing, "n"),
    (case_inclusive_join_condition, _nothing, "n"),
    (case_inclusive_join_chooses_no_flow, _nothing, "n"),
    (case_conditional_flow_out_of_a_task, _nothing, "n"),
    (case_task_input_mapping, _nothing, "n"),
    (case_task_output_mapping, _nothing, "n"),
    (case_script, _nothing, "n"),
    (case_script_not_dormants_error, _nothing, "n"),
    (case_job_type, _nothing, "n"),
    (case_job_retries, _nothing, "n"),
    (case_called_element, _nothing, "n"),
    (case_call_activity_input_mapping, _nothing, "n"),
    (case_decision_id, _nothing, "n"),
    (case_assignee, _nothing, "n"),
    (case_candidate_groups, _nothing, "n"),
    (case_mi_input_collection, _nothing, "n"),
    (case_mi_cardinality, _nothing, "n"),
    (case_mi_output_element, _nothing, "n"),
    (case_mi_completion_condition, _nothing, "n"),
    (case_mi_sub_process_completion_condition, _nothing, "n"),
    (case_timer_catch, _nothing, "n"),
    (case_message_catch_key, _nothing, "n"),
    (case_message_catch_name, _nothing, "n"),
    (case_receive_task_key, _nothing, "n"),
    (case_signal_catch_name, _nothing, "n"),
    (case_message_throw_key, _nothing, "n"),
    (case_message_throw_payload, _nothing, "n"),
    (case_signal_throw_name, _nothing, "n"),
    (case_timer_boundary, _nothing, "u"),
    (case_message_boundary_key, _nothing, "u"),
    (case_event_based_gateway_arm, _nothing, "n"),
    (case_event_sub_process_key_at_start, _nothing, "n"),
    (case_event_sub_process_timer_at_start, _nothing, "n"),
    (case_sub_process_input_mapping, _nothing, "n"),
    (case_sub_process_output_mapping, _nothing, "n"),
    (case_sub_process_event_sub_process_key, _nothing, "n"),
    (case_nested_event_sub_process_key_when_its_parent_starts, _signal_go("n"), "n"),
    (case_event_sub_process_start_output_mapping, _signal_go("n"), "n"),
    (case_interrupting_boundary_output_mapping, _signal_go("n"), "n"),
    (case_non_interrupting_boundary_output_mapping, _signal_go("n"), "n"),
    (case_message_catch_output_mapping, _message_paid, "n"),
    (case_user_task_output_mapping, _complete_user_task, "n"),
    (case_error_boundary_output_mapping, _throw_e1, "n"),
    (case_error_event_sub_process_output_mapping, _throw_e1, "n"),
    (case_call_activity_output_mapping, _child_done, "n"),
]


@pytest.mark.parametrize(("build", "drive", "node"), CASES, ids=[c[0].__name__[5:] for c in CASES])
def test_a_failing_expression_is_an_incident_at_its_node(
    build: Callable[[], ProcessDefinition], drive: Drive, node: str
) -> None:
    run = Run(build())
    run.start()
    drive(run)
    open_incidents = [i for i in run.cp.incidents.values() if not i.state.closed]
    assert [i.node_id for i in open_incidents] == [node], run.token_nodes()
    incident = open_incidents[0]
    assert run.status == "active_incidents"
    # On a live token an operator can act on: never one the step already ended.
    token = run.cp.tokens.get(incident.token_id)
    assert token is not None and token.state is TokenState.INCIDENT, run.token_nodes()
    assert token.node_id == node
    expected = "NoFlowTaken" if "no_flow" in build.__name__ else None
    if expected is not None:
        assert incident.cause_class == expected
    # The operator's way out works: drop it, then cancel the instance.
    run.drop(incident.id)
    assert run.incident(node).state is IncidentState.DEAD_LETTERED
    run.cancel()
    assert run.status == "terminated"


_DMN = (
    '<definitions xmlns="https://www.omg.org/spec/DMN/20191111/MODEL/" id="d" name="d" '
    'namespace="x"><decision id="greet" name="greet"><literalExpression><text>{}</text>'
    "</literalExpression></decision></definitions>"
)


@pytest.mark.parametrize("literal", ["boom", "crash"])
def test_a_decision_whose_expression_fails_is_an_incident_at_its_task(literal: str) -> None:
    from dormant.engine_core.dmn import read_dmn
    from dormant.engine_core.engine import Services

    decisions = {d.id: d for d in read_dmn(_DMN.format(literal))}
    definition = _one(lambda b: b.business_rule_task("n", decision_id="greet", result_variable="r"))
    run = Run(definition, services=Services(decisions=decisions))
    run.start()
    incident = run.incident("n")
    assert incident.cause_class == ("ExpressionError" if literal == "boom" else "RecursionError")
    assert run.cp.tokens[incident.token_id].state is TokenState.INCIDENT


def test_a_failure_not_of_dormants_making_names_its_class() -> None:
    run = Run(case_script_not_dormants_error())
    run.start()
    assert run.incident("n").cause_class == "RecursionError"


def test_a_cycle_whose_next_repetition_is_past_the_last_date_ends() -> None:
    """``R/P3000Y`` fires in 5026 and 8026; the next would be after year 9999: the
    cycle ends there instead of an ``OverflowError`` out of ``apply``."""
    from dormant.engine_core.builder import timer
    from dormant.engine_core.model import TimerKind

    b = _p().start_event("start").user_task("u").end_event("end").end_event("e2")
    b.boundary_event("bt", "u", timer("R/P3000Y", TimerKind.CYCLE), cancel_activity=False)
    run = Run(b.sequence("start", "u", "end").sequence("bt", "e2").build())
    run.start()
    run.fire("bt")
    run.fire("bt")
    assert run.waits("bt") == []
    assert len(run.facts_of("BoundaryFired")) == 2
    assert run.status == "active" and run.waits("u", "user_task")

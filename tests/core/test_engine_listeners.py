"""Execution listeners as Zeebe 8.8 runs them: blocking jobs before an element's
behaviour (start) and after it (end), their variables visible to the element, their
retries and incidents, and what the reader refuses."""

from __future__ import annotations

import pytest

from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.builder import (
    ProcessBuilder,
    compensate,
    error,
    link,
    message,
    terminate,
    timer,
)
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.errors import InvalidModel, UnsupportedElement
from dormant.engine_core.model import ExecutionListener, IoMapping, LoopSpec, ProcessDefinition
from dormant.engine_core.triggers import JobCompleted, JobErrorThrown, JobFailed, MessageReceived
from tests.core.enginekit import Run


def start(job_type: str, retries: str | None = None) -> ExecutionListener:
    return ExecutionListener("start", job_type, retries)


def end(job_type: str, retries: str | None = None) -> ExecutionListener:
    return ExecutionListener("end", job_type, retries)


def _listener_jobs(run: Run) -> list[tuple[str, str]]:
    """(node, job type) of every listener job dispatched so far, in order."""
    return [(e.node_id, e.job_type) for e in run.effects_of(DispatchJob) if e.job_type != "work"]


def complete(run: Run, job_type: str, **variables: object) -> None:
    [wait] = [w for w in run.cp.waits.values() if w.job_type == job_type]
    run.send(JobCompleted(wait_id=wait.id, attempt=wait.attempt, variables=variables))


def fail(run: Run, job_type: str) -> None:
    [wait] = [w for w in run.cp.waits.values() if w.job_type == job_type]
    run.send(JobFailed(wait_id=wait.id, attempt=wait.attempt, error="down", error_class="IOError"))


def _task(*listeners: ExecutionListener, **fields: object) -> ProcessDefinition:
    b = ProcessBuilder("listened")
    b.start_event("s").service_task(
        "t", job_type="work", execution_listeners=listeners, **fields
    ).end_event("e")
    b.sequence("s", "t", "e")
    return b.build()


def test_a_start_listener_runs_before_the_job_and_its_variables_reach_it() -> None:
    run = Run(_task(start("prepare")))
    run.start({"n": 1})
    assert run.waits(kind="job")[0].job_type == "prepare"
    assert run.effects_of(DispatchJob)[0].variables == {"n": 1}
    complete(run, "prepare", price=42)
    job = run.effects_of(DispatchJob)[-1]
    assert (job.job_type, job.variables) == ("work", {"n": 1, "price": 42})
    run.complete_job("t")
    assert run.status == "completed"
    # A start listener's variables are the element's local variables: gone with it.
    assert "price" not in run.variables


def test_a_start_listener_variable_sets_the_job_type_the_element_evaluates() -> None:
    b = ProcessBuilder("typed")
    b.start_event("s").service_task(
        "t", job_type="=kind", execution_listeners=(start("choose"),)
    ).end_event("e")
    b.sequence("s", "t", "e")
    run = Run(b.build())
    run.start()
    complete(run, "choose", kind="express-shipping")
    assert run.effects_of(DispatchJob)[-1].job_type == "express-shipping"


def test_input_mappings_apply_before_the_start_listeners() -> None:
    run = Run(_task(start("prepare"), inputs=(IoMapping("=n * 10", "local"),)))
    run.start({"n": 2})
    assert run.effects_of(DispatchJob)[0].variables == {"n": 2, "local": 20}


def test_start_listeners_run_in_order_each_seeing_the_last() -> None:
    run = Run(_task(start("first"), start("second")))
    run.start()
    assert [w.job_type for w in run.waits(kind="job")] == ["first"]
    complete(run, "first", a=1)
    assert run.effects_of(DispatchJob)[-1].variables == {"a": 1}
    complete(run, "second", b=2)
    assert _listener_jobs(run) == [("t", "first"), ("t", "second")]
    assert run.effects_of(DispatchJob)[-1].variables == {"a": 1, "b": 2}


def test_a_gateway_condition_reads_what_its_start_listener_set() -> None:
    b = ProcessBuilder("routed")
    b.start_event("s").exclusive_gateway("g", execution_listeners=(start("score"),))
    b.end_event("a").end_event("b")
    b.sequence("s", "g").flow("g", "a", condition="=score > 5").flow("g", "b", default=True)
    run = Run(b.build())
    run.start()
    assert run.token_nodes() == ["g:waiting"]
    complete(run, "score", score=9)
    assert run.status == "completed"
    assert [f.details["node"] for f in run.facts_of("EndEventReached")] == ["a"]
    assert "score" not in run.variables  # local to the gateway


def test_a_gateway_s_listener_scope_goes_with_the_token() -> None:
    b = ProcessBuilder("routed")
    b.start_event("s").exclusive_gateway("g", execution_listeners=(start("score"),))
    b.user_task("a").end_event("e")
    b.sequence("s", "g", "a", "e")
    run = Run(b.build())
    run.start()
    complete(run, "score", score=9)
    assert run.token_nodes() == ["a:waiting"]
    assert sorted(run.cp.scopes) == ["s0"]


def test_boundaries_are_armed_only_after_the_start_listeners() -> None:
    b = ProcessBuilder("bounded")
    b.start_event("s").service_task(
        "t", job_type="work", execution_listeners=(start("prepare"),)
    ).end_event("e")
    b.boundary_event("late", "t", timer("PT1M")).end_event("timed_out")
    b.sequence("s", "t", "e").sequence("late", "timed_out")
    run = Run(b.build())
    run.start()
    assert run.waits("late") == []
    complete(run, "prepare")
    assert [w.kind.value for w in run.waits("late")] == ["timer"]


def test_a_catch_event_subscribes_with_the_key_its_start_listener_set() -> None:
    b = ProcessBuilder("keyed")
    b.start_event("s").intermediate_catch_event(
        "wait", message("paid", "=orderId"), execution_listeners=(start("lookup"),)
    ).end_event("e")
    b.sequence("s", "wait", "e")
    run = Run(b.build())
    run.start()
    assert run.waits(kind="message") == []
    complete(run, "lookup", orderId="o-7")
    assert run.wait("wait", "message").correlation_key == "o-7"
    run.message("wait", "paid", "o-7")
    assert run.status == "completed"


def test_a_sub_process_start_listener_writes_into_its_scope() -> None:
    b = ProcessBuilder("inner")
    b.start_event("s")
    with b.sub_process(
        "sub", execution_listeners=(start("prepare"),), inputs=(IoMapping("=1", "one"),)
    ):
        b.start_event("ss").service_task("t", job_type="work").end_event("se")
        b.sequence("ss", "t", "se")
    b.end_event("e").sequence("s", "sub", "e")
    run = Run(b.build())
    run.start()
    assert run.effects_of(DispatchJob)[0].variables == {"one": 1}
    complete(run, "prepare", limit=3)
    assert run.effects_of(DispatchJob)[-1].variables == {"one": 1, "limit": 3}
    run.complete_job("t")
    assert run.status == "completed" and "limit" not in run.variables


def test_end_listeners_run_after_the_outputs_and_before_the_token_leaves() -> None:
    run = Run(_task(end("audit"), end("notify"), outputs=(IoMapping("=result * 2", "doubled"),)))
    run.start()
    run.complete_job("t", result=4)
    assert run.token_nodes() == ["t:waiting"]
    assert run.effects_of(DispatchJob)[-1].variables["doubled"] == 8
    complete(run, "audit", audited=True)
    assert run.token_nodes() == ["t:waiting"]
    assert run.variables["audited"] is True  # propagated outward, like an output
    complete(run, "notify")
    assert run.status == "completed"
    assert _listener_jobs(run) == [("t", "audit"), ("t", "notify")]


def test_end_listeners_close_the_element_s_boundaries() -> None:
    b = ProcessBuilder("closing")
    b.start_event("s").service_task(
        "t", job_type="work", execution_listeners=(end("audit"),)
    ).end_event("e")
    b.boundary_event("late", "t", timer("PT1M")).end_event("timed_out")
    b.sequence("s", "t", "e").sequence("late", "timed_out")
    run = Run(b.build())
    run.start()
    run.complete_job("t")
    assert run.waits("late") == []


def test_start_and_end_listeners_on_events_and_a_none_end() -> None:
    b = ProcessBuilder("events")
    b.start_event("s", execution_listeners=(end("left-start"),))
    b.end_event("e", execution_listeners=(start("arrive"), end("finish")))
    b.sequence("s", "e")
    run = Run(b.build())
    run.start()
    for job_type in ("left-start", "arrive", "finish"):
        assert run.status == "active"
        complete(run, job_type)
    assert run.status == "completed"
    assert _listener_jobs(run) == [("s", "left-start"), ("e", "arrive"), ("e", "finish")]


def test_a_failed_listener_is_an_incident_and_its_retry_runs_only_it() -> None:
    run = Run(_task(start("first"), start("second", retries="1")))
    run.start()
    complete(run, "first", a=1)
    fail(run, "second")
    incident = run.incident("t")
    assert "start execution listener 'second' failed" in incident.cause
    assert run.token_nodes() == ["t:incident"]
    run.retry(incident.id)
    assert [w.job_type for w in run.waits(kind="job")] == ["second"]  # not 'first' again
    complete(run, "second", b=2)
    assert run.effects_of(DispatchJob)[-1].variables == {"a": 1, "b": 2}
    run.complete_job("t")
    assert run.status == "completed"
    assert _listener_jobs(run) == [("t", "first"), ("t", "second"), ("t", "second")]


def test_a_failed_listener_is_retried_by_the_job_machinery_first() -> None:
    run = Run(_task(start("flaky", retries="2")))
    run.start()
    fail(run, "flaky")
    assert run.cp.incidents == {}
    assert run.facts_of("JobRetryScheduled", node="t")


def test_a_failed_end_listener_retries_only_it() -> None:
    run = Run(_task(end("audit", retries="1")))
    run.start()
    run.complete_job("t", result=1)
    fail(run, "audit")
    incident = run.incident("t")
    run.retry(incident.id)
    assert [w.job_type for w in run.waits(kind="job")] == ["audit"]  # the task is not rerun
    complete(run, "audit")
    assert run.status == "completed"


def test_a_start_listener_failure_then_retry_arms_the_boundaries() -> None:
    b = ProcessBuilder("bounded")
    b.start_event("s").service_task(
        "t", job_type="work", execution_listeners=(start("prepare", retries="1"),)
    ).end_event("e")
    b.boundary_event("late", "t", timer("PT1M")).end_event("timed_out")
    b.sequence("s", "t", "e").sequence("late", "timed_out")
    run = Run(b.build())
    run.start()
    fail(run, "prepare")
    incident = run.incident("t")
    assert not incident.boundaries_armed and run.waits("late") == []  # none armed yet
    run.retry(incident.id)
    complete(run, "prepare")
    assert [w.kind.value for w in run.waits("late")] == ["timer"]


def test_a_listener_job_throwing_a_bpmn_error_is_an_incident() -> None:
    run = Run(_task(start("prepare")))
    run.start()
    [wait] = run.waits(kind="job")
    run.send(JobErrorThrown(wait_id=wait.id, attempt=1, code="E1", message="no", variables={}))
    incident = run.incident("t")
    assert incident.cause_class == "ListenerBpmnError"


def test_a_listener_type_that_fails_to_evaluate_is_an_incident() -> None:
    run = Run(_task(start("first"), start("=missing")))
    run.start()
    complete(run, "first")
    incident = run.incident("t")
    assert "job type" in incident.cause
    run.cp.scopes["s0"].variables["missing"] = "found"
    run.retry(incident.id)
    # An evaluation failure re-runs the phase from its first listener (Zeebe).
    assert [w.job_type for w in run.waits(kind="job")] == ["first"]


# -- the reader ---------------------------------------------------------------------

_HEAD = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
  xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d">
  <bpmn:process id="p" isExecutable="true">{body}</bpmn:process>
</bpmn:definitions>"""


def _ext(*listeners: str) -> str:
    return (
        "<bpmn:extensionElements><zeebe:executionListeners>"
        + "".join(listeners)
        + "</zeebe:executionListeners></bpmn:extensionElements>"
    )


def _el(event: str, job_type: str, retries: str = "") -> str:
    extra = f' retries="{retries}"' if retries else ""
    return f'<zeebe:executionListener eventType="{event}" type="{job_type}"{extra}/>'


def _linear(middle: str) -> str:
    return _HEAD.format(
        body='<bpmn:startEvent id="s"/>'
        + middle
        + '<bpmn:endEvent id="e"/>'
        + '<bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="x"/>'
        + '<bpmn:sequenceFlow id="f2" sourceRef="x" targetRef="e"/>'
    )


def test_the_reader_takes_listeners_in_model_order() -> None:
    d = read_bpmn(
        _linear(f'<bpmn:task id="x">{_ext(_el("end", "b"), _el("start", "a", "5"))}</bpmn:task>')
    )[0]
    node = d.node("x")
    assert node.listeners("start") == (ExecutionListener("start", "a", "5"),)
    assert node.listeners("end") == (ExecutionListener("end", "b"),)


@pytest.mark.parametrize(
    ("middle", "names"),
    [
        (
            f'<bpmn:exclusiveGateway id="x">{_ext(_el("end", "a"))}</bpmn:exclusiveGateway>',
            "gateway has no end listeners",
        ),
    ],
)
def test_listeners_where_they_do_not_run_are_refused_naming_the_element(
    middle: str, names: str
) -> None:
    with pytest.raises(UnsupportedElement) as info:
        read_bpmn(_linear(middle))
    assert "'x'" in str(info.value) and names in str(info.value)
    assert "zeebe:executionListener" in str(info.value)


def test_refusals_from_zeebe_s_limits() -> None:
    b = ProcessBuilder("refused")
    b.start_event("s", execution_listeners=(start("a"),)).end_event("e").sequence("s", "e")
    with pytest.raises(UnsupportedElement, match="startEvent has no start listeners"):
        b.build()
    b = ProcessBuilder("refused")
    b.start_event("s").end_event("e", execution_listeners=(end("a"),))
    b.sequence("s", "e")
    b.build()  # a none end event takes end listeners


@pytest.mark.parametrize(
    ("listeners", "needle"),
    [
        ((_el("start", "a"), _el("start", "a")), "two start execution listeners"),
        ((_el("begin", "a"),), "eventType 'begin'"),
        (('<zeebe:executionListener eventType="start"/>',), "without a type"),
        ((_el("start", "dormant.start"),), "reserved"),
        ((_el("start", "=1 +"),), "not valid FEEL"),
    ],
)
def test_malformed_listeners_are_refused(listeners: tuple[str, ...], needle: str) -> None:
    with pytest.raises(InvalidModel, match=needle):
        read_bpmn(_linear(f'<bpmn:task id="x">{_ext(*listeners)}</bpmn:task>'))


def test_a_start_listener_on_an_event_based_gateway_target_is_refused() -> None:
    b = ProcessBuilder("raced")
    b.start_event("s").event_based_gateway("g")
    b.intermediate_catch_event("m", message("go", "=k"), execution_listeners=(start("a"),))
    b.intermediate_catch_event("t", timer("PT1M")).end_event("e1").end_event("e2")
    b.sequence("s", "g", "m", "e1").sequence("g", "t", "e2")
    with pytest.raises(UnsupportedElement, match="event-based gateway"):
        b.build()


def _multi(sequential: bool) -> ProcessDefinition:
    b = ProcessBuilder("mi")
    b.start_event("s").service_task(
        "t",
        job_type="work",
        loop=LoopSpec(
            sequential=sequential,
            input_collection="=[1, 2]",
            input_element="item",
            output_collection="results",
            output_element="=seen",
        ),
        execution_listeners=(start("prep"), end("post")),
    ).end_event("e")
    b.sequence("s", "t", "e")
    return b.build()


@pytest.mark.parametrize("sequential", [False, True])
def test_listeners_of_a_multi_instance_activity_run_on_each_inner_instance(
    sequential: bool,
) -> None:
    run = Run(_multi(sequential))
    run.start()
    for _ in range(2):
        prep = next(w for w in run.cp.waits.values() if w.job_type == "prep")
        item = run.cp.scopes[run.cp.tokens[prep.token_id or ""].inner_scope or ""].variables
        run.send(JobCompleted(wait_id=prep.id, attempt=1, variables={"doubled": item["item"] * 2}))
        work = next(w for w in run.cp.waits.values() if w.job_type == "work")
        job = [e for e in run.effects_of(DispatchJob) if e.wait_id == work.id][-1]
        assert job.variables["doubled"] == job.variables["item"] * 2  # its own listener's
        run.send(
            JobCompleted(wait_id=work.id, attempt=1, variables={"seen": job.variables["item"]})
        )
        post = next(w for w in run.cp.waits.values() if w.job_type == "post")
        assert run.status == "active"  # the inner instance waits for its end listener
        run.send(JobCompleted(wait_id=post.id, attempt=1, variables={"audited": True}))
    assert run.status == "completed"
    assert run.variables["results"] == [1, 2]
    assert run.variables["audited"] is True
    order = [j for _, j in _listener_jobs(run)]
    assert order == (
        ["prep", "post", "prep", "post"] if sequential else ["prep", "prep", "post", "post"]
    )


def _refused(build: ProcessBuilder, needle: str) -> None:
    with pytest.raises(UnsupportedElement, match=needle):
        build.build()


def test_the_kinds_that_take_no_listener_of_an_event_type() -> None:
    b = ProcessBuilder("r1")
    b.start_event("s").service_task("t", job_type="w").end_event("e")
    b.boundary_event("late", "t", timer("PT1M"), execution_listeners=(start("a"),))
    b.end_event("x").sequence("s", "t", "e").sequence("late", "x")
    _refused(b, "boundaryEvent has no start listeners")

    b = ProcessBuilder("r2")
    b.start_event("s").end_event("e", error("E1"), execution_listeners=(end("a"),))
    b.sequence("s", "e")
    _refused(b, "error end event has no end listeners")

    b = ProcessBuilder("r6")
    b.start_event("s").service_task("t", job_type="w").end_event("e")
    b.boundary_event(
        "undo", "t", compensate(), compensation_handler="h", execution_listeners=(end("a"),)
    )
    b.service_task("h", job_type="u", is_for_compensation=True)
    b.sequence("s", "t", "e")
    _refused(b, "compensation boundary event has no listeners")


def test_start_listener_variables_are_checked_like_any_variable() -> None:
    run = Run(_task(start("prepare")))
    run.start()
    complete(run, "prepare", bad="x\u0000y")
    incident = run.incident("t")
    assert incident.cause_class == "InvalidVariables"


def test_an_end_listener_type_that_fails_to_evaluate_is_an_incident() -> None:
    run = Run(_task(end("=missing")))
    run.start()
    run.complete_job("t")
    incident = run.incident("t")
    assert "job type" in incident.cause
    run.cp.scopes["s0"].variables["missing"] = "audit"
    run.retry(incident.id)
    complete(run, "audit")
    assert run.status == "completed"
    assert len(run.effects_of(DispatchJob)) == 2  # the task's job ran once


# -- the process's own listeners ------------------------------------------------------


def _process(*listeners: ExecutionListener) -> ProcessDefinition:
    b = ProcessBuilder("whole", execution_listeners=listeners)
    b.start_event("s").service_task("t", job_type="work").end_event("e")
    b.sequence("s", "t", "e")
    return b.build()


def test_process_start_listeners_run_before_the_start_event_and_set_process_variables() -> None:
    run = Run(_process(start("open"), end("close")))
    run.start({"n": 1})
    assert [w.job_type for w in run.waits(kind="job")] == ["open"]
    assert run.facts_of("EndEventReached") == []
    complete(run, "open", customer="c-1")
    assert run.variables["customer"] == "c-1"  # a process variable, kept to the end
    assert run.effects_of(DispatchJob)[-1].variables == {"n": 1, "customer": "c-1"}
    run.complete_job("t")
    # The last path ended at e: the process's end listener runs there, then it completes.
    assert run.status == "active"
    assert [(w.node_id, w.job_type) for w in run.waits(kind="job")] == [("e", "close")]
    complete(run, "close", closed=True)
    assert run.status == "completed"
    assert run.variables["closed"] is True


def test_a_failing_process_listener_is_an_incident_retried_alone() -> None:
    run = Run(_process(end("close", retries="1")))
    run.start()
    run.complete_job("t")
    fail(run, "close")
    incident = run.incident("e")
    assert "process-end execution listener 'close'" in incident.cause
    run.retry(incident.id)
    complete(run, "close")
    assert run.status == "completed"
    assert len([e for e in run.effects_of(DispatchJob) if e.job_type == "work"]) == 1


def test_process_end_listeners_close_its_event_sub_processes() -> None:
    b = ProcessBuilder("esp", execution_listeners=(end("close"),))
    b.start_event("s").end_event("e").sequence("s", "e")
    with b.event_sub_process("late"):
        b.start_event("ls", message("poke", "=k")).end_event("le").sequence("ls", "le")
    run = Run(b.build())
    run.start({"k": "1"})
    assert run.waits(kind="message") == []  # withdrawn: the process is completing
    complete(run, "close")
    assert run.status == "completed"


# -- an event sub-process's listeners -------------------------------------------------


def _event_sub(interrupting: bool) -> ProcessDefinition:
    b = ProcessBuilder("esp")
    b.start_event("s").user_task("wait").end_event("e").sequence("s", "wait", "e")
    with b.event_sub_process("on_poke", execution_listeners=(start("open"), end("close"))):
        b.start_event("ps", message("poke", "=k"), is_interrupting=interrupting)
        b.service_task("handle", job_type="work").end_event("pe")
        b.sequence("ps", "handle", "pe")
    return b.build()


@pytest.mark.parametrize("interrupting", [True, False])
def test_an_event_sub_process_runs_its_listeners_around_itself(interrupting: bool) -> None:
    run = Run(_event_sub(interrupting))
    run.start({"k": "1"})
    run.send(
        MessageReceived(
            wait_id=run.wait("ps", "message").id, name="poke", correlation_key="1", variables={}
        )
    )
    assert [w.job_type for w in run.waits(kind="job")] == ["open"]
    complete(run, "open", reason="poked")
    job = run.effects_of(DispatchJob)[-1]
    assert (job.job_type, job.variables["reason"]) == ("work", "poked")
    run.complete_job("handle")
    assert [(w.node_id, w.job_type) for w in run.waits(kind="job")] == [("pe", "close")]
    complete(run, "close", handled=True)
    assert run.variables["handled"] is True and "reason" not in run.variables
    if interrupting:
        assert run.status == "completed"
    else:
        assert run.token_nodes() == ["wait:waiting"]
        run.complete_task("wait")
        assert run.status == "completed"


# -- joining gateways ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["parallel", "inclusive"])
def test_a_joining_gateway_runs_its_start_listeners_once_joined(kind: str) -> None:
    b = ProcessBuilder("joined")
    b.start_event("s").parallel_gateway("fork")
    b.service_task("a", job_type="work").service_task("b", job_type="work")
    join = b.parallel_gateway if kind == "parallel" else b.inclusive_gateway
    join("join", execution_listeners=(start("merge"),))
    b.end_event("hi").end_event("lo")
    b.sequence("s", "fork", "a", "join").sequence("fork", "b", "join")
    if kind == "parallel":
        b.sequence("join", "hi")
    else:
        b.flow("join", "hi", condition="=total > 5").flow("join", "lo", default=True)
    run = Run(b.build())
    run.start()
    for wait in run.waits(kind="job"):
        run.send(JobCompleted(wait_id=wait.id, attempt=1, variables={}))
    assert [w.job_type for w in run.waits(kind="job")] == ["merge"]  # once, for the join
    assert run.token_nodes() == ["join:waiting"]
    complete(run, "merge", total=9)
    assert run.status == "completed"
    assert [f.details["node"] for f in run.facts_of("EndEventReached")] == ["hi"]


def test_a_joining_gateway_s_failed_listener_is_retried() -> None:
    b = ProcessBuilder("joined")
    b.start_event("s").parallel_gateway("fork").task("a").task("b")
    b.inclusive_gateway("join", execution_listeners=(start("merge", retries="1"),))
    b.end_event("e")
    b.sequence("s", "fork", "a", "join", "e").sequence("fork", "b", "join")
    run = Run(b.build())
    run.start()
    fail(run, "merge")
    incident = run.incident("join")
    run.retry(incident.id)
    complete(run, "merge")
    assert run.status == "completed"


def test_a_listener_index_past_the_node_s_listeners_ends_the_phase() -> None:
    """An instance migrated (or its model redeployed) to a node with fewer listeners
    than the one it was running: the phase ends and the element runs."""
    run = Run(_task(start("first"), start("second", retries="1")))
    run.start()
    complete(run, "first")
    fail(run, "second")
    incident = run.incident("t")
    run.defn = _task(start("first"))
    run.retry(incident.id)
    assert [w.job_type for w in run.waits(kind="job")] == ["work"]


def test_a_reserved_job_type_on_a_process_listener_is_refused() -> None:
    b = ProcessBuilder("reserved", execution_listeners=(start("dormant.start"),))
    b.start_event("s").end_event("e").sequence("s", "e")
    with pytest.raises(InvalidModel, match="reserved"):
        b.build()


@pytest.mark.parametrize("at_end", [False, True])
def test_a_compensation_throw_runs_its_listeners_around_the_handlers(at_end: bool) -> None:
    b = ProcessBuilder("undo")
    b.start_event("s").service_task("charge", job_type="charge")
    b.boundary_event("comp", "charge", compensate(), compensation_handler="refund")
    b.service_task("refund", job_type="refund", is_for_compensation=True)
    listened = (start("before-undo"), end("after-undo"))
    if at_end:
        b.end_event("undo", compensate(), execution_listeners=listened)
        b.sequence("s", "charge", "undo")
    else:
        b.intermediate_throw_event("undo", compensate(), execution_listeners=listened)
        b.end_event("e").sequence("s", "charge", "undo", "e")
    run = Run(b.build())
    run.start()
    complete(run, "charge")
    assert [w.job_type for w in run.waits(kind="job")] == ["before-undo"]
    complete(run, "before-undo")
    assert [w.job_type for w in run.waits(kind="job")] == ["refund"]
    complete(run, "refund")
    assert [w.job_type for w in run.waits(kind="job")] == ["after-undo"]
    complete(run, "after-undo")
    assert run.status == "completed"


def test_a_terminate_end_runs_its_end_listeners_after_terminating() -> None:
    b = ProcessBuilder("stop")
    b.start_event("s").parallel_gateway("fork").user_task("slow").end_event("e1")
    b.end_event("stop", terminate(), execution_listeners=(end("audit"),))
    b.sequence("s", "fork", "slow", "e1").sequence("fork", "stop")
    run = Run(b.build())
    run.start()
    assert run.waits(kind="user_task") == []  # terminated before the listener runs
    assert [w.job_type for w in run.waits(kind="job")] == ["audit"]
    complete(run, "audit")
    assert run.status == "completed"


def test_a_link_throw_runs_its_end_listeners_before_the_jump() -> None:
    b = ProcessBuilder("jump")
    b.start_event("s").intermediate_throw_event("l", link("L"), execution_listeners=(end("audit"),))
    b.intermediate_catch_event("lc", link("L")).end_event("e")
    b.sequence("s", "l").sequence("lc", "e")
    run = Run(b.build())
    run.start()
    assert run.token_nodes() == ["l:waiting"]
    complete(run, "audit")
    assert run.status == "completed"
    assert [f.details["node"] for f in run.facts_of("EndEventReached")] == ["e"]


def test_a_user_task_is_assigned_from_its_start_listener_and_ends_through_its_end_listener() -> (
    None
):
    b = ProcessBuilder("assigned")
    b.start_event("s").user_task(
        "review", assignee="=owner", execution_listeners=(start("route"), end("archive"))
    ).end_event("e")
    b.sequence("s", "review", "e")
    run = Run(b.build())
    run.start()
    assert run.waits(kind="user_task") == []  # created only after its start listener
    complete(run, "route", owner="ana")
    assert run.wait("review", "user_task").assignee == "ana"
    run.complete_task("review", approved=True)
    assert [w.job_type for w in run.waits(kind="job")] == ["archive"]
    complete(run, "archive")
    assert run.status == "completed" and run.variables["approved"] is True

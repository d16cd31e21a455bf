"""The job-worker implementation of ad-hoc sub-processes (Camunda 8.8's AI-agent form):
a job of the sub-process decides which inner elements run, with what local variables,
and when it is done; ``outputCollection`` gathers what each completed element adds;
after each inner path a new job shows the worker the grown collection."""

from __future__ import annotations

from typing import Any

from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.triggers import AdHocActivation, AdHocResult, JobCompleted
from tests.core.enginekit import Run

AGENT = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
  xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d">
  <bpmn:process id="agentic" isExecutable="true">
    <bpmn:startEvent id="s"/>
    <bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="agent"/>
    <bpmn:adHocSubProcess id="agent" name="Agent">
      <bpmn:extensionElements>
        <zeebe:taskDefinition type="ai-agent" retries="2"/>
        <zeebe:adHoc outputCollection="toolCallResults"
                     outputElement="={id: toolCall.id, content: toolCallResult}"/>
      </bpmn:extensionElements>
      <bpmn:serviceTask id="lookup" name="Look up">
        <bpmn:extensionElements>
          <zeebe:taskDefinition type="lookup"/>
          <zeebe:ioMapping>
            <zeebe:input source="=fromAi(toolCall.query, &quot;what to look up&quot;)"
                         target="query"/>
          </zeebe:ioMapping>
        </bpmn:extensionElements>
      </bpmn:serviceTask>
      <bpmn:task id="shrug" name="Shrug"/>
    </bpmn:adHocSubProcess>
    <bpmn:sequenceFlow id="f2" sourceRef="agent" targetRef="e"/>
    <bpmn:endEvent id="e"/>
  </bpmn:process>
</bpmn:definitions>
"""


def _run() -> Run:
    run = Run(read_bpmn(AGENT)[0])
    run.start({"question": "why?"})
    return run


def _agent(
    run: Run,
    *calls: tuple[str, dict[str, Any]],
    done: bool = False,
    cancel: bool = False,
    **variables: Any,
) -> None:
    wait = run.wait("agent", "job")
    result = AdHocResult(
        activate=[AdHocActivation(element_id=e, variables=v) for e, v in calls],
        completion_condition_fulfilled=done,
        cancel_remaining=cancel,
    )
    run.send(
        JobCompleted(wait_id=wait.id, attempt=wait.attempt, variables=variables, ad_hoc=result)
    )


def _dispatched(run: Run, node: str) -> list[DispatchJob]:
    return [e for e in run.effects_of(DispatchJob) if e.node_id == node]


def test_the_agent_job_activates_tools_with_local_variables_and_sees_their_results() -> None:
    run = _run()
    (first,) = _dispatched(run, "agent")
    assert first.job_type == "ai-agent"
    assert [e["elementId"] for e in first.variables["adHocSubProcessElements"]] == [
        "lookup",
        "shrug",
    ]
    assert first.variables["toolCallResults"] == [] and first.variables["question"] == "why?"

    _agent(run, ("lookup", {"toolCall": {"id": "c1", "query": "q1"}}), agent={"turn": 1})
    (lookup,) = _dispatched(run, "lookup")
    assert lookup.variables["query"] == "q1" and lookup.variables["toolCall"]["id"] == "c1"
    assert run.waits("agent", "job") == []  # the worker is not asked while a tool runs

    run.complete_job("lookup", toolCallResult="found it")
    first_again, again = _dispatched(run, "agent")
    assert first_again is first
    assert again.variables["toolCallResults"] == [{"id": "c1", "content": "found it"}]
    assert "toolCall" not in again.variables  # local to the element, gone with it

    _agent(run, done=True, agent={"turn": 2})
    assert run.status == "completed"
    assert run.variables["agent"] == {"turn": 2}
    assert run.facts_of("AdHocJobCompleted", node="agent", fulfilled=True)


def test_two_calls_of_one_tool_each_keep_their_own_arguments() -> None:
    run = _run()
    _agent(
        run,
        ("lookup", {"toolCall": {"id": "c1", "query": "q1"}}),
        ("lookup", {"toolCall": {"id": "c2", "query": "q2"}}),
    )
    jobs = _dispatched(run, "lookup")
    assert sorted(j.variables["query"] for j in jobs) == ["q1", "q2"]
    first, second = run.waits("lookup", "job")
    run.send(JobCompleted(wait_id=first.id, attempt=1, variables={"toolCallResult": 1}))
    assert len(run.waits("agent", "job")) == 1
    run.send(JobCompleted(wait_id=second.id, attempt=1, variables={"toolCallResult": 2}))
    assert len(run.waits("agent", "job")) == 1, "one job open at a time"
    collected = run.cp.scopes[run.tokens("agent")[0].inner_scope or ""].variables
    assert sorted(r["id"] for r in collected["toolCallResults"]) == ["c1", "c2"]


def _one_of_two_tools_done(cancel: bool) -> Run:
    """Two tools run; the first one's end asks the agent, which says it is done."""
    run = _run()
    _agent(
        run,
        ("lookup", {"toolCall": {"id": "c1", "query": "q1"}}),
        ("lookup", {"toolCall": {"id": "c2", "query": "q2"}}),
    )
    first = run.waits("lookup", "job")[0]
    run.send(JobCompleted(wait_id=first.id, attempt=1, variables={"toolCallResult": 1}))
    _agent(run, done=True, cancel=cancel)
    return run


def test_done_with_a_tool_still_running_cancels_it_or_waits_for_it() -> None:
    cancelled = _one_of_two_tools_done(cancel=True)
    assert cancelled.status == "completed" and cancelled.cp.waits == {}

    waiting = _one_of_two_tools_done(cancel=False)
    assert waiting.status == "active" and waiting.waits("agent", "job") == []
    waiting.complete_job("lookup", toolCallResult="late")
    assert waiting.status == "completed"
    assert len(waiting.variables.get("toolCallResults", [])) == 0, "local to the sub-process"


def test_a_result_naming_an_element_that_cannot_run_is_an_incident_and_retry_asks_again() -> None:
    run = _run()
    _agent(run, ("nope", {}))
    incident = run.incident("agent")
    assert "'nope'" in incident.cause and "lookup, shrug" in incident.cause
    assert run.waits("lookup") == []
    run.retry(incident.id)
    assert len(run.waits("agent", "job")) == 1
    assert run.tokens("agent")[0].state == "waiting"

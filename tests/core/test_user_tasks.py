"""User tasks as Camunda users model them, pure core: the attributes evaluated at
creation (literal or FEEL, a wrong type an incident naming the attribute), what the
reader refuses, assign / claim / update, and the task listeners' lifecycle (blocking
jobs that may correct attributes or deny a transition)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.checkpoint import TaskState, decode, encode
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.errors import InvalidModel, UnsupportedElement
from dormant.engine_core.model import ProcessDefinition
from dormant.engine_core.triggers import TaskAssign, TaskUpdate
from tests.core.enginekit import Run


def process(extensions: str, *, after: str = "") -> ProcessDefinition:
    xml = f"""<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
                  xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="defs">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:userTask id="review" name="Review">
      <bpmn:extensionElements><zeebe:userTask/>{extensions}</bpmn:extensionElements>
    </bpmn:userTask>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="review"/>
    <bpmn:sequenceFlow id="f2" sourceRef="review" targetRef="end"/>
  </bpmn:process>
</bpmn:definitions>"""
    return read_bpmn(xml)[0]


ALL_STATIC = (
    '<zeebe:assignmentDefinition assignee="ann" candidateUsers="bob, cy" '
    'candidateGroups="ops,finance"/>'
    '<zeebe:taskSchedule dueDate="2026-02-01T12:00:00Z" followUpDate="2026-01-20T08:00:00+01:00"/>'
    '<zeebe:priorityDefinition priority="80"/>'
    '<zeebe:formDefinition formId="review-form"/>'
)


def test_static_attributes_are_stored_on_the_task() -> None:
    run = Run(process(ALL_STATIC))
    run.start()
    task = run.wait("review", "user_task")
    assert task.assignee == "ann"
    assert task.candidate_users == ["bob", "cy"]
    assert task.candidate_groups == ["ops", "finance"]
    assert task.due_date == datetime(2026, 2, 1, 12, tzinfo=UTC)
    assert task.follow_up_date == datetime(2026, 1, 20, 7, tzinfo=UTC)
    assert task.priority == 80
    assert (task.form_id, task.form_key, task.external_reference) == ("review-form", None, None)
    assert task.task_state is TaskState.CREATED


def test_feel_attributes_are_evaluated_when_the_task_is_created() -> None:
    run = Run(
        process(
            '<zeebe:assignmentDefinition assignee="=owner" candidateUsers="=team" '
            'candidateGroups="=[dept, &quot;all&quot;]"/>'
            '<zeebe:taskSchedule dueDate="=now() + duration(&quot;P2D&quot;)" '
            'followUpDate="=&quot;2026-01-06T00:00:00Z&quot;"/>'
            '<zeebe:priorityDefinition priority="=level * 10"/>'
            '<zeebe:formDefinition externalReference="=&quot;https://f/&quot; + owner"/>'
        )
    )
    run.start({"owner": "ann", "team": ["bob", "cy"], "dept": "ops", "level": 7})
    task = run.wait("review", "user_task")
    assert (task.assignee, task.candidate_users, task.candidate_groups) == (
        "ann",
        ["bob", "cy"],
        ["ops", "all"],
    )
    assert task.due_date == datetime(2026, 1, 7, 9, tzinfo=UTC)  # T0 + 2 days
    assert task.follow_up_date == datetime(2026, 1, 6, tzinfo=UTC)
    assert task.priority == 70
    assert task.external_reference == "https://f/ann"


def test_priority_defaults_to_50_and_a_null_expression_leaves_an_attribute_unset() -> None:
    run = Run(process('<zeebe:assignmentDefinition assignee="=nobody"/>'))
    run.start()
    task = run.wait("review", "user_task")
    assert (task.priority, task.assignee) == (50, None)


@pytest.mark.parametrize(
    ("extension", "variables", "names"),
    [
        ('<zeebe:assignmentDefinition assignee="=n"/>', {"n": 5}, "assignee"),
        ('<zeebe:assignmentDefinition candidateUsers="=u"/>', {"u": "ann"}, "candidateUsers"),
        ('<zeebe:assignmentDefinition candidateGroups="=g"/>', {"g": [1]}, "candidateGroups"),
        ('<zeebe:taskSchedule dueDate="=d"/>', {"d": "tomorrow"}, "dueDate"),
        ('<zeebe:taskSchedule followUpDate="=d"/>', {"d": 3}, "followUpDate"),
        (
            '<zeebe:taskSchedule dueDate="=date and time(&quot;2026-01-01T00:00:00&quot;)"/>',
            {},
            "no time zone",
        ),
        ('<zeebe:priorityDefinition priority="=p"/>', {"p": 101}, "priority"),
        ('<zeebe:priorityDefinition priority="=p"/>', {"p": 1.5}, "priority"),
        ('<zeebe:formDefinition externalReference="=r"/>', {"r": True}, "externalReference"),
        ('<zeebe:assignmentDefinition assignee="=n"/>', {"n": "a" * 256}, "1 to 255 characters"),
        (
            '<zeebe:assignmentDefinition candidateUsers="=u"/>',
            {"u": [f"u{i}" for i in range(101)]},
            "101 entries, at most 100",
        ),
    ],
)
def test_a_feel_result_of_the_wrong_type_is_an_incident_naming_the_attribute(
    extension: str, variables: dict[str, Any], names: str
) -> None:
    run = Run(process(extension))
    run.start(variables)
    incident = run.incident("review")
    assert incident.cause_class == "InvalidTaskAttribute"
    assert names in incident.cause
    assert run.waits("review", "user_task") == []


@pytest.mark.parametrize(
    ("extension", "message"),
    [
        ('<zeebe:priorityDefinition priority="high"/>', "priority 'high' is not an integer"),
        ('<zeebe:priorityDefinition priority="150"/>', "from 0 to 100"),
        ('<zeebe:taskSchedule dueDate="next week"/>', "not an ISO 8601"),
        ('<zeebe:taskSchedule dueDate="2026-01-01T00:00:00"/>', "no time zone"),
        ('<zeebe:formDefinition formId="a" formKey="b"/>', "formKey and formId"),
        ('<zeebe:assignmentDefinition assignee="=a +"/>', "not valid FEEL"),
    ],
)
def test_a_wrong_literal_refuses_the_model_at_deploy(extension: str, message: str) -> None:
    with pytest.raises(InvalidModel, match=message):
        process(extension)


@pytest.mark.parametrize(
    ("extension", "attribute"),
    [
        ('<zeebe:assignmentDefinition assignee="a" candidateRoles="x"/>', "candidateRoles"),
        ('<zeebe:taskSchedule dueDate="2026-01-01T00:00:00Z" reminder="P1D"/>', "reminder"),
        ('<zeebe:priorityDefinition priority="1" weight="2"/>', "weight"),
        ('<zeebe:userTask mode="x"/>', "mode"),
        ('<zeebe:formDefinition formId="f" bindingType="deployment"/>', "bindingType"),
        (
            '<zeebe:taskListeners><zeebe:taskListener eventType="canceling" type="t"/>'
            "</zeebe:taskListeners>",
            "canceling",
        ),
        (
            '<zeebe:taskListeners><zeebe:taskListener eventType="create" type="t" x="1"/>'
            "</zeebe:taskListeners>",
            "'x'",
        ),
    ],
)
def test_an_attribute_dormant_does_not_run_is_refused_by_name(
    extension: str, attribute: str
) -> None:
    with pytest.raises(UnsupportedElement) as info:
        process(extension)
    assert "review" in str(info.value)
    assert attribute in str(info.value)


def test_task_listeners_on_another_element_are_refused() -> None:
    xml = """<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
      xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d">
      <bpmn:process id="p" isExecutable="true"><bpmn:startEvent id="s"/>
      <bpmn:serviceTask id="st"><bpmn:extensionElements>
        <zeebe:taskDefinition type="t"/>
        <zeebe:taskListeners><zeebe:taskListener eventType="complete" type="l"/>
        </zeebe:taskListeners></bpmn:extensionElements></bpmn:serviceTask>
      <bpmn:sequenceFlow id="f" sourceRef="s" targetRef="st"/></bpmn:process>
    </bpmn:definitions>"""
    with pytest.raises(UnsupportedElement, match="user tasks only"):
        read_bpmn(xml)


@pytest.mark.parametrize(
    "stored",
    ["ops, finance", "['ops', 'finance']"],  # a literal; a FEEL list as schema 2 printed it
)
def test_the_schema_2_checkpoint_reads_its_candidate_groups_as_a_list(stored: str) -> None:
    run = Run(process(""))
    run.start()
    doc = encode(run.cp)
    doc["schema"] = 2
    for wait in doc["waits"].values():
        wait["candidate_groups"] = stored
    upgraded = decode(doc)
    (task,) = [w for w in upgraded.waits.values() if w.kind == "user_task"]
    assert task.candidate_groups == ["ops", "finance"]


# -- assign, claim, update ------------------------------------------------------------


def test_assign_claim_and_unassign() -> None:
    run = Run(process('<zeebe:assignmentDefinition candidateGroups="ops"/>'))
    run.start()
    wid = run.wait("review", "user_task").id
    run.send(TaskAssign(wait_id=wid, assignee="ann", claim=True))
    assert run.wait("review", "user_task").assignee == "ann"
    step = run.send(TaskAssign(wait_id=wid, assignee="bob", claim=True))
    assert not step.changed  # ann holds it
    assert run.last.facts[0].details["reason"] == (
        "user task claim refused: the task is assigned to someone else"
    )
    run.send(TaskAssign(wait_id=wid, assignee="bob"))  # an assignment overrides
    assert run.wait("review", "user_task").assignee == "bob"
    run.send(TaskAssign(wait_id=wid, assignee=None))
    assert run.wait("review", "user_task").assignee is None


def test_update_changes_the_schedule_candidates_and_priority() -> None:
    run = Run(process(""))
    run.start()
    wid = run.wait("review", "user_task").id
    run.send(
        TaskUpdate(
            wait_id=wid,
            changes={
                "candidateUsers": ["ann"],
                "dueDate": "2026-03-01T00:00:00Z",
                "priority": 10,
            },
        )
    )
    task = run.wait("review", "user_task")
    assert (task.candidate_users, task.due_date, task.priority) == (
        ["ann"],
        datetime(2026, 3, 1, tzinfo=UTC),
        10,
    )
    step = run.send(TaskUpdate(wait_id=wid, changes={"priority": "high"}))
    assert not step.changed
    assert "update refused: user task attribute priority" in str(step.facts[0].details["reason"])


# -- listeners ------------------------------------------------------------------------

LISTENERS = (
    "<zeebe:taskListeners>"
    '<zeebe:taskListener eventType="creating" type="on-create"/>'
    '<zeebe:taskListener eventType="assign" type="on-assign"/>'
    '<zeebe:taskListener eventType="update" type="on-update"/>'
    '<zeebe:taskListener eventType="complete" type="check-1"/>'
    '<zeebe:taskListener eventType="completing" type="check-2" retries="2"/>'
    "</zeebe:taskListeners>"
)


def listener_job(run: Run) -> DispatchJob:
    (job,) = [e for e in run.last.effects if isinstance(e, DispatchJob)]
    return job


def test_create_listener_blocks_the_task_until_its_job_completes_and_may_correct_it() -> None:
    run = Run(process('<zeebe:assignmentDefinition candidateGroups="ops"/>' + LISTENERS))
    run.start({"amount": 3})
    task = run.wait("review", "user_task")
    assert task.task_state is TaskState.CREATING
    job = listener_job(run)
    assert job.job_type == "on-create"
    assert job.variables == {"amount": 3}
    assert job.headers["userTaskEvent"] == "create"
    assert job.headers["candidateGroups"] == "ops"
    run.complete_job("review", corrections={"candidateGroups": ["ops", "audit"], "priority": 90})
    task = run.wait("review", "user_task")
    assert task.task_state is TaskState.CREATED
    assert (task.candidate_groups, task.priority) == (["ops", "audit"], 90)
    assert run.facts_of("TaskCreated")


def test_assign_listener_runs_before_the_assignment_and_may_correct_the_assignee() -> None:
    run = Run(process(LISTENERS))
    run.start()
    run.complete_job("review")  # the create listener
    wid = run.wait("review", "user_task").id
    run.send(TaskAssign(wait_id=wid, assignee="ann"))
    task = run.wait("review", "user_task")
    assert (task.task_state, task.assignee) == (TaskState.ASSIGNING, None)
    assert listener_job(run).headers["newAssignee"] == "ann"
    step = run.send(TaskAssign(wait_id=wid, assignee="bob"))
    assert not step.changed  # one transition at a time
    run.complete_job("review", corrections={"assignee": "ann.smith"})
    task = run.wait("review", "user_task")
    assert (task.task_state, task.assignee) == (TaskState.CREATED, "ann.smith")


def test_a_task_created_with_an_assignee_runs_its_assign_listeners_after_create() -> None:
    run = Run(process('<zeebe:assignmentDefinition assignee="ann"/>' + LISTENERS))
    run.start()
    run.complete_job("review")  # create
    assert listener_job(run).job_type == "on-assign"
    assert run.wait("review", "user_task").task_state is TaskState.ASSIGNING
    run.complete_job("review")
    assert run.wait("review", "user_task").assignee == "ann"


def test_update_listener_may_deny_the_update() -> None:
    run = Run(process(LISTENERS))
    run.start()
    run.complete_job("review")
    wid = run.wait("review", "user_task").id
    run.send(TaskUpdate(wait_id=wid, changes={"priority": 5}))
    assert run.wait("review", "user_task").priority == 50  # not before the listener
    run.complete_job("review", denied=True, deniedReason="priority is fixed")
    task = run.wait("review", "user_task")
    assert (task.priority, task.task_state, task.denied_reason) == (
        50,
        TaskState.CREATED,
        "priority is fixed",
    )


def test_complete_listeners_run_in_order_and_a_denial_keeps_the_task_open() -> None:
    run = Run(process(LISTENERS))
    run.start()
    run.complete_job("review")
    run.complete_task("review", approved=True)
    assert listener_job(run).job_type == "check-1"
    assert listener_job(run).variables == {"approved": True}  # what it is completed with
    assert run.wait("review", "user_task").task_state is TaskState.COMPLETING
    run.complete_job("review")
    assert listener_job(run).job_type == "check-2"
    run.complete_job("review", denied=True, deniedReason="the amount needs a second look")
    task = run.wait("review", "user_task")
    assert task.task_state is TaskState.CREATED
    assert task.denied_reason == "the amount needs a second look"
    assert run.status == "active"
    assert "approved" not in run.variables
    assert run.facts_of("TaskTransitionDenied", transition="complete")
    # completed again, both listeners agree: the task completes with its variables
    run.complete_task("review", approved=False)
    run.complete_job("review")
    run.complete_job("review")
    assert run.status == "completed"
    assert run.variables["approved"] is False


def test_a_failing_listener_uses_the_job_retries_then_is_an_incident_on_the_user_task() -> None:
    run = Run(process(LISTENERS))
    run.start()
    run.complete_job("review")
    run.complete_task("review")
    run.complete_job("review")  # check-1
    run.fail_job("review")  # check-2 has retries="2": one retry
    job = run.wait("review", "job")
    assert (job.attempt, job.job_running) == (2, False)
    run.fire("review", kind="job")  # the backoff ends: the next attempt
    run.fail_job("review")
    incident = run.incident("review")
    assert "task listener 'check-2' failed after 2 attempt(s)" in incident.cause
    assert incident.job_type == "check-2"


def test_a_listener_result_with_an_unknown_key_or_a_bad_correction_is_an_incident() -> None:
    run = Run(process(LISTENERS))
    run.start()
    run.complete_job("review", approved=True)
    assert run.incident("review").cause_class == "InvalidListenerResult"
    run2 = Run(process(LISTENERS))
    run2.start()
    run2.complete_job("review", corrections={"priority": 500})
    assert "priority" in run2.incident("review").cause


def test_a_create_listener_cannot_deny_and_a_listener_cannot_throw() -> None:
    run = Run(process(LISTENERS))
    run.start()
    run.complete_job("review", denied=True)
    assert "cannot deny" in run.incident("review").cause
    run2 = Run(process(LISTENERS))
    run2.start()
    run2.throw_from_job("review", "E1")
    assert run2.incident("review").cause_class == "ListenerThrewError"


def test_a_transition_while_listeners_run_is_refused() -> None:
    run = Run(process(LISTENERS))
    run.start()
    step = run.complete_task("review")  # still creating
    assert not step.changed
    (fact,) = step.facts
    assert (fact.kind, fact.details["reason"]) == (
        "Stale",
        "user task complete refused: the task is creating",
    )


def test_a_retried_listener_incident_resumes_the_transition_on_the_same_task() -> None:
    """As Camunda retries the listener's job: the task, its pending completion and the
    listeners that already ran stay; only the failed listener runs again."""
    run = Run(process(LISTENERS))
    run.start()
    run.complete_job("review")  # create
    task_id = run.wait("review", "user_task").id
    run.complete_task("review", approved=True)
    run.complete_job("review")  # check-1
    run.fail_job("review")  # check-2: retries="2"
    run.fire("review", kind="job")
    run.fail_job("review")
    incident = run.incident("review")
    task = run.wait("review", "user_task")  # still open, still completing
    assert (task.id, task.task_state) == (task_id, TaskState.COMPLETING)
    run.retry(incident.id)
    assert listener_job(run).job_type == "check-2"  # check-1 is not run again
    assert run.wait("review", "user_task").id == task_id
    run.complete_job("review")
    assert run.status == "completed"
    assert run.variables["approved"] is True  # the completion the listener held

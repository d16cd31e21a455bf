"""User tasks as Camunda users model them, through real processes on both shapes
(PostgreSQL + Redis with a worker, and the embedded default): the attributes stored
with the task, the list filters (Client and CLI), assign / claim / unassign / update
(Client and CLI), and task listeners run by the worker as jobs: one that corrects the
task at creation, one that denies a completion."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from dormant.engine_core.errors import InvalidField, InvalidOperation, TransitionDenied
from tests.integration.conftest import Stack, wait_for

pytestmark = pytest.mark.integration

HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
    'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">'
)


def model(key: str, extensions: str) -> str:
    return (
        f'{HEAD}<bpmn:process id="{key}" isExecutable="true"><bpmn:startEvent id="start"/>'
        '<bpmn:userTask id="review" name="Review"><bpmn:extensionElements><zeebe:userTask/>'
        f"{extensions}</bpmn:extensionElements></bpmn:userTask>"
        '<bpmn:endEvent id="end"/>'
        '<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="review"/>'
        '<bpmn:sequenceFlow id="f2" sourceRef="review" targetRef="end"/>'
        "</bpmn:process></bpmn:definitions>"
    )


ATTRIBUTES = (
    '<zeebe:assignmentDefinition candidateUsers="=team" candidateGroups="ops, =finance"/>'
    '<zeebe:taskSchedule dueDate="=due" followUpDate="2026-01-20T08:00:00Z"/>'
    '<zeebe:priorityDefinition priority="=level * 10"/>'
    '<zeebe:formDefinition formKey="camunda-forms:bpmn:review"/>'
)


def open_task(stack: Stack, iid: str, state: str = "created") -> Any:
    def ready() -> Any:
        tasks = stack.client.user_tasks(iid)
        return tasks[0] if tasks and tasks[0].state == state else None

    return wait_for(ready, what=f"the user task of {iid} to be {state}")


def cli_json(stack: Stack, *args: str) -> Any:
    done = stack.run_cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_attributes_are_stored_shown_and_filtered(shared_stack: Stack) -> None:
    s = shared_stack
    c = s.client
    c.deploy(model("ut-attrs", ATTRIBUTES))
    a = c.start("ut-attrs", {"team": ["ann", "bob"], "due": "2026-02-01T12:00:00Z", "level": 8})
    b = c.start("ut-attrs", {"team": ["cy"], "due": "2026-05-01T12:00:00Z", "level": 1})
    task = open_task(s, a)
    open_task(s, b)
    assert task.candidate_users == ("ann", "bob")
    assert task.candidate_groups == ("=finance", "ops")  # a literal list stays literal
    assert task.due_date == datetime(2026, 2, 1, 12, tzinfo=UTC)
    assert task.follow_up_date == datetime(2026, 1, 20, 8, tzinfo=UTC)
    assert (task.priority, task.form_key, task.assignee) == (80, "camunda-forms:bpmn:review", None)

    mine = {a, b}

    def ids(tasks: list[Any]) -> set[str]:
        return {t.instance_id for t in tasks} & mine

    assert ids(c.user_tasks(candidate_user="bob")) == {a}
    assert ids(c.user_tasks(candidate_group="ops")) == {a, b}
    assert ids(c.user_tasks(candidate_group="nobody")) == set()
    assert ids(c.user_tasks(due_before=datetime(2026, 3, 1, tzinfo=UTC))) == {a}
    with pytest.raises(InvalidField, match="time zone"):
        c.user_tasks(due_before=datetime(2026, 3, 1))

    rows = cli_json(s, "tasks", "list", "--candidate-user", "cy")
    assert {r["instance_id"] for r in rows} & mine == {b}
    rows = cli_json(s, "tasks", "list", "--candidate-group", "ops", "--due-before", "2026-03-01")
    assert {r["instance_id"] for r in rows} & mine == {a}
    (row,) = [r for r in rows if r["instance_id"] == a]
    assert (row["priority"], row["candidate_users"]) == (80, ["ann", "bob"])
    table = s.run_cli("tasks", "list", "--instance", a, "--format", "table")
    assert "users ann,bob; groups =finance,ops" in table.stdout
    assert "PRIORITY" in table.stdout


def test_a_feel_attribute_of_the_wrong_type_is_an_incident(shared_stack: Stack) -> None:
    s = shared_stack
    s.client.deploy(model("ut-bad", '<zeebe:priorityDefinition priority="=p"/>'))
    iid = s.client.start("ut-bad", {"p": "high"})
    view = s.wait_status(iid, "active_incidents")
    (incident,) = view.incidents
    assert incident.cause_class == "InvalidTaskAttribute"
    assert "priority" in incident.cause
    assert s.client.user_tasks(iid) == []


def test_assign_claim_unassign_and_update_through_client_and_cli(shared_stack: Stack) -> None:
    s = shared_stack
    c = s.client
    c.deploy(model("ut-assign", '<zeebe:assignmentDefinition candidateGroups="ops"/>'))
    iid = c.start("ut-assign")
    task = open_task(s, iid)

    def assignee(expected: str | None) -> Any:
        return wait_for(
            lambda: next(
                (t for t in c.user_tasks(iid) if t.assignee == expected and t.state == "created"),
                None,
            ),
            what=f"assignee {expected}",
        )

    done = s.run_cli("tasks", "claim", task.id, "ann")
    assert done.returncode == 0, done.stderr
    assignee("ann")
    assert [t.instance_id for t in c.user_tasks(assignee="ann")].count(iid) == 1
    refused = s.run_cli("tasks", "claim", task.id, "bob")
    assert refused.returncode != 0
    assert "is assigned to 'ann'" in refused.stderr
    with pytest.raises(InvalidOperation, match="assigned to 'ann'"):
        c.claim_task(task.id, "bob")
    c.assign_task(task.id, "bob")
    assignee("bob")
    done = s.run_cli("tasks", "unassign", task.id)
    assert done.returncode == 0, done.stderr
    assignee(None)
    c.claim_task(task.id, "cy")
    assignee("cy")

    done = s.run_cli(
        "tasks", "update", task.id, "--priority", "5", "--due-date", "2026-04-01T00:00:00Z"
    )
    assert done.returncode == 0, done.stderr
    wait_for(
        lambda: next((t for t in c.user_tasks(iid) if t.priority == 5), None), what="priority 5"
    )
    c.update_task(task.id, candidateUsers=["dee"])
    updated = wait_for(
        lambda: next((t for t in c.user_tasks(iid) if t.candidate_users == ("dee",)), None),
        what="candidate users",
    )
    assert updated.due_date == datetime(2026, 4, 1, tzinfo=UTC)
    with pytest.raises(InvalidField, match="assignee"):
        c.update_task(task.id, assignee="x")
    bad = s.run_cli("tasks", "update", task.id, "--due-date", "soon")
    assert bad.returncode != 0 and "dueDate" in bad.stderr


LISTENERS = (
    "<zeebe:taskListeners>"
    '<zeebe:taskListener eventType="create" type="test-task-corrector"/>'
    '<zeebe:taskListener eventType="completing" type="test-review-gate"/>'
    "</zeebe:taskListeners>"
)


def test_task_listeners_correct_the_task_and_deny_a_completion(shared_stack: Stack) -> None:
    s = shared_stack
    c = s.client
    c.deploy(model("ut-listen", LISTENERS))
    iid = c.start("ut-listen", {"amount": 10})
    task = open_task(s, iid)  # "created" once the create listener's job has run
    assert (task.assignee, task.priority) == ("corrected", 99)

    with pytest.raises(TransitionDenied, match="denied by a task listener: complete: not app"):
        c.complete_task(task.id, {"approved": False}, wait=30)
    denied = wait_for(
        lambda: next((t for t in c.user_tasks(iid) if t.denied_reason), None),
        what="the completion to be denied",
    )
    assert denied.denied_reason == "complete: not approved"
    assert denied.state == "created"
    assert c.instance(iid).status == "active"
    listed = s.run_cli("tasks", "list", "--instance", iid)
    assert "denied: complete: not approved" in listed.stdout
    refused = s.run_cli("tasks", "complete", task.id, "--wait", "30")
    assert refused.returncode == 2
    assert "completion was denied by a task listener: complete: not approved" in refused.stderr

    done = s.run_cli("tasks", "complete", task.id, "--var", "approved=true", "--wait", "30")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"completed {task.id}"
    view = s.wait_status(iid, "completed")
    assert view.variables == {"amount": 10, "approved": True}
    assert c.user_tasks(iid) == []
    kinds = [f.kind for f in c.history(iid)]
    assert "TaskTransitionDenied" in kinds


def test_a_failing_task_listener_is_an_incident_on_the_user_task(shared_stack: Stack) -> None:
    s = shared_stack
    s.client.deploy(
        model(
            "ut-listen-fail",
            '<zeebe:taskListeners><zeebe:taskListener eventType="create" type="test-fail" '
            'retries="1"/></zeebe:taskListeners>',
        )
    )
    iid = s.client.start("ut-listen-fail")
    view = s.wait_status(iid, "active_incidents")
    (incident,) = view.incidents
    assert incident.node_id == "review"
    assert "task listener 'test-fail' failed" in incident.cause
    # The task stays, in the transition its listener failed in: the retry runs that
    # listener again on the same task (tests/core/test_user_tasks.py).
    (task,) = s.client.user_tasks(iid)
    assert task.state == "creating"


def test_the_console_describes_a_user_task_with_its_attributes() -> None:
    from dormant.engine_core.checkpoint import TaskState, Wait, WaitKind, WaitRole
    from dormant.tasks.console.presenters import describe_wait

    wait = Wait(
        id="w3",
        kind=WaitKind.USER_TASK,
        role=WaitRole.NODE,
        node_id="review",
        task_name="Review",
        assignee="ann",
        candidate_groups=["ops"],
        due_date=datetime(2026, 2, 1, 12, tzinfo=UTC),
        priority=80,
        form_id="f1",
        task_state=TaskState.COMPLETING,
        denied_reason="not approved",
    )
    assert describe_wait(wait) == (
        "user task Review, assignee ann, candidate groups ops, due 2026-02-01 12:00:00 UTC, "
        "priority 80, form f1, completing (its task listeners run), last transition denied: "
        "not approved"
    )

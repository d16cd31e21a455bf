"""The console's tasklist in-process (Starlette's test client) on both backends: the
list with its filters and order, claim / unclaim, a task's embedded Camunda Form
handed to the form-js viewer, the submitted values checked against the form on the
server before the completion is sent, and the variables form of a task without a
form. A worker's step is applied in-process with ``Store.apply``; what the console
sends is read from the inbox, where the Client makes it durable. The browser half
(form-js drawing and validating the form) is in test_console_browser.py."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from dormant.engine_core.triggers import TaskAssign, TaskCompleted
from dormant.persistence.store import NewInstance
from dormant.persistence.tables import inbox
from dormant.tasks.console import forms
from dormant.tasks.console.config import ConsoleConfig

pytestmark = pytest.mark.integration

REVIEW = Path(__file__).parent / "console" / "review.bpmn"
BASIC = {"Authorization": "Basic YW5uOmEtbG9uZy1lbm91Z2gtc2VjcmV0"}  # ann:a-long-enough-secret


@pytest.fixture
def console(db_url: str) -> Iterator[Any]:
    from starlette.testclient import TestClient

    from dormant.tasks.client import Client
    from dormant.tasks.console import create_app

    client = Client(db_url, "memory://")
    client.deploy(REVIEW)
    now = datetime.now(UTC)
    for iid, priority in (("low", 10), ("high", 90)):
        client._store.start(NewInstance("review", iid, {"priority": priority}), now=now)
    config = ConsoleConfig(
        secret="s", user="ann", password="a-long-enough-secret", groups=("reviewers",)
    )
    app = create_app(config, client=client)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as tc:
        yield tc
    client._store.close()


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


def _sent(tc: Any) -> list[dict[str, Any]]:
    with tc.app.state.client._store.engine.connect() as conn:
        rows = conn.execute(select(inbox.c.kind, inbox.c.payload).order_by(inbox.c.created_at))
        return [{"kind": r.kind, **r.payload["kwargs"]} for r in rows]


def _apply(tc: Any, iid: str, trigger: Any) -> None:
    tc.app.state.client._store.apply(iid, trigger, datetime.now(UTC))


def test_the_list_filters_orders_and_offers_claim_to_the_signed_in(console: Any) -> None:
    anonymous = console.get("/tasks").text
    assert "Check the claim" in anonymous and 'data-action="claim"' not in anonymous
    page = console.get("/tasks", headers=BASIC).text
    rows = re.findall(r'<tr data-task="([^"]+)">', page)
    assert rows == ["high.w2", "low.w2"]  # the higher priority first
    assert page.count('data-action="claim"') == 2 and "review v1" in page
    assert (
        re.findall(r'data-task="([^"]+)"', console.get("/tasks?candidate_group=nobody").text) == []
    )
    assert (
        len(re.findall(r"<tr data-task=", console.get("/tasks?candidate_group=reviewers").text))
        == 2
    )
    assert len(re.findall(r"<tr data-task=", console.get("/tasks?process=other").text)) == 0
    assert "<html" not in console.get("/tasks?partial=1").text  # the live fragment


def test_the_tasks_i_may_work_on(console: Any) -> None:
    """Assigned to me, or unassigned with one of my groups (DORMANT_CONSOLE_GROUPS) or
    me as a candidate; not a task someone else holds, nor one for groups I am not in."""
    import dataclasses

    def shown() -> list[str]:
        page = console.get("/tasks?may=1", headers=BASIC).text
        return sorted(re.findall(r'<tr data-task="([^"]+)">', page))

    assert shown() == ["high.w2", "low.w2"]  # both offered to the group reviewers
    _apply(console, "low", TaskAssign(wait_id="w2", assignee="bob", claim=True))
    assert shown() == ["high.w2"]  # bob holds low
    _apply(console, "high", TaskAssign(wait_id="w2", assignee="ann", claim=True))
    assert shown() == ["high.w2"]  # assigned to me
    app = console.app
    app.state.config = dataclasses.replace(app.state.config, groups=())
    _apply(console, "high", TaskAssign(wait_id="w2", assignee=None, claim=False))
    assert shown() == []  # not in the group any more, and nobody's task is mine
    assert "I may work on (ann)" in console.get("/tasks", headers=BASIC).text
    env = {
        "DORMANT_CONSOLE_AUTH": "ann:a-long-enough-secret",
        "DORMANT_CONSOLE_GROUPS": "ops, reviewers,",
    }
    assert ConsoleConfig.from_env(env).groups == ("ops", "reviewers")


def test_claim_then_unclaim_as_the_signed_in_user(console: Any) -> None:
    token = _csrf(console.get("/tasks", headers=BASIC).text)
    anonymous = console.post("/tasks/low.w2/claim", data={"csrf": token})
    assert anonymous.status_code == 401  # actions need authentication
    claimed = console.post(
        "/tasks/low.w2/claim",
        data={"csrf": token, "next": "/tasks"},
        headers=BASIC,
        follow_redirects=False,
    )
    assert claimed.status_code == 303
    sent = _sent(console)[-1]
    assert (sent["task_id"], sent["assignee"], sent["claim"]) == ("low.w2", "ann", True)
    _apply(console, "low", TaskAssign(wait_id="w2", assignee="ann", claim=True))
    page = console.get("/tasks?mine=1", headers=BASIC).text
    assert re.findall(r'<tr data-task="([^"]+)">', page) == ["low.w2"]
    assert 'data-action="unclaim"' in page
    console.post("/tasks/low.w2/unclaim", data={"csrf": token}, headers=BASIC)
    sent = _sent(console)[-1]
    assert (sent["task_id"], sent["assignee"], sent["claim"]) == ("low.w2", None, False)


def test_the_task_page_hands_its_embedded_form_to_the_viewer(console: Any) -> None:
    page = console.get("/tasks/high.w2", headers=BASIC).text
    assert 'src="/static/form-js/form-viewer.umd.js"' in page
    assert 'href="/static/form-js/form-js.css"' in page
    found = re.search(
        r'<script type="application/json" id="form-schema">(.*?)</script>', page, re.S
    )
    assert found and json.loads(html.unescape(found.group(1)))["id"] == "review-form"
    assert "embedded form camunda-forms:bpmn:review-form" in page
    assert 'id="complete-task" data-action="complete" disabled' in page  # claim first
    licence = console.get("/static/form-js/LICENSE").text
    assert licence.startswith("Copyright (c) 2021-present Camunda") and "watermark" in licence
    assert console.get("/tasks/nope.w1").status_code == 404


def test_submitted_values_are_checked_against_the_form_before_completing(console: Any) -> None:
    token = _csrf(console.get("/tasks", headers=BASIC).text)
    before = len(_sent(console))
    for data, why in (
        ({"comment": "ok", "amount": 5, "decision": "approve"}, "at least 3 characters"),
        ({"comment": "fine", "amount": 0, "decision": "approve"}, "must be at least 1"),
        ({"comment": "fine", "amount": 5, "decision": "maybe"}, "is not one of the choices"),
        ({"comment": "fine", "decision": "approve"}, "'amount' (Amount): is required"),
        ({"comment": "fine", "amount": 5, "decision": "approve", "admin": True}, "not on the form"),
    ):
        refused = console.post(
            "/tasks/high.w2/complete",
            data={"csrf": token, "data": json.dumps(data)},
            headers=BASIC,
            follow_redirects=False,
        )
        assert refused.headers["location"] == "/tasks/high.w2"
        shown = html.unescape(console.get("/tasks/high.w2", headers=BASIC).text)
        assert "error: the form does not pass:" in shown and why in shown, data
    assert len(_sent(console)) == before  # nothing was sent
    done = console.post(
        "/tasks/high.w2/complete",
        data={
            "csrf": token,
            "data": json.dumps({"comment": "fine", "amount": "7", "decision": "approve"}),
        },
        headers=BASIC,
        follow_redirects=False,
    )
    assert done.headers["location"] == "/tasks"
    sent = _sent(console)[-1]
    assert sent["task_id"] == "high.w2"
    assert sent["variables"] == {"comment": "fine", "amount": 7, "decision": "approve"}


def test_a_task_without_a_form_gets_the_variables_form(console: Any) -> None:
    _apply(console, "high", TaskCompleted(wait_id="w2", variables={"decision": "approve"}))
    task = next(t for t in console.app.state.client.user_tasks("high") if t.node_id == "note")
    page = console.get(f"/tasks/{task.id}", headers=BASIC).text
    assert 'id="task-vars"' in page and "form-viewer.umd.js" not in page
    assert 'decision="approve"' in page and "priority=90" in page  # to start from
    token = _csrf(page)
    console.post(
        f"/tasks/{task.id}/complete",
        data={"csrf": token, "vars": 'note="done"\nscore=3'},
        headers=BASIC,
    )
    assert _sent(console)[-1]["variables"] == {"note": "done", "score": 3}


def test_form_fields_and_rules() -> None:
    """The checks the server runs, on a form with a group and every field kind."""
    schema = {
        "components": [
            {"type": "text", "text": "# heading"},
            {
                "type": "group",
                "components": [
                    {"type": "textfield", "key": "code", "validate": {"pattern": "^[A-Z]{2}$"}},
                    {"type": "checkbox", "key": "ok"},
                ],
            },
            {"type": "checklist", "key": "tags", "values": [{"value": "a"}, {"value": "b"}]},
            {"type": "button", "key": "submit", "action": "submit"},
        ]
    }
    assert [f.key for f in forms.fields_of(schema)] == ["code", "ok", "tags"]
    values, errors = forms.validate(schema, {"code": "AB", "ok": True, "tags": ["a"]})
    assert errors == [] and values == {"code": "AB", "ok": True, "tags": ["a"]}
    _, errors = forms.validate(schema, {"code": "abc", "ok": "yes", "tags": ["c"]})
    assert len(errors) == 3
    assert forms.validate(schema, [1])[1] == ["the submitted form data is not an object"]


LINKED_FORM = json.dumps(
    {
        "id": "claim-form",
        "type": "default",
        "components": [
            {"type": "number", "key": "refund", "label": "Refund", "validate": {"max": 100}}
        ],
    }
)
LINKED_MODEL = (
    '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
    'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">'
    '<bpmn:process id="refund" isExecutable="true"><bpmn:startEvent id="s"/>'
    '<bpmn:userTask id="decide" name="Decide the refund"><bpmn:extensionElements>'
    '<zeebe:userTask/><zeebe:formDefinition formId="claim-form"/>'
    '</bpmn:extensionElements></bpmn:userTask><bpmn:endEvent id="e"/>'
    '<bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="decide"/>'
    '<bpmn:sequenceFlow id="f2" sourceRef="decide" targetRef="e"/>'
    "</bpmn:process></bpmn:definitions>"
)


def test_a_linked_form_is_deployed_beside_the_process_and_used(console: Any) -> None:
    """``formId`` names a .form deployed with the process: its latest version is drawn
    and checked; deploying the same form again makes no new version."""
    from dormant.engine_core.errors import InvalidModel

    client = console.app.state.client
    deployed = client.deploy_all(LINKED_MODEL, LINKED_FORM)
    assert {(d.kind, d.key, d.version) for d in deployed} == {
        ("process", "refund", 1),
        ("form", "claim-form", 1),
    }
    again = client.deploy(LINKED_FORM)
    assert (again.kind, again.key, again.version, again.created) == ("form", "claim-form", 1, False)
    with pytest.raises(InvalidModel, match="needs an id"):
        client.deploy('{"components": []}')
    client._store.start(NewInstance("refund", "rf-1", {"refund": 5}), now=datetime.now(UTC))
    page = console.get("/tasks/rf-1.w2", headers=BASIC).text
    assert "linked form claim-form v1" in page and 'id="form-schema"' in page
    token = _csrf(page)
    refused = console.post(
        "/tasks/rf-1.w2/complete",
        data={"csrf": token, "data": json.dumps({"refund": 500})},
        headers=BASIC,
        follow_redirects=False,
    )
    assert refused.headers["location"] == "/tasks/rf-1.w2"
    assert "field 'refund' (Refund): must be at most 100" in html.unescape(
        console.get("/tasks/rf-1.w2", headers=BASIC).text
    )
    console.post(
        "/tasks/rf-1.w2/complete",
        data={"csrf": token, "data": json.dumps({"refund": 50})},
        headers=BASIC,
    )
    assert _sent(console)[-1]["variables"] == {"refund": 50}


def test_the_tasklist_completes_a_task_for_its_own_tenant(console: Any) -> None:
    """The console is the operator's view: a task of another tenant than the default is
    completed for that tenant, on the wire too (docs/tenants.md)."""
    client = console.app.state.client
    model = REVIEW.read_text().replace('<bpmn:process id="review"', '<bpmn:process id="t-review"')
    client.for_tenant("acme").deploy(model)
    start = NewInstance("t-review", "acme-1", {"priority": 50}, tenant="acme")
    client._store.start(start, now=datetime.now(UTC))
    token = _csrf(console.get("/tasks", headers=BASIC).text)
    done = console.post(
        "/tasks/acme-1.w2/complete",
        data={
            "csrf": token,
            "data": json.dumps({"comment": "fine", "amount": 7, "decision": "approve"}),
        },
        headers=BASIC,
        follow_redirects=False,
    )
    assert done.headers["location"] == "/tasks"
    sent = _sent(console)[-1]
    assert sent["task_id"] == "acme-1.w2" and sent["tenant"] == "acme"

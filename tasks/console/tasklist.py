"""The tasklist: open user tasks, claimed, unclaimed and completed from the console.

``/tasks`` lists the open user tasks (filters: assignee, candidate group, candidate
user, process; due dates first, then priority), each with Claim / Unclaim;
``/tasks/{id}`` shows one with its Camunda Form drawn by the form-js viewer (prebuilt,
``static/form-js/``), or a variables form when the task has none. The submitted
values are checked against the form's fields on the server (console/forms.py) before
``Client.complete_task`` sends the completion — the very calls ``dormant tasks
claim|unassign|complete`` make, behind the same guards as every console action
(read-only, authentication, CSRF).

The signed-in user claims as themself: the session's user, the basic credentials'
user, ``token`` for a bearer token, ``local`` on a console open on loopback.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from dormant.engine_core.errors import DormantError, InvalidVariables, UnknownTask
from dormant.engine_core.views import UserTaskView
from dormant.tasks.cli_common import parse_vars
from dormant.tasks.console import forms
from dormant.tasks.console.config import ConsoleConfig
from dormant.tasks.console.pages import (
    _act,
    _client,
    _may_read,
    _queries,
    _render,
    _sees_values,
    task_tenant,
)
from dormant.tasks.console.security import user_of
from dormant.tasks.tasklist_query import arrange

__all__ = ["routes"]

_TASKS_SHOWN = 200  # the list shows this many, the most urgent first


def _opt(request: Request, name: str) -> str | None:
    value = request.query_params.get(name, "").strip()
    return value or None


def _may_work_on(request: Request, user: str) -> list[UserTaskView]:
    """The tasks ``user`` may work on: assigned to them, or unassigned with them as a
    candidate user or one of their groups (``DORMANT_CONSOLE_GROUPS``) a candidate
    group, each of the other filters applied too."""
    client = _client(request)
    config: ConsoleConfig = request.app.state.config
    narrow = {
        "candidate_user": _opt(request, "candidate_user"),
        "candidate_group": _opt(request, "candidate_group"),
    }
    found = {t.id: t for t in client.user_tasks(assignee=user, **narrow)}
    offered = [client.user_tasks(**(narrow | {"candidate_user": user}))]
    offered += [client.user_tasks(**(narrow | {"candidate_group": g})) for g in config.groups]
    for tasks in offered:
        found.update({t.id: t for t in tasks if t.assignee is None})
    assignee = _opt(request, "assignee")
    return [t for t in found.values() if assignee is None or t.assignee == assignee]


def task_list(request: Request) -> Response:
    client = _client(request)
    user = user_of(request)
    mine = request.query_params.get("mine") == "1" and user is not None
    if request.query_params.get("may") == "1" and user is not None:
        tasks = _may_work_on(request, user)
    else:
        tasks = client.user_tasks(
            assignee=user if mine else _opt(request, "assignee"),
            candidate_user=_opt(request, "candidate_user"),
            candidate_group=_opt(request, "candidate_group"),
        )
    tasks = [t for t in tasks if _may_read(request, t.tenant)]
    keys = _queries(request).instance_processes([t.instance_id for t in tasks])
    tasks = arrange(tasks, keys, _opt(request, "process"))
    return _render(
        request,
        "tasks.html",
        tasks=tasks[:_TASKS_SHOWN],
        more=max(0, len(tasks) - _TASKS_SHOWN),
        keys=keys,
        user=user,
        groups=request.app.state.config.groups,
        params=request.query_params,
        process_keys=_queries(request).process_keys(),
    )


def _form_of(request: Request, task: UserTaskView) -> tuple[dict[str, Any] | None, str]:
    """The task's form schema (None: none to render) and where it comes from."""
    view = _client(request).instance(task.instance_id)
    if task.form_key:
        source = _queries(request).definition_source(view.key, view.version) or ""
        schema = forms.embedded_form(source, task.form_key)
        if schema is not None:
            return schema, f"embedded form {task.form_key}"
        return None, f"form key {task.form_key} names no form embedded in the process"
    if task.form_id:
        linked = _queries(request).form_source(task.form_id)
        if linked is None:
            return None, f"linked form {task.form_id} is not deployed"
        version, text = linked
        try:
            schema = json.loads(text)
        except ValueError:
            return None, f"linked form {task.form_id} v{version} is not JSON"
        return schema, f"linked form {task.form_id} v{version}"
    if task.external_reference:
        return None, f"external form {task.external_reference}"
    return None, ""


def task_page(request: Request) -> Response:
    task_id = request.path_params["task_id"]
    client = _client(request)
    try:
        task = client.user_task(task_id)
        if not _may_read(request, task.tenant):
            # Another tenant's task is unknown to this reader: the same words.
            raise UnknownTask(f"no open user task has id {task_id!r}")
    except UnknownTask as exc:
        return _render(request, "error.html", message=f"error: {exc}", status_code=404)
    schema, origin = _form_of(request, task)
    view = client.instance(task.instance_id)
    # The form starts from the instance's variables: values, so only to who sees them.
    data = dict(view.variables) if _sees_values(request, task.tenant) else {}
    if schema is not None:
        try:
            names = {f.key for f in forms.fields_of(schema)}
        except DormantError as exc:
            schema, origin, names = None, f"the form cannot be used: {exc}", set()
        data = {k: v for k, v in data.items() if k in names} if schema is not None else data
    return _render(
        request,
        "task.html",
        task=task,
        view=view,
        schema=schema,
        origin=origin,
        data=data,
        user=user_of(request),
    )


async def claim(request: Request) -> Response:
    task_id = request.path_params["task_id"]
    user = user_of(request) or ""
    client = _client(request)
    return await _act(
        request,
        f"claimed {task_id} as {user}",
        lambda: client.claim_task(task_id, user),
        tenant_of=task_tenant(request, task_id),
    )


async def unclaim(request: Request) -> Response:
    task_id = request.path_params["task_id"]
    client = _client(request)
    return await _act(
        request,
        f"unclaimed {task_id}",
        lambda: client.unassign_task(task_id),
        tenant_of=task_tenant(request, task_id),
    )


async def complete(request: Request) -> Response:
    """The form's values, checked against its fields, as the completion's variables;
    without a form, ``name=value`` lines as ``--var`` reads them."""
    task_id = request.path_params["task_id"]
    client = _client(request)
    form = await request.form()
    raw_data, lines = form.get("data"), form.get("vars")
    root = request.scope.get("root_path", "")
    page = f"{root}/tasks/{quote(task_id)}"

    def call() -> None:
        task = client.user_task(task_id)
        schema, _ = _form_of(request, task)
        if schema is not None:
            try:
                submitted = json.loads(raw_data) if isinstance(raw_data, str) else None
            except ValueError as exc:
                raise InvalidVariables(f"the form data is not JSON: {exc}") from None
            values, errors = forms.validate(schema, submitted)
            if errors:
                raise InvalidVariables("the form does not pass: " + "; ".join(errors))
        else:
            text = lines if isinstance(lines, str) else ""
            values = parse_vars(tuple(line for line in text.splitlines() if line.strip()))
        # The operator's view completes a task for its own tenant (docs/tenants.md).
        client.for_tenant(client.user_task(task_id).tenant).complete_task(task_id, values)

    response = await _act(
        request, f"completing {task_id}", call, tenant_of=task_tenant(request, task_id)
    )
    if response.status_code == 303 and not _flashed_error(request):
        return RedirectResponse(f"{root}/tasks", status_code=303)
    if response.status_code == 303:
        return RedirectResponse(page, status_code=303)
    return response


def _flashed_error(request: Request) -> bool:
    return any(kind == "error" for kind, _ in request.session.get("flash", []))


def routes() -> list[BaseRoute]:
    return [
        Route("/tasks", task_list),
        Route("/tasks/{task_id}", task_page),
        Route("/tasks/{task_id}/claim", claim, methods=["POST"]),
        Route("/tasks/{task_id}/unclaim", unclaim, methods=["POST"]),
        Route("/tasks/{task_id}/complete", complete, methods=["POST"]),
    ]

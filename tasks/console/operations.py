"""The console's operations on running instances beside the incident actions: suspend /
resume and set variables on the instance page, the batches pages, and "retry all
matching" on the incidents list.

Each goes through ``app._act`` (the same refusals: read-only, unauthenticated, a wrong
CSRF token) and through the very Client methods the CLI calls, so a console operator
and a CLI operator get the same checks and the same words (``error: …`` on a refusal).
Form fields are parsed inside the action so that a malformed field is flashed as the
CLI would print it, after the guards, never before them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from engine_core.errors import InvalidOperation
from persistence.selection import Selector
from tasks.console.app import _act, _client, _render

__all__ = ["routes"]

# The filters of the incidents list a bulk retry carries over (form field → Selector).
_INCIDENT_FILTERS = (("process", "key"), ("node", "node"), ("cause_class", "cause_class"))
# The batch page refreshes every few seconds: its refused targets are all listed (they
# are what an operator acts on), the rest up to this many; the CLI lists every one.
_ITEMS_SHOWN = 500


def _instance_op(op: str, verb: str) -> Callable[[Request], Awaitable[Response]]:
    async def handler(request: Request) -> Response:
        instance_id = request.path_params["instance_id"]
        call = getattr(_client(request), op)
        return await _act(request, f"{verb} {instance_id}", call, instance_id)

    return handler


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


async def set_variables(request: Request) -> Response:
    """``name=value`` lines as the CLI's ``--var`` reads them (JSON, else a string)."""
    from tasks.cli import parse_vars

    instance_id = request.path_params["instance_id"]
    form = await request.form()
    lines = tuple(line for line in _field(form, "vars").splitlines() if line.strip())
    unset = tuple(_field(form, "unset").replace(",", " ").split())
    scope = _field(form, "scope") or "s0"
    retry = form.get("retry") == "1"
    client = _client(request)

    def call() -> None:
        variables = parse_vars(lines)
        client.set_variables(instance_id, variables, unset, scope=scope, retry_incidents=retry)

    names = ", ".join([*(line.partition("=")[0] for line in lines), *(f"-{n}" for n in unset)])
    what = f"setting {names} on {instance_id}" + (" and retrying" if retry else "")
    return await _act(request, what, call)


async def retry_matching(request: Request) -> Response:
    """A batch retrying every open incident the list's filter selects, then its page."""
    form = await request.form()
    filters = {attr: _field(form, name) or None for name, attr in _INCIDENT_FILTERS}
    client = _client(request)
    root = request.scope.get("root_path", "")

    def call() -> Any:  # no process chosen: the Client refuses it, in the CLI's words
        return client.bulk("incident_retry", Selector(**filters))

    return await _act(
        request,
        lambda view: f"batch {view.id}: {view.operation}, {view.selected} selected",
        call,
        then=lambda view: f"{root}/batches/{quote(view.id)}",
    )


def batch_list(request: Request) -> Response:
    return _render(request, "batches.html", batches=_client(request).batches())


def batch_page(request: Request) -> Response:
    client = _client(request)
    batch_id = request.path_params["batch_id"]
    try:
        view = client.batch(batch_id)
        items = client.batch_items(batch_id)
    except InvalidOperation as exc:
        return _render(request, "error.html", message=f"error: {exc}", status_code=404)
    refused = [i for i in items if i.outcome == "refused"]
    others = [i for i in items if i.outcome != "refused"]
    shown = sorted(refused + others[: max(0, _ITEMS_SHOWN - len(refused))], key=lambda i: i.seq)
    return _render(request, "batch.html", batch=view, items=shown, more=len(items) - len(shown))


def routes() -> list[BaseRoute]:
    return [
        Route(
            "/instances/{instance_id}/suspend",
            _instance_op("suspend", "suspending"),
            methods=["POST"],
        ),
        Route(
            "/instances/{instance_id}/resume", _instance_op("resume", "resuming"), methods=["POST"]
        ),
        Route("/instances/{instance_id}/variables", set_variables, methods=["POST"]),
        Route("/incidents/retry-matching", retry_matching, methods=["POST"]),
        Route("/batches", batch_list),
        Route("/batches/{batch_id}", batch_page),
    ]

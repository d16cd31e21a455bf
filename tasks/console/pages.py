"""What every console page and action shares: the templates, reading a request's
filters, rendering a page, and the one way an action runs (its guards, the Client call,
a flash and a redirect). The page handlers (console/app.py) and the bulk operations
(console/operations.py) both build on it, so neither imports the other's module."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from dormant.engine_core.errors import DormantError, InvalidOperation
from dormant.persistence import audit, clock
from dormant.persistence.console_queries import ConsoleQueries
from dormant.tasks.console.authorization import ADMIN, OPERATOR, Principal
from dormant.tasks.console.config import ConsoleConfig
from dormant.tasks.console.security import (
    authenticated,
    csrf_ok,
    csrf_token,
    principal_of,
    refuse_anonymous,
    user_of,
)

HERE = Path(__file__).resolve().parent
_VALUE_CHARS = 4000  # longer variable values are cut on the page (the CLI shows them whole)

templates = Jinja2Templates(directory=str(HERE / "templates"))


def _pretty(value: Any) -> str:
    text = json.dumps(value, indent=1, sort_keys=True, default=str)
    return text if len(text) <= _VALUE_CHARS else text[:_VALUE_CHARS] + f" … ({len(text)} chars)"


templates.env.filters["pretty"] = _pretty
templates.env.filters["when"] = lambda d: d.strftime("%Y-%m-%d %H:%M:%S") if d else ""


# -- helpers ---------------------------------------------------------------------------


def _queries(request: Request) -> ConsoleQueries:
    found: ConsoleQueries = request.app.state.queries
    return found


def _client(request: Request) -> Any:
    """The console's Client acting for the signed-in user (``user_of``; ``anonymous``
    when nobody is, which only a read or an open console allows), so the audit trail
    and the instance's history name who did it (docs/audit.md)."""
    return request.app.state.client.acting_as(user_of(request) or "anonymous", "console")


def _principal(request: Request) -> Principal | None:
    """Who asks (security.identify). Nobody in particular reads every tenant without
    values, as before tenants had owners — unless ``DORMANT_CONSOLE_USERS`` is set: then
    a reader must be one of them (docs/console.md "Users and roles")."""
    found = principal_of(request.scope)
    config: ConsoleConfig = request.app.state.config
    if found is None and config.users:
        return Principal("anonymous", ())
    return found


def _visible(request: Request) -> tuple[str, ...] | None:
    """The tenants the asker may read (None: every one), for the lists' filters."""
    found = _principal(request)
    return None if found is None else found.tenants()


def _may_read(request: Request, tenant: str) -> bool:
    found = _principal(request)
    return found is None or found.may_read(tenant)


def _sees_values(request: Request, tenant: str) -> bool:
    found = _principal(request)
    return authenticated(request) and (found is None or found.sees_values(tenant))


def _refuse_tenant(
    request: Request, kind: str, tenant: str, role: str = OPERATOR
) -> Response | None:
    """A record of a tenant the asker cannot read does not exist for them (404, the
    text an unknown one gets); one they read but may not act on is 403."""
    found = _principal(request)
    if found is None or found.may(role, tenant):
        return None
    if not found.may_read(tenant):
        return PlainTextResponse(f"error: no {kind} of that id", status_code=404)
    return PlainTextResponse(
        f"refused: acting on tenant {tenant!r} needs the {role} role there; "
        f"{found.name} does not hold it",
        status_code=403,
    )


@dataclass(frozen=True, slots=True)
class Target:
    """The record an action acts on (``_act``'s ``tenant_of``): its kind and id, and how
    to read its tenant."""

    kind: str
    id: str
    tenant: Callable[[], str]


def instance_tenant(request: Request, instance_id: str) -> Target:
    client = request.app.state.client
    return Target("instance", instance_id, lambda: str(client.instance(instance_id).tenant))


def incident_tenant(request: Request, incident_id: str) -> Target:
    """An incident's tenant is its instance's."""
    client = request.app.state.client

    def read() -> str:
        return str(client.instance(client.incident(incident_id).instance_id).tenant)

    return Target("incident", incident_id, read)


def task_tenant(request: Request, task_id: str) -> Target:
    client = request.app.state.client
    return Target("user task", task_id, lambda: str(client.user_task(task_id).tenant))


def _refuse_admin(request: Request) -> Response | None:
    """Job type limits and parked rows reach every tenant: admin of every tenant."""
    found = _principal(request)
    if found is None or found.tenants(ADMIN) is None:
        return None
    return PlainTextResponse(
        "refused: this action reaches every tenant and needs the admin role on * "
        f"(admin@*); {found.name} does not hold it",
        status_code=403,
    )


def _render(request: Request, name: str, **context: Any) -> Response:
    config: ConsoleConfig = request.app.state.config
    context.update(
        root=request.scope.get("root_path", ""),
        config=config,
        authed=authenticated(request),
        principal=_principal(request),
        csrf=csrf_token(request),
        flashes=request.session.pop("flash", []),
        path_qs=_here(request),
    )
    status = context.pop("status_code", 200)
    if request.query_params.get("partial") == "1" and name != "error.html":
        # An error has no fragment: the whole page, with its status, which the refresh
        # leaves alone (console.js swaps only what a 200 brings).
        name = name.replace(".html", "_live.html")
    return templates.TemplateResponse(request, name, context, status_code=status)


def _here(request: Request, drop: tuple[str, ...] = ("partial",)) -> str:
    """This page's path and query (a form's way back), without the given parameters."""
    query = urlencode([(k, v) for k, v in request.query_params.multi_items() if k not in drop])
    # request.url.path already holds the proxy's prefix (root_path).
    return request.url.path + (f"?{query}" if query else "")


def _flash(request: Request, kind: str, text: str) -> None:
    request.session.setdefault("flash", []).append([kind, text])


def _opt(request: Request, name: str) -> str | None:
    value = request.query_params.get(name, "").strip()
    return value or None


def _moment(request: Request, name: str) -> datetime | None:
    return _when(name, _opt(request, name))


def _when(name: str, raw: str | None) -> datetime | None:
    """A filter's date and time (naive: UTC), as the instances list reads it."""
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise InvalidOperation(
            f"{name}: {raw!r} is not a date and time (2026-12-01T09:30)"
        ) from exc
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _safe_next(raw: Any, fallback: str) -> str:
    """Only a path of this console: never an absolute or scheme-relative URL."""
    if (
        isinstance(raw, str)
        and raw.startswith("/")
        and not raw.startswith("//")
        and "\\" not in raw
    ):
        return raw
    return fallback


def _refuse_action(request: Request, form: Any) -> Response | None:
    """Read-only → 403; not signed in → 401; the form's CSRF token wrong → 403. The
    first two were already refused on the headers alone (security.Guard, before the
    body was read); they are repeated here so no action depends on the middleware."""
    config: ConsoleConfig = request.app.state.config
    if config.read_only:
        return PlainTextResponse("refused: this console runs read-only", status_code=403)
    if not authenticated(request):
        return refuse_anonymous()
    if not csrf_ok(request, form):
        return PlainTextResponse(
            "refused: the form's CSRF token is missing or wrong; reload the page and try again",
            status_code=403,
        )
    return None


async def _confirmed(
    request: Request, title: str, consequence: str, count: Callable[[], int] | None = None
) -> Response | None:
    """None once the operator confirmed (the form carries ``confirm=1``); otherwise the
    confirmation page, after the action's own guards, with the form's fields carried
    over and, for a bulk action, how many targets it would act on now (the batch
    selects again when it runs). A destructive POST never acts on one click
    (issue 28: "the console's destructive actions confirm")."""
    form = await request.form()
    refused = _refuse_action(request, form)
    if refused is not None:
        return refused
    if form.get("confirm") == "1":
        return None
    selected: int | None = None
    if count is not None:
        try:
            selected = await run_in_threadpool(count)
        except DormantError:
            return None  # the action itself refuses it, in the CLI's words
    fields = [
        (k, v) for k, v in form.multi_items() if isinstance(v, str) and k not in ("csrf", "confirm")
    ]
    return _render(
        request,
        "confirm.html",
        title=title,
        consequence=consequence,
        selected=selected,
        action=request.url.path,
        fields=fields,
        back=_safe_next(form.get("next"), request.scope.get("root_path", "") + "/instances"),
    )


def _audit_refusal(request: Request, target: Target | None, refused: Response) -> None:
    """An action refused for want of a role, in the audit trail: who tried what on
    which record, and why (the answer's text)."""
    client = request.app.state.client
    action = request.url.path.rstrip("/").rpartition("/")[2]
    cmd = audit.command(
        user_of(request) or "anonymous",
        "console",
        action,
        target=None if target is None else f"{target.kind} {target.id}",
        instance_id=target.id if target is not None and target.kind == "instance" else None,
    )
    detail = bytes(refused.body).decode(errors="replace")[:500]
    audit.record(
        client._store.engine, [audit.outcome_row(cmd, "refused", clock.now(), detail=detail)]
    )


async def _act(
    request: Request,
    what: str | Callable[[Any], str],
    call: Any,
    *args: str,
    then: Callable[[Any], str] | None = None,
    tenant_of: Target | None = None,
    admin: bool = False,
) -> Response:
    """The one way an action runs: the guards, the Client call, a flash, a redirect.
    ``what`` and ``then`` may read the call's result (a batch: its report, its page).
    ``tenant_of`` is the record acted on: the asker needs the operator role on its
    tenant (authorization.py); ``admin`` needs admin of every tenant. Either refusal is
    recorded in the audit trail as ``refused`` (persistence/audit.py)."""
    form = await request.form()
    refused = _refuse_action(request, form)
    if refused is not None:
        return refused
    if admin:
        refused = _refuse_admin(request)
    if refused is None and tenant_of is not None:
        try:
            tenant = await run_in_threadpool(tenant_of.tenant)
        except DormantError:
            pass  # an unknown record: the call itself says so, in the CLI's words
        else:
            refused = _refuse_tenant(request, tenant_of.kind, tenant)
    if refused is not None:
        await run_in_threadpool(_audit_refusal, request, tenant_of, refused)
        return refused
    back = _safe_next(form.get("next"), request.scope.get("root_path", "") + "/incidents")
    try:
        result = await run_in_threadpool(call, *args)
    except DormantError as exc:
        _flash(request, "error", f"error: {exc}")
    else:
        _flash(request, "ok", what(result) if callable(what) else what)
        if then is not None:
            back = then(result)
    return RedirectResponse(back, status_code=303)

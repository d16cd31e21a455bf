"""The console as an ASGI app: Starlette routes, Jinja2 pages, bpmn-js for the diagram.

Pages are rendered on the server from the same reads the CLI uses (the Store's views
and persistence/console_queries.py); the browser runs only bpmn-js and a small polling
script. Each list page answers ``?partial=1`` with its live fragment, which the page
fetches again every few seconds; the instance page polls ``/api/instances/{id}`` (the
revision, the status and the overlays, no values) and fetches its fragment when the
revision moved.

Actions (retry / resolve / drop an incident; cancel, suspend, resume an instance, set
its variables; retry every incident a filter matches, as a batch: operations.py) call
the very Client methods the CLI calls, so they take the same checks, the same
management tasks and the same locked transaction; a refusal is flashed as the CLI
prints it (``error: …``).
Handlers are plain functions: Starlette runs them in its thread pool, which is where
blocking database and broker calls belong.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from dormant.engine_core.checkpoint import IncidentState, InstanceStatus
from dormant.engine_core.errors import (
    DormantError,
    InvalidOperation,
    StoredDataError,
    UnknownInstance,
)
from dormant.engine_core.history import business_history
from dormant.engine_core.tenants import check_tenant
from dormant.engine_core.views import instance_view
from dormant.persistence.console_queries import ConsoleQueries, IncidentFilter, InstanceFilter
from dormant.tasks.client import Client
from dormant.tasks.console import operations, presenters, tasklist
from dormant.tasks.console.config import ConsoleConfig
from dormant.tasks.console.pages import (
    HERE,
    _act,
    _client,
    _confirmed,
    _flash,
    _here,
    _may_read,
    _moment,
    _opt,
    _queries,
    _render,
    _safe_next,
    _sees_values,
    _visible,
    incident_tenant,
    instance_tenant,
)
from dormant.tasks.console.security import (
    SESSION_SECONDS,
    USERS_ROLE,
    AccessLog,
    Guard,
    Sessions,
    client_of,
    csrf_ok,
    sign_in,
    too_many,
)
from dormant.tasks.console.throttle import SignInThrottle
from dormant.tasks.display import duration

__all__ = ["create_app", "instance_reads"]

# Rows the unmatched messages page shows at most (the CLI's --limit default).
_MESSAGES_SHOWN = 100

STATUSES = tuple(status.value for status in InstanceStatus)
# "unresolved" is the filter for open and retry-scheduled together (console_queries)
INCIDENT_STATES = ("unresolved", *(state.value for state in IncidentState))


class _SecurityHeaders:
    """No framing, no sniffing, scripts only from our own static files."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_wrapper(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] += [
                    (b"x-frame-options", b"DENY"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                    (
                        b"content-security-policy",
                        b"default-src 'self'; img-src 'self' data:; "
                        b"style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
                    ),
                ]
            await send(message)

        await self.app(scope, receive, send_wrapper)


# -- pages -----------------------------------------------------------------------------


def home(request: Request) -> Response:
    return RedirectResponse(request.scope.get("root_path", "") + "/processes", status_code=303)


def _process_tenant(request: Request, key: str) -> str | None:
    """The tenant owning process ``key`` (None: none is deployed)."""
    try:
        return str(_client(request)._store.deployments.tenant(key))
    except DormantError:
        return None


def processes(request: Request) -> Response:
    q = _queries(request)
    rows, by_node = q.processes(), q.open_incidents_by_node()
    visible = _visible(request)
    if visible is not None:
        # A process belongs to one tenant: the reader's tenants' processes only.
        rows = [p for p in rows if _process_tenant(request, p.key) in visible]
        by_node = {k: v for k, v in by_node.items() if _process_tenant(request, k) in visible}
    return _render(
        request,
        "processes.html",
        processes=rows,
        incidents_by_node=by_node,
        statuses=STATUSES,
    )


def process_page(request: Request) -> Response:
    """One process version's diagram with per-element counts, as Operate's process
    view draws them: how many instances wait at each element now, how many are in
    incident there, how many passed it (ConsoleQueries.node_counts, bounded)."""
    key = request.path_params["key"]
    raw = request.path_params["version"]
    q = _queries(request)
    source = q.definition_source(key, int(raw)) if raw.isdigit() else None
    tenant = _process_tenant(request, key) if source is not None else None
    if source is None or tenant is None or not _may_read(request, tenant):
        return _render(
            request,
            "error.html",
            message=f"error: no process {key!r} version {raw} is deployed; "
            "the processes page lists the deployed ones",
            status_code=404,
        )
    counts = q.node_counts(key, int(raw), presenters.NODE_KEYS)
    return _render(
        request,
        "process.html",
        key=key,
        version=int(raw),
        diagram=source,
        counts={n: c.as_json() for n, c in counts.nodes.items()},
        scanned=counts.scanned,
        sampled=counts.sampled,
        bounds=(q.WAITING_SCANNED, q.PASSED_SAMPLED),
    )


def instance_list(request: Request) -> Response:
    error = None
    page = None
    try:
        version = _opt(request, "version")
        if version is not None and not version.isdigit():
            raise InvalidOperation(f"version: {version!r} is not a version number")
        filters = InstanceFilter(
            key=_opt(request, "process"),
            version=int(version) if version else None,
            status=_opt(request, "status"),
            business_key=_opt(request, "business_key"),
            has_open_incident=request.query_params.get("has_incident") == "1",
            waiting_at=_opt(request, "node"),
            started_from=_moment(request, "started_from"),
            started_to=_moment(request, "started_to"),
            tenant=_tenant(request),
            tenants=_visible(request),
        )
        page = _queries(request).instance_page(filters, _opt(request, "after"))
    except DormantError as exc:
        error = f"error: {exc}"
    keys = _queries(request).process_keys()
    return _render(
        request,
        "instances.html",
        page=page,
        error=error,
        keys=keys,
        statuses=STATUSES,
        params=request.query_params,
        next_qs=_next_qs(request, page.next_cursor if page else None),
        first_qs=_here(request, ("after", "partial")),
        status_code=400 if error else 200,
    )


def _next_qs(request: Request, cursor: str | None) -> str | None:
    if cursor is None:
        return None
    first = _here(request, ("after", "partial"))
    return first + ("&" if "?" in first else "?") + urlencode([("after", cursor)])


def instance_reads(
    q: ConsoleQueries,
    instance_id: str,
    *,
    values: bool | Callable[[str], bool] = False,
    readable: Callable[[str], bool] = lambda _: True,
) -> dict[str, Any]:
    """Everything the instance page shows, read once (UnknownInstance if there is none,
    or if ``readable`` refuses its tenant: another tenant's instance is unknown): one
    checkpoint decoded, its facts, its children, its model's XML. ``values``: the
    reader may see values (correlation keys are values), or a test of the tenant."""
    tenant = q.instance_tenant(instance_id)
    if not readable(tenant):
        raise UnknownInstance(f"no instance has id {instance_id!r}")
    if callable(values):
        values = values(tenant)
    checkpoint, history, children = q.instance_bundle(instance_id)
    return {
        "view": instance_view(checkpoint),
        "cp": checkpoint,
        "scopes": presenters.scopes(checkpoint),
        "overlays": {
            k: v.as_json()
            for k, v in presenters.overlays(checkpoint, history, values=values).items()
        },
        "waits": [
            (w, presenters.describe_wait(w, values=values)) for w in checkpoint.waits.values()
        ],
        "history": history,
        # People's terms by default; the raw facts behind the internal-facts toggle.
        "events": business_history(history),
        "children": children,
        "diagram": q.definition_source(checkpoint.process_key, checkpoint.version) or "",
        "ended": checkpoint.status.ended,
        "internal_kinds": presenters.INTERNAL_FACTS,
        "values": values,
    }


def instance_page(request: Request) -> Response:
    instance_id = request.path_params["instance_id"]
    try:
        reads = instance_reads(
            _queries(request),
            instance_id,
            values=lambda tenant: _sees_values(request, tenant),
            readable=lambda tenant: _may_read(request, tenant),
        )
    except UnknownInstance as exc:
        return _render(request, "error.html", message=f"error: {exc}", status_code=404)
    except StoredDataError as exc:
        # An unreadable checkpoint is itself an incident (docs/limits.md): say so, and
        # where to look, rather than fail the page.
        return _render(
            request,
            "error.html",
            message=f"error: instance {instance_id} cannot be read: {exc}; see its "
            "checkpoint incident and `dormant triggers list --failed`",
            status_code=409,
        )
    marks = presenters.overlays(reads["cp"], reads["history"])
    return _render(request, "instance.html", **reads, taken=_taken(request, reads["cp"], marks))


def _taken(
    request: Request, checkpoint: Any, marks: dict[str, presenters.NodeOverlay]
) -> list[str]:
    """The flows to draw as taken (presenters.taken_flows), from the pinned version."""
    try:
        definition, _ = _client(request)._store.deployments.definition(
            checkpoint.process_key, checkpoint.version
        )
    except DormantError:
        return []
    return presenters.taken_flows(definition, marks)


def instance_state(request: Request) -> Response:
    """The small JSON the instance page polls: no variable values in it."""
    instance_id = request.path_params["instance_id"]
    try:
        checkpoint, history, _ = _queries(request).instance_bundle(instance_id)
    except UnknownInstance as exc:
        return JSONResponse({"error": str(exc)}, status_code=404)
    except StoredDataError as exc:
        return JSONResponse({"error": str(exc)}, status_code=409)
    tenant = _queries(request).instance_tenant(instance_id)
    if not _may_read(request, tenant):
        return JSONResponse({"error": f"no instance has id {instance_id!r}"}, status_code=404)
    marks = presenters.overlays(checkpoint, history, values=_sees_values(request, tenant))
    return JSONResponse(
        {
            "id": checkpoint.instance_id,
            "revision": checkpoint.revision,
            "status": checkpoint.status.value,
            "overlays": {k: v.as_json() for k, v in marks.items()},
            "taken": _taken(request, checkpoint, marks),
        }
    )


def _tenant(request: Request) -> str | None:
    """The ``tenant`` filter (docs/tenants.md), checked: a bad one is the page's error."""
    raw = _opt(request, "tenant")
    return None if raw is None else check_tenant(raw, "tenant")


def incident_list(request: Request) -> Response:
    state = request.query_params.get("state", "unresolved") or None
    error = None
    page = None
    try:
        filters = IncidentFilter(
            key=_opt(request, "process"),
            node_id=_opt(request, "node"),
            cause_class=_opt(request, "cause_class"),
            state=state,
            instance_id=_opt(request, "instance"),
            tenant=_tenant(request),
            tenants=_visible(request),
        )
        page = _queries(request).incident_page(filters, _opt(request, "after"))
    except DormantError as exc:
        error = f"error: {exc}"
    q = _queries(request)
    return _render(
        request,
        "incidents.html",
        page=page,
        error=error,
        state=state or "",
        states=INCIDENT_STATES,
        keys=q.process_keys(),
        cause_classes=q.cause_classes(),
        params=request.query_params,
        next_qs=_next_qs(request, page.next_cursor if page else None),
    )


# -- actions ---------------------------------------------------------------------------


async def incident_action(request: Request) -> Response:
    incident_id = request.path_params["incident_id"]
    op = request.path_params["op"]
    if op not in ("retry", "resolve", "drop"):
        return PlainTextResponse(f"no incident action {op!r}", status_code=404)
    call = getattr(_client(request), f"{op}_incident")
    return await _act(
        request,
        f"{op} {incident_id}",
        call,
        incident_id,
        tenant_of=incident_tenant(request, incident_id),
    )


async def cancel_instance(request: Request) -> Response:
    instance_id = request.path_params["instance_id"]
    asked = await _confirmed(
        request,
        "Cancel instance",
        f"Instance {instance_id} is terminated: every token and wait is withdrawn, its "
        "open user tasks and jobs with them. This cannot be undone.",
    )
    if asked is not None:
        return asked
    return await _act(
        request,
        f"cancelling {instance_id}",
        _client(request).cancel,
        instance_id,
        tenant_of=instance_tenant(request, instance_id),
    )


# -- signing in ------------------------------------------------------------------------


def login_form(request: Request) -> Response:
    return _render(request, "login.html", next=_safe_next(request.query_params.get("next"), ""))


async def login(request: Request) -> Response:
    """The form's sign-in, throttled as a Basic or bearer one is (throttle.py): a locked
    out client is refused before its password is compared."""
    config: ConsoleConfig = request.app.state.config
    throttle: SignInThrottle = request.app.state.throttle
    sessions: Sessions = request.app.state.sessions
    client = client_of(request.scope)
    wait = throttle.refused_for(client)
    if wait > 0:
        return too_many(wait)
    form = await request.form()
    root = request.scope.get("root_path", "")
    if not csrf_ok(request, form):
        return PlainTextResponse("refused: the form's CSRF token is missing or wrong", 403)
    user, password = str(form.get("user", "")), str(form.get("password", ""))
    found = sign_in(config, user, password) if config.has_credentials else None
    if found is None:
        if config.has_credentials:
            await asyncio.sleep(throttle.failed(client))
        _flash(request, "error", "error: wrong user or password")
        return RedirectResponse(root + "/login", status_code=303)
    throttle.succeeded(client)
    await run_in_threadpool(sessions.end, request.session.get("sid"))
    request.session.clear()  # a fresh session (and CSRF token) for the signed-in user
    request.session["user"] = user or "token"
    known = any(u.name == found.name for u in config.users) and found.name == user
    request.session["role"] = USERS_ROLE if known else found.role
    request.session["sid"] = await run_in_threadpool(sessions.start)
    return RedirectResponse(_safe_next(form.get("next"), root + "/processes"), status_code=303)


async def logout(request: Request) -> Response:
    """Ends the session where it lives (this process), not only in this browser: a copy
    of the cookie kept elsewhere is refused from now on."""
    form = await request.form()
    if not csrf_ok(request, form):
        return PlainTextResponse("refused: the form's CSRF token is missing or wrong", 403)
    sessions: Sessions = request.app.state.sessions
    await run_in_threadpool(sessions.end, request.session.get("sid"))
    request.session.clear()
    return RedirectResponse(request.scope.get("root_path", "") + "/processes", status_code=303)


def unmatched_messages(request: Request) -> Response:
    """Recent messages that went nowhere (persistence/unmatched.py), as ``dormant
    messages unmatched`` lists them; a correlation key is a value, shown only to a
    signed-in reader."""
    client = _client(request)
    settings = client.settings
    name = _opt(request, "name")
    visible = _visible(request)
    if visible is None:
        rows = client.unmatched_messages(name=name, limit=_MESSAGES_SHOWN)
        values = _sees_values(request, "*")
    else:
        # The reader's tenants' messages only, newest first as the one list is.
        rows = sorted(
            (
                m
                for tenant in visible
                for m in client.unmatched_messages(name=name, limit=_MESSAGES_SHOWN, tenant=tenant)
            ),
            key=lambda m: m.at,
            reverse=True,
        )[:_MESSAGES_SHOWN]
        values = all(_sees_values(request, tenant) for tenant in visible)
    return _render(
        request,
        "messages.html",
        rows=rows,
        # A row names no tenant: its key is shown to whoever sees values on every
        # tenant listed.
        values=values,
        params=request.query_params,
        kept=settings.unmatched_messages_kept,
        retention=duration(settings.unmatched_messages_retention_seconds),
    )


def healthz(_: Request) -> Response:
    return PlainTextResponse("ok")


def favicon(_: Request) -> Response:
    """Browsers ask for /favicon.ico on every page whatever the page links: an icon,
    not a 404 line in the access log per page view."""
    return FileResponse(HERE / "static" / "favicon.ico", media_type="image/x-icon")


def routes() -> list[BaseRoute]:
    return [
        *operations.routes(),
        *tasklist.routes(),
        Route("/", home),
        Route("/processes", processes),
        Route("/processes/{key}/{version}", process_page),
        Route("/instances", instance_list),
        Route("/instances/{instance_id}", instance_page),
        Route("/instances/{instance_id}/cancel", cancel_instance, methods=["POST"]),
        Route("/api/instances/{instance_id}", instance_state),
        Route("/incidents", incident_list),
        Route("/incidents/{incident_id}/{op}", incident_action, methods=["POST"]),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/messages", unmatched_messages),
        Route("/healthz", healthz),
        Route("/favicon.ico", favicon),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]


def create_app(
    config: ConsoleConfig,
    *,
    client: Any = None,
    extra_routes: Sequence[BaseRoute] = (),
    throttle: SignInThrottle | None = None,
    mounts: Sequence[Mount] = (),
) -> Starlette:
    """The console app. ``extra_routes`` is where other endpoints of the same process
    join it (Prometheus' ``/metrics``): they are served beside the pages, outside the
    page templates, and are listed before them so they win a path clash. ``mounts``
    are apps served beside the pages that guard themselves (the Camunda API, whose
    guard decides with this console's settings: serve.py): the console's Guard passes
    their paths through. ``throttle`` replaces the default sign-in throttle (its
    bounds: throttle.py)."""
    config.check()
    if client is None:
        client = Client()
    sessions = Sessions(client._store.engine)
    throttle = throttle or SignInThrottle()
    app = Starlette(
        routes=[*extra_routes, *mounts, *routes()],
        middleware=[
            Middleware(AccessLog),
            Middleware(_SecurityHeaders),
            Middleware(
                SessionMiddleware,
                secret_key=config.secret,
                session_cookie="dormant_console",
                same_site="lax",
                https_only=config.secure_cookies,
                max_age=SESSION_SECONDS,
            ),
            Middleware(
                Guard,
                config=config,
                sessions=sessions,
                throttle=throttle,
                elsewhere=tuple(mount.path + "/" for mount in mounts),
            ),
        ],
    )
    app.state.sessions = sessions
    app.state.throttle = throttle
    app.state.config = config
    app.state.client = client
    app.state.queries = ConsoleQueries(client._store.engine)
    return app

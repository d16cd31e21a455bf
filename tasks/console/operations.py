"""The console's operations on running instances beside the incident actions: suspend /
resume, set variables, migrate and modify on the instance page; cancel / suspend /
resume of every instance the instances list's filter selects; retry / resolve / drop of
every incident the incidents list's filter selects; a migrate or set-variables of every
instance it selects; the batches pages; the job types page (pause / resume); and the
parked sweep rows (retry / drop, each confirmed).

Each goes through ``app._act`` (the same refusals: read-only, unauthenticated, a wrong
CSRF token) and through the very Client methods the CLI calls, so a console operator
and a CLI operator get the same checks and the same words (``error: …`` on a refusal).
Form fields are parsed inside the action so that a malformed field is flashed as the
CLI would print it, after the guards, never before them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import quote, urlencode

from starlette.concurrency import iterate_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from dormant.engine_core.checkpoint import ROOT_SCOPE
from dormant.engine_core.errors import InvalidOperation
from dormant.persistence.audit import OUTCOMES, SOURCES, AuditFilter
from dormant.persistence.batches import ItemOutcome
from dormant.persistence.selection import Selector
from dormant.tasks.cli_common import parse_node_pairs as _pairs
from dormant.tasks.cli_common import parse_vars
from dormant.tasks.console.authorization import OPERATOR
from dormant.tasks.console.pages import (
    _act,
    _client,
    _confirmed,
    _moment,
    _opt,
    _principal,
    _queries,
    _render,
    _visible,
    _when,
    instance_tenant,
)
from dormant.tasks.console.security import authenticated, refuse_anonymous

__all__ = ["routes"]

# The filters of the incidents list a bulk retry carries over (form field → Selector).
_INCIDENT_FILTERS = (
    ("process", "key"),
    ("node", "node"),
    ("cause_class", "cause_class"),
    ("tenant", "tenant"),
)
# The filters of the instances list a bulk operation carries over (form field → Selector).
# The list's business key is matched as the CLI's --business-key-like (``%``, ``_``).
_INSTANCE_FILTERS = (
    ("process", "key"),
    ("status", "status"),
    ("business_key", "business_key_like"),
    ("node", "node"),
    ("tenant", "tenant"),
)
_INSTANCE_BULK = ("cancel", "suspend", "resume", "migrate", "set-variables")
_INCIDENT_BULK = ("retry", "resolve", "drop")
# The batch page refreshes every few seconds: its refused targets are all listed (they
# are what an operator acts on), the rest up to this many; the CLI lists every one.
_ITEMS_SHOWN = 500
# The audit page shows the newest this many (the CLI's --limit goes further).
_AUDIT_SHOWN = 500


def _instance_op(op: str, verb: str) -> Callable[[Request], Awaitable[Response]]:
    async def handler(request: Request) -> Response:
        instance_id = request.path_params["instance_id"]
        call = getattr(_client(request), op)
        return await _act(
            request,
            f"{verb} {instance_id}",
            call,
            instance_id,
            tenant_of=instance_tenant(request, instance_id),
        )

    return handler


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


async def set_variables(request: Request) -> Response:
    """``name=value`` lines as the CLI's ``--var`` reads them (JSON, else a string)."""
    instance_id = request.path_params["instance_id"]
    form = await request.form()
    lines = tuple(line for line in _field(form, "vars").splitlines() if line.strip())
    unset = tuple(_field(form, "unset").replace(",", " ").split())
    scope = _field(form, "scope") or ROOT_SCOPE
    retry = form.get("retry") == "1"
    client = _client(request)

    def call() -> None:
        variables = parse_vars(lines)
        client.set_variables(instance_id, variables, unset, scope=scope, retry_incidents=retry)

    names = ", ".join([*(line.partition("=")[0] for line in lines), *(f"-{n}" for n in unset)])
    what = f"setting {names} on {instance_id}" + (" and retrying" if retry else "")
    return await _act(request, what, call, tenant_of=instance_tenant(request, instance_id))


def _words(form: Any, name: str) -> list[str]:
    return _field(form, name).replace(",", " ").split()


async def migrate(request: Request) -> Response:
    """``old=new`` node maps as the CLI's ``--map``; the Client checks the plan first."""
    instance_id = request.path_params["instance_id"]
    form = await request.form()
    raw_version = _field(form, "version")
    maps = tuple(_words(form, "maps"))
    client = _client(request)

    def call() -> None:
        if not raw_version.isdigit():
            raise InvalidOperation(f"--to {raw_version!r} is not a version number")
        client.migrate(instance_id, int(raw_version), _pairs(maps, "--map"))

    return await _act(
        request,
        f"migrating {instance_id} to v{raw_version}",
        call,
        tenant_of=instance_tenant(request, instance_id),
    )


async def modify(request: Request) -> Response:
    instance_id = request.path_params["instance_id"]
    form = await request.form()
    cancel, start = _words(form, "cancel"), _words(form, "start_before")
    client = _client(request)
    return await _act(
        request,
        f"modifying {instance_id}",
        lambda: client.modify(instance_id, cancel, start),
        tenant_of=instance_tenant(request, instance_id),
    )


def _within_tenants(request: Request, selector: Callable[[], Selector]) -> Callable[[], Selector]:
    """A batch touches only the asker's tenants (docs/tenants.md "Authorizations"): a
    tenant it names must be one they operate, and with none named it is bound to their
    one tenant; an asker operating several names one."""
    found = _principal(request)
    acting = None if found is None else found.tenants(OPERATOR)

    def chosen() -> Selector:
        picked = selector()
        if acting is None:
            return picked
        if picked.tenant is None and len(acting) == 1:
            picked = picked.model_copy(update={"tenant": acting[0]})
        if picked.tenant not in acting:
            raise InvalidOperation(
                "a batch acts on one tenant you operate: set the tenant filter to one of "
                f"{', '.join(acting) or '(none: you operate no tenant)'}"
            )
        return picked

    return chosen


def _bulk_act(
    request: Request,
    operation: str,
    selector: Callable[[], Selector],
    params: Callable[[], dict[str, Any]] = dict,
) -> Awaitable[Response]:
    """A batch of ``operation`` over the list's filter, then the batch's page; the
    filter and the parameters are read inside the call so a bad field is flashed in the
    CLI's words."""
    client = _client(request)
    root = request.scope.get("root_path", "")

    def call() -> Any:  # no process chosen: the Client refuses it, in the CLI's words
        return client.bulk(operation, selector(), params())

    return _act(
        request,
        lambda view: f"batch {view.id}: {view.operation}, {view.selected} selected",
        call,
        then=lambda view: f"{root}/batches/{quote(view.id)}",
    )


async def incidents_matching(request: Request) -> Response:
    """Every open incident the incidents list's filter selects, retried, resolved or
    dropped as a batch."""
    op = request.path_params["op"]
    if op not in _INCIDENT_BULK:
        return PlainTextResponse(f"no bulk incident action {op!r}", status_code=404)
    form = await request.form()
    filters = {attr: _field(form, name) or None for name, attr in _INCIDENT_FILTERS}
    selector = _within_tenants(request, lambda: Selector(**filters))
    asked = await _confirm_bulk(request, f"incident_{op}", selector)
    if asked is not None:
        return asked
    return await _bulk_act(request, f"incident_{op}", selector)


# What each bulk operation does, on its confirmation page.
_CONSEQUENCES = {
    "cancel": "Each selected running instance is terminated: its tokens, waits, user tasks "
    "and jobs are withdrawn. This cannot be undone.",
    "suspend": "Each selected instance holds its triggers until it is resumed.",
    "resume": "Each selected suspended instance applies its held triggers in arrival order.",
    "migrate": "Each selected instance moves to the target version (its plan is checked "
    "in its own trigger; one that does not fit is refused).",
    "set_variables": "The variables are set (and unset) on each selected instance.",
    "incident_retry": "Each selected open incident is retried.",
    "incident_resolve": "Each selected open incident is marked resolved and its work is "
    "skipped: the token moves on as if it had succeeded.",
    "incident_drop": "Each selected open incident is dead-lettered: it closes and is kept, "
    "and its token stays where it is, blocking the instance's completion.",
}


def _confirm_bulk(
    request: Request, operation: str, selector: Callable[[], Selector]
) -> Awaitable[Response | None]:
    """The confirmation page of a bulk action, with how many targets it selects now."""
    client = _client(request)
    title = operation.replace("incident_", "").replace("_", " ").capitalize() + " all matching"
    return _confirmed(
        request,
        title,
        _CONSEQUENCES[operation],
        count=lambda: len(client.select(operation, selector())),
    )


def _migrate_params(form: Any) -> dict[str, Any]:
    """``--to VERSION --map old=new...`` of ``dormant instances migrate``."""
    raw_version = _field(form, "version_to")
    if not raw_version.isdigit():
        raise InvalidOperation(f"--to {raw_version!r} is not a version number")
    return {"version": int(raw_version), "mapping": _pairs(tuple(_words(form, "maps")), "--map")}


def _variables_params(form: Any) -> dict[str, Any]:
    """``name=value`` lines, names to unset, a scope and "then retry", as on the
    instance page; the Client checks them as a start's variables."""
    lines = tuple(line for line in _field(form, "vars").splitlines() if line.strip())
    return {
        "variables": parse_vars(lines),
        "unset": tuple(_words(form, "unset")),
        "scope": _field(form, "scope") or ROOT_SCOPE,
        "retry_incidents": form.get("retry") == "1",
    }


_BULK_PARAMS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "migrate": _migrate_params,
    "set-variables": _variables_params,
}


async def instances_matching(request: Request) -> Response:
    """Every instance the instances list's filter selects, cancelled, suspended,
    resumed, migrated or given variables as a batch."""
    op = request.path_params["op"]
    if op not in _INSTANCE_BULK:
        return PlainTextResponse(f"no bulk instance action {op!r}", status_code=404)
    form = await request.form()

    def unscoped() -> Selector:
        if form.get("has_incident") == "1":
            raise InvalidOperation(
                "'has open incident' does not filter a bulk operation; clear it first"
            )
        version = _field(form, "version")
        if version and not version.isdigit():
            raise InvalidOperation(f"version: {version!r} is not a version number")
        filters: dict[str, Any] = {
            attr: _field(form, name) or None for name, attr in _INSTANCE_FILTERS
        }
        return Selector(
            **filters,
            version=int(version) if version else None,
            started_after=_when("started_from", _field(form, "started_from")),
            started_before=_when("started_to", _field(form, "started_to")),
        )

    selector = _within_tenants(request, unscoped)
    asked = await _confirm_bulk(request, op.replace("-", "_"), selector)
    if asked is not None:
        return asked
    read = _BULK_PARAMS.get(op)
    params: Callable[[], dict[str, Any]] = dict if read is None else (lambda: read(form))
    return await _bulk_act(request, op.replace("-", "_"), selector, params)


def _sees_batch(request: Request, view: Any) -> bool:
    """A batch of one tenant is its readers'; one over every tenant (no tenant in its
    selector) is for readers of every tenant."""
    visible = _visible(request)
    return visible is None or view.selector.get("tenant") in visible


def batch_list(request: Request) -> Response:
    views = [v for v in _client(request).batches() if _sees_batch(request, v)]
    return _render(request, "batches.html", batches=views)


def batch_page(request: Request) -> Response:
    client = _client(request)
    batch_id = request.path_params["batch_id"]
    try:
        view = client.batch(batch_id)
        if not _sees_batch(request, view):
            raise InvalidOperation(f"no batch {batch_id!r}; list them with `dormant batches list`")
        items = client.batch_items(batch_id)
    except InvalidOperation as exc:
        return _render(request, "error.html", message=f"error: {exc}", status_code=404)
    refused = [i for i in items if i.outcome == ItemOutcome.REFUSED]
    others = [i for i in items if i.outcome != ItemOutcome.REFUSED]
    shown = sorted(refused + others[: max(0, _ITEMS_SHOWN - len(refused))], key=lambda i: i.seq)
    return _render(request, "batch.html", batch=view, items=shown, more=len(items) - len(shown))


def job_types(request: Request) -> Response:
    """The paused job types and how many jobs each holds (``dormant jobs paused``), and
    flow control per type and per key (``dormant job-types list``)."""
    client = _client(request)
    paused = sorted(client.paused_job_types().items())
    return _render(request, "jobs.html", paused=paused, flow=client.job_types())


async def pause_job_type(request: Request) -> Response:
    form = await request.form()
    job_type = _field(form, "job_type")
    client = _client(request)
    return await _act(
        request, f"paused {job_type}", lambda: client.pause_job_type(job_type), admin=True
    )


async def resume_job_type(request: Request) -> Response:
    form = await request.form()
    job_type = _field(form, "job_type")
    client = _client(request)
    return await _act(
        request,
        lambda count: f"resumed {job_type}: {count} held job(s) sent",
        lambda: client.resume_job_type(job_type),
        admin=True,
    )


def parked_list(request: Request) -> Response:
    """Inbox and outbox rows a sweep parked with their error (``dormant triggers
    parked``; persistence/parked.py), oldest parking first."""
    if _visible(request) is not None:
        return _render(
            request,
            "error.html",
            message="error: parked rows hold triggers of every tenant: reading them needs a "
            "grant on every tenant (role@*; docs/console.md, Users and roles)",
            status_code=403,
        )
    return _render(request, "parked.html", rows=_client(request).parked_rows())


# What a parked row's action does, on its confirmation page.
_PARKED_CONSEQUENCES = {
    "retry": "The row is unparked: the next sweep processes it again (an outbox row is "
    "published as if never sent, an inbox row re-sent). If it fails again it is parked "
    "again with the new error.",
    "drop": "The row is deleted for good: what it held is never sent. This cannot be undone.",
}


async def parked_action(request: Request) -> Response:
    """Retry or drop one parked row, named by its ref (``inbox:<id>``/``outbox:<id>``),
    after a confirmation; the Client records it in the audit trail."""
    op = request.path_params["op"]
    if op not in _PARKED_CONSEQUENCES:
        return PlainTextResponse(f"no parked row action {op!r}", status_code=404)
    form = await request.form()
    ref = _field(form, "ref")
    asked = await _confirmed(
        request, f"{op.capitalize()} parked row {ref}", _PARKED_CONSEQUENCES[op]
    )
    if asked is not None:
        return asked
    client = _client(request)
    call = client.retry_parked if op == "retry" else client.drop_parked
    return await _act(request, f"{op} {ref}", call, ref, admin=True)


_AUDIT_FIELDS = ("actor", "source", "action", "instance", "outcome", "since", "until")


def _audit_filter(request: Request) -> AuditFilter:
    """The page's filters, as ``dormant audit list`` takes them (InvalidOperation naming
    a bad one)."""
    return AuditFilter(
        actor=_opt(request, "actor"),
        source=_opt(request, "source"),
        action=_opt(request, "action"),
        instance_id=_opt(request, "instance"),
        outcome=_opt(request, "outcome"),
        since=_moment(request, "since"),
        until=_moment(request, "until"),
    )


def _audit_reader(request: Request) -> Callable[[Any], bool] | None:
    """Which entries a reader of some tenants sees (None: a reader of every tenant sees
    all): those on their tenants' instances. An entry on no instance (a deploy, a job
    type) reaches every tenant and is not theirs to read (docs/console.md, "Users and
    roles")."""
    visible = _visible(request)
    if visible is None:
        return None
    queries = _queries(request)
    known: dict[str, str | None] = {}

    def shown(entry: Any) -> bool:
        instance_id = entry.instance_id
        if instance_id is None:
            return False
        if instance_id not in known:
            known[instance_id] = queries.instance_tenants([instance_id]).get(instance_id)
        return known[instance_id] in visible

    return shown


def audit_list(request: Request) -> Response:
    """The audit trail (``dormant audit list``), newest first, filtered; server-rendered
    like the other lists. It names who did what, so only a signed-in reader (an
    operator or a viewer) sees it (docs/audit.md)."""
    if not authenticated(request):
        return refuse_anonymous()
    try:
        where = _audit_filter(request)
    except InvalidOperation as exc:
        return _render(request, "error.html", message=f"error: {exc}", status_code=400)
    entries = _client(request).audit_log(where=where, limit=_AUDIT_SHOWN)
    shown = _audit_reader(request)
    if shown is not None:
        entries = [e for e in entries if shown(e)]
    filters = {name: request.query_params.get(name, "") for name in _AUDIT_FIELDS}
    return _render(
        request,
        "audit.html",
        entries=entries,
        filters=filters,
        query=urlencode({k: v for k, v in filters.items() if v}),
        sources=SOURCES,
        outcomes=OUTCOMES,
        shown=_AUDIT_SHOWN,
    )


def audit_export(request: Request) -> Response:
    """``/audit.jsonl``: what ``/audit`` shows with the same filters, every matching row
    (no cap: the retention bounds it), oldest first, one JSON object a line, streamed
    as ``dormant audit export`` prints it."""
    if not authenticated(request):
        return refuse_anonymous()
    try:
        where = _audit_filter(request)
    except InvalidOperation as exc:
        return PlainTextResponse(f"refused: {exc}", status_code=400)
    rows = _client(request).audit_export(where)
    shown = _audit_reader(request)
    if shown is not None:
        rows = (e for e in rows if shown(e))

    def lines() -> Iterator[str]:
        for entry in rows:
            yield json.dumps(entry.as_json(), sort_keys=True) + "\n"

    return StreamingResponse(
        iterate_in_threadpool(lines()),
        media_type="application/jsonl",
        headers={"Content-Disposition": 'attachment; filename="audit.jsonl"'},
    )


def routes() -> list[BaseRoute]:
    return [
        Route("/audit", audit_list),
        Route("/audit.jsonl", audit_export),
        Route(
            "/instances/{instance_id}/suspend",
            _instance_op("suspend", "suspending"),
            methods=["POST"],
        ),
        Route(
            "/instances/{instance_id}/resume", _instance_op("resume", "resuming"), methods=["POST"]
        ),
        Route("/instances/{instance_id}/variables", set_variables, methods=["POST"]),
        Route("/instances/{instance_id}/migrate", migrate, methods=["POST"]),
        Route("/instances/{instance_id}/modify", modify, methods=["POST"]),
        Route("/instances/{op}-matching", instances_matching, methods=["POST"]),
        Route("/incidents/{op}-matching", incidents_matching, methods=["POST"]),
        Route("/batches", batch_list),
        Route("/batches/{batch_id}", batch_page),
        Route("/jobs", job_types),
        Route("/jobs/pause", pause_job_type, methods=["POST"]),
        Route("/jobs/resume", resume_job_type, methods=["POST"]),
        Route("/parked", parked_list),
        Route("/parked/{op}", parked_action, methods=["POST"]),
    ]

"""The Camunda 8 Orchestration Cluster REST API (v2), the subset Camunda's own clients
use (Desktop Modeler, ``c8ctl``, the SDKs and their job workers), served on dormant's
Client: the routes, what each does, and every difference from Camunda are in
docs/camunda-api.md.

Everything goes through the one engine: a deploy is the Store's deploy, a start, a
message, a signal, a user task's completion or an incident's resolution is the
Client's (durable in the inbox, applied by a worker), a job activated here is a job of
the engine's job machinery (tasks/job_dispatch.py offers it to ``api_jobs`` instead of
Celery; its outcome goes back as the same trigger a Celery job's would). Reads are the
Store's, so every answer is consistent with what was committed before it.

Keys: every thing is named by the numeric key ``persistence/api_keys.py`` hands out,
sent as a string of digits. Errors: RFC 9457 problem documents
(``application/problem+json``: type, title, status, detail, instance).
"""

from __future__ import annotations

import base64
import copy
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from dormant.engine_core.checkpoint import ROOT_SCOPE, IncidentState, InstanceStatus
from dormant.engine_core.dmn import DecisionEvaluation, explain_decision
from dormant.engine_core.effects import job_idempotency_key
from dormant.engine_core.errors import (
    DormantError,
    InvalidOperation,
    UnknownDeployment,
    UnknownIncident,
    UnknownInstance,
    UnknownProcess,
    UnknownTask,
)
from dormant.engine_core.model import NodeKind
from dormant.engine_core.tenants import check_tenant, check_tenants
from dormant.engine_core.triggers import (
    AdHocActivation,
    AdHocResult,
    JobCompleted,
    JobErrorThrown,
    JobFailed,
    JobHeartbeat,
)
from dormant.engine_core.views import IncidentView, InstanceView, UserTaskView
from dormant.persistence import api_keys, audit, clock
from dormant.persistence.console_queries import ConsoleQueries
from dormant.persistence.db import read_only
from dormant.persistence.decisions import deployed_decision, file_versions
from dormant.tasks import wire
from dormant.tasks.api import oauth, schemas
from dormant.tasks.api.auth import ApiGuard, Caller
from dormant.tasks.api.problems import Problem
from dormant.tasks.api.problems import problem as _problem
from dormant.tasks.client import Client
from dormant.tasks.console.authorization import ADMIN, OPERATOR, VIEWER
from dormant.tasks.console.config import ConsoleConfig
from dormant.tasks.console.forms import embedded_form
from dormant.tasks.console.security import ACTOR, principal_of
from dormant.tasks.console.throttle import SignInThrottle

__all__ = ["GATEWAY_VERSION", "PREFIX", "create_app", "routes", "v2_app"]

# What Modeler reads from the topology: below 8.8.0 it turns task testing off.
GATEWAY_VERSION = "8.8.0"
TENANT = "<default>"
# Where the routes are mounted, in ``dormant api`` and ``dormant console`` alike.
PREFIX = "/v2"
# Long polling: how long an activation with ``requestTimeout: 0`` waits for a job, and
# how often it looks again (docs/limits.md).
DEFAULT_REQUEST_TIMEOUT_S = 5.0
POLL_S = 0.2
# ``awaitCompletion`` with no ``requestTimeout``.
DEFAULT_AWAIT_S = 30.0
# The actor of a call with no credentials (only on loopback with none configured).
ANONYMOUS_ACTOR = "api"
# Element instance and variable searches with no ``processInstanceKey`` read the newest
# instances, this many (docs/limits.md).
SEARCH_INSTANCES = 1000


_NOT_FOUND = (
    UnknownInstance,
    UnknownProcess,
    UnknownTask,
    UnknownIncident,
    UnknownDeployment,
)


def _status_of(exc: DormantError) -> tuple[int, str]:
    if isinstance(exc, _NOT_FOUND):
        return 404, "NOT_FOUND"
    if isinstance(exc, InvalidOperation):
        return 409, "INVALID_STATE"
    return 400, "INVALID_ARGUMENT"


# -- the context a handler gets ------------------------------------------------------


class Api:
    """What every handler uses: the Client, the key mapping, the clock, and who calls
    (``caller``: each request's own copy, ``calling``)."""

    caller: Caller = Caller(None)

    def __init__(self, client: Client) -> None:
        # The API's operator actions (a cancel, an incident resolution) are recorded as
        # from ``api``; each call acts for its caller (``acting``; docs/audit.md).
        self.client = client.acting_as(ANONYMOUS_ACTOR, "api")
        self.engine = client._store.engine
        self.queries = ConsoleQueries(self.engine)

    def calling(self, caller: Caller) -> Api:
        other = copy.copy(self)
        other.caller = caller
        return other

    def instance(self, instance_id: str, role: str = VIEWER) -> InstanceView:
        """An instance the caller may read (another tenant's is unknown to them: the
        Client's own 404 words) and, for ``role`` above viewer, act on."""
        view = self.client.instance(instance_id)
        missing = f"no instance {instance_id!r}; list them with `dormant instances list`"
        if role == VIEWER:
            self.caller.visible(view.tenant, missing)
        else:
            self.caller.require(view.tenant, missing, role)
        return view

    def tenant_of(self, instance_id: str) -> str:
        return self.queries.instance_tenant(instance_id)

    def acting(self, caller: str | None) -> Api:
        """This Api for one call: its Client records ``caller`` (the guard's
        ``ACTOR``: the Basic user, the OAuth client id, ``token``) as the actor, and
        ``api`` for an anonymous loopback caller."""
        if caller is None:
            return self
        other = copy.copy(self)
        other.client = self.client.acting_as(caller, "api")
        return other

    def key(self, kind: str, dormant_id: str) -> str:
        return str(api_keys.key_of(self.engine, kind, dormant_id))

    def keys(self, kind: str, ids: Sequence[str]) -> dict[str, str]:
        return {i: str(k) for i, k in api_keys.keys_of(self.engine, kind, ids).items()}

    def resolve(self, kind: str, key: str, what: str) -> str:
        """The dormant id a key names, or a 404 problem."""
        try:
            number = int(key)
        except ValueError:
            raise Problem(400, "INVALID_ARGUMENT", f"{what} key {key!r} is not a number") from None
        found = api_keys.dormant_id(self.engine, kind, number)
        if found is None:
            raise Problem(404, "NOT_FOUND", f"no {what} has key {key}")
        return found


Handler = Callable[[Api, dict[str, Any], dict[str, str]], Any]


def _audit_refusal(api: Api, request: Request) -> Callable[[Problem], None]:
    """How a call refused for want of a role on a tenant is recorded: one ``refused``
    row naming the caller, the route and the refusal (docs/audit.md)."""

    def record(refusal: Problem) -> None:
        words = [w for w in request.url.path.split("/") if w and not w.isdigit()]
        cmd = audit.command(
            api.client.actor,
            "api",
            words[-1] if words else request.method.lower(),
            target=f"{request.method} {request.url.path}",
        )
        row = audit.outcome_row(cmd, "refused", clock.now(), detail=refusal.detail)
        audit.record(api.engine, [row])

    return record


def _endpoint(
    handler: Handler, *, multipart: bool = False
) -> Callable[[Request], Awaitable[Response]]:
    """A handler as a Starlette endpoint: the body read (a JSON object, or empty: the
    clients send bodiless POSTs with a JSON content type), the handler run in the
    thread pool (it blocks on the database), its answer or refusal written."""

    async def endpoint(request: Request) -> Response:
        actor = request.scope.get(ACTOR)
        api: Api = request.app.state.api.acting(actor if isinstance(actor, str) else None)
        path = request.url.path
        api = api.calling(Caller(principal_of(request.scope), _audit_refusal(api, request)))
        try:
            if multipart:
                body = await _multipart(request)
            else:
                raw = await request.body()
                body = json.loads(raw) if raw.strip() else {}
                if not isinstance(body, dict):
                    raise Problem(400, "INVALID_ARGUMENT", "the request body must be an object")
            result = await run_in_threadpool(handler, api, body, dict(request.path_params))
        except Problem as exc:
            return _problem(exc.status, exc.title, exc.detail, path)
        except ValidationError as exc:
            return _problem(400, "INVALID_ARGUMENT", _validation_detail(exc), path)
        except json.JSONDecodeError as exc:
            return _problem(400, "INVALID_ARGUMENT", f"the body is not JSON: {exc}", path)
        except DormantError as exc:
            status, title = _status_of(exc)
            return _problem(status, title, str(exc), path)
        if result is None:
            return Response(status_code=204)
        return JSONResponse(result)

    return endpoint


def _validation_detail(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "body"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


async def _multipart(request: Request) -> dict[str, Any]:
    form = await request.form()
    files: list[tuple[str, bytes]] = []
    for part in form.getlist("resources"):
        if isinstance(part, UploadFile):
            files.append((part.filename or "resource", await part.read()))
    tenant = form.get("tenantId")
    return {"resources": files, "tenantId": tenant if isinstance(tenant, str) else None}


M = TypeVar("M", bound=BaseModel)


def _model(cls: type[M], body: dict[str, Any]) -> M:
    return cls.model_validate(body)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


def _cursor(offset: int) -> str:
    return base64.b64encode(json.dumps({"offset": offset}).encode()).decode()


def _offset(cursor: str) -> int:
    try:
        offset = json.loads(base64.b64decode(cursor, validate=True))["offset"]
    except (ValueError, KeyError, TypeError):
        raise Problem(
            400, "INVALID_ARGUMENT", f"page cursor {cursor!r} is not one of ours"
        ) from None
    if not isinstance(offset, int) or offset < 0:
        raise Problem(400, "INVALID_ARGUMENT", f"page cursor {cursor!r} is not one of ours")
    return offset


def _sort_value(value: Any) -> tuple[int, str]:
    """Nulls last; numeric strings (keys) by number, the rest as text."""
    if value is None:
        return (2, "")
    text = str(value)
    return (0, text.rjust(25, "0")) if text.isdigit() else (1, text)


def _by(field: str) -> Callable[[dict[str, Any]], tuple[int, str]]:
    return lambda item: _sort_value(item.get(field))


def _page(items: list[dict[str, Any]], search: schemas.Search) -> dict[str, Any]:
    """One page of the answer: sorted by the ``sort`` fields (each a field of the
    item), cut by ``from``, ``after`` or ``before``. A cursor is the item's position
    (base64 JSON), so it is exact while the set does not change between pages."""
    for sort in reversed(search.sort):
        items = sorted(
            items,
            key=_by(sort.field),
            reverse=sort.order.upper() == "DESC",
        )
    page = search.page
    if page.after is not None:
        start = _offset(page.after)
    elif page.before is not None:
        start = max(_offset(page.before) - page.limit, 0)
    else:
        start = page.from_
    end = start + page.limit
    if page.before is not None:
        end = min(end, _offset(page.before))
    shown = items[start:end]
    return {
        "items": shown,
        "page": {
            "totalItems": len(items),
            "hasMoreTotalItems": False,
            "startCursor": _cursor(start) if shown else None,
            "endCursor": _cursor(start + len(shown)) if shown else None,
        },
    }


def _filter_key(search: schemas.Search, name: str) -> str | None:
    """A key filter's value: a plain key, or ``{"$eq": key}``."""
    value = search.filter.get(name)
    if isinstance(value, dict):
        value = value.get("$eq")
    return None if value is None else str(value)


# -- cluster -------------------------------------------------------------------------


def topology(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    partitions = [{"partitionId": 1, "role": "leader", "health": "healthy", "state": "active"}]
    broker = {
        "nodeId": 0,
        "brokerId": 0,
        "host": "dormant",
        "port": 0,
        "version": GATEWAY_VERSION,
        "partitions": partitions,
    }
    return {
        "brokers": [broker],
        "clusterId": "dormant",
        "clusterSize": 1,
        "partitionsCount": 1,
        "replicationFactor": 1,
        "gatewayVersion": GATEWAY_VERSION,
        "lastCompletedChangeId": "-1",
        "physicalTenants": [
            {
                "physicalTenantId": TENANT,
                "partitionsCount": 1,
                "replicationFactor": 1,
                "lastCompletedChangeId": "-1",
                "brokers": [{"brokerId": 0, "partitions": partitions}],
            }
        ],
        # Not Camunda's: the engine answering is dormant (docs/camunda-api.md).
        "dormant": True,
    }


def status(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    api.client._store.queries.counts()  # the database answers
    return None


def license_(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    return {
        "validLicense": True,
        "licenseType": "dormant (Apache-2.0)",
        "isCommercial": False,
        "expiresAt": None,
    }


# -- deployments ---------------------------------------------------------------------


def deploy(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    files: list[tuple[str, bytes]] = body["resources"]
    if not files:
        raise Problem(400, "INVALID_ARGUMENT", "no resources to deploy (multipart 'resources')")
    store = api.client._store
    tenant = check_tenant(body.get("tenantId"), "tenantId")
    api.caller.require(tenant, "", ADMIN)
    # Forms go through the same deploy as models: told apart by content, kept in
    # ``forms`` (persistence/forms.py), versioned per form id.
    names: list[str | None] = [n for n, _ in files]
    deployed = store.deployments.deploy_many(
        [d for _, d in files],
        clock.now(),
        names,
        tenant=tenant,
        audited=api.client._command("deploy"),
    )
    if not deployed:
        raise Problem(
            400,
            "INVALID_ARGUMENT",
            f"{', '.join(n for n, _ in files)}: no executable process, decision or form",
        )
    out: list[dict[str, Any]] = []
    deployment_key = deployed[0].deployment_key
    given = dict.fromkeys(n for n, _ in files)
    for r in deployed[0].resources:
        resource_name = r.name if r.name in given else (r.name or f"{r.id}.bpmn")
        if r.kind == "form":
            out.append(
                {
                    "form": {
                        "formId": r.id,
                        "version": r.version,
                        "resourceName": resource_name,
                        "tenantId": tenant,
                        "formKey": api.key("form", r.id),
                    }
                }
            )
        elif r.kind == "process":
            out.append(
                {
                    "processDefinition": {
                        "processDefinitionId": r.id,
                        "processDefinitionVersion": r.version,
                        "resourceName": resource_name,
                        "tenantId": tenant,
                        "processDefinitionKey": api.key("process", f"{r.id}:{r.version}"),
                    }
                }
            )
        else:
            key = api.key("decision", f"{r.id}:{r.version}")
            out.append(
                {
                    "decisionDefinition": {
                        "decisionDefinitionId": r.id,
                        "version": r.version,
                        "name": r.id,
                        "tenantId": tenant,
                        "decisionRequirementsId": r.id,
                        "decisionDefinitionKey": key,
                        "decisionRequirementsKey": key,
                    }
                }
            )
    key = api.key("deployment", str(deployment_key))
    return {"deploymentKey": key, "tenantId": tenant, "deployments": out}


# -- process instances ---------------------------------------------------------------


def create_instance(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    req = _model(schemas.CreateInstance, body)
    store = api.client._store
    if req.process_definition_key is not None:
        process_key, _, v = api.resolve(
            "process", req.process_definition_key, "process definition"
        ).rpartition(":")
        version: int | None = int(v)
    elif req.process_definition_id:
        process_key = req.process_definition_id
        version = None if req.process_definition_version < 0 else req.process_definition_version
    else:
        raise Problem(
            400,
            "INVALID_ARGUMENT",
            "give processDefinitionId (and optionally processDefinitionVersion) "
            "or processDefinitionKey",
        )
    _, version = store.deployments.definition(process_key, version)
    tenant = check_tenant(req.tenant_id, "tenantId")
    api.caller.require(tenant, "")
    producer = api.client.for_tenant(tenant)
    instance_id = producer.start(process_key, req.variables, req.business_id, version=version)
    variables: dict[str, Any] = {}
    if req.await_completion:
        wait_s = req.request_timeout / 1000 if req.request_timeout > 0 else DEFAULT_AWAIT_S
        view = _await_end(api, instance_id, wait_s)
        if view.status != InstanceStatus.COMPLETED:
            raise Problem(
                409,
                "INVALID_STATE",
                f"process instance {api.key('instance', instance_id)} ended {view.status}, "
                "not completed",
            )
        variables = dict(view.variables)
        if req.fetch_variables:
            variables = {k: v for k, v in variables.items() if k in req.fetch_variables}
    return {
        "processDefinitionId": process_key,
        "processDefinitionVersion": version,
        "tenantId": tenant,
        "variables": variables,
        "processDefinitionKey": api.key("process", f"{process_key}:{version}"),
        "processInstanceKey": api.key("instance", instance_id),
        "tags": req.tags,
        "businessId": req.business_id,
    }


def _await_end(api: Api, instance_id: str, wait_s: float) -> InstanceView:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            view = api.client.instance(instance_id)
        except UnknownInstance:
            view = None  # its start is still on its way to a worker
        if view is not None and InstanceStatus(view.status).ended:
            return view
        if time.monotonic() >= deadline:
            raise Problem(
                504,
                "DEADLINE_EXCEEDED",
                f"process instance {api.key('instance', instance_id)} did not complete "
                f"within {wait_s:g} s (requestTimeout); it keeps running",
            )
        time.sleep(POLL_S)


_STATES = {
    InstanceStatus.COMPLETED: "COMPLETED",
    InstanceStatus.TERMINATED: "TERMINATED",
    InstanceStatus.FAILED: "TERMINATED",
}


def _instance_state(view: InstanceView) -> str:
    if view.suspended:
        return "SUSPENDED"
    try:
        return _STATES.get(InstanceStatus(view.status), "ACTIVE")
    except ValueError:
        return "ACTIVE"  # flagged: its checkpoint could not be read


def _instance(api: Api, view: InstanceView, keys: dict[str, str] | None = None) -> dict[str, Any]:
    keys = keys if keys is not None else api.keys("instance", [view.id])
    parent = view.parent_instance_id
    if parent is not None and parent not in keys:
        keys = {**keys, **api.keys("instance", [parent])}
    own = keys[view.id]
    return {
        "processDefinitionId": view.key,
        "processDefinitionName": view.key,
        "processDefinitionVersion": view.version,
        "processDefinitionVersionTag": None,
        "startDate": _iso(view.created_at),
        "endDate": _iso(view.ended_at),
        "state": _instance_state(view),
        "suspendedDate": None,
        "hasIncident": any(not IncidentState(i.state).closed for i in view.incidents),
        "tenantId": view.tenant,
        "processInstanceKey": own,
        "processDefinitionKey": api.key("process", f"{view.key}:{view.version}"),
        "parentProcessInstanceKey": keys[parent] if parent is not None else None,
        "parentElementInstanceKey": None,
        "rootProcessInstanceKey": own,
        "tags": [],
        "businessId": view.business_key,
    }


def get_instance(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    instance_id = api.resolve("instance", path["key"], "process instance")
    return _instance(api, api.instance(instance_id))


def search_instances(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    search = _model(schemas.Search, body)
    f = search.filter
    process_id = f.get("processDefinitionId")
    views = api.client.instances(key=str(process_id) if process_id else None, limit=10000)
    views = [v for v in views if api.caller.reads(v.tenant)]
    wanted_key = _filter_key(search, "processInstanceKey")
    if wanted_key is not None:
        found = api_keys.dormant_id(api.engine, "instance", int(wanted_key))
        views = [v for v in views if v.id == found]
    keys = api.keys("instance", [v.id for v in views])
    items = [_instance(api, v, keys) for v in views]
    for field in ("state", "processDefinitionVersion", "processDefinitionKey"):
        want = f.get(field)
        if isinstance(want, dict):
            want = want.get("$eq")
        if want is not None:
            items = [i for i in items if str(i[field]) == str(want)]
    return _page(items, search)


def cancel_instance(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    instance_id = api.resolve("instance", path["key"], "process instance")
    api.instance(instance_id, OPERATOR)
    api.client.cancel(instance_id)
    return None


def _node_of(api: Api, instance_id: str, element_key: str) -> str:
    """The node an element instance key's token is at (the engine modifies by node)."""
    element = api_keys.dormant_id(api.engine, "element", int(element_key))
    if element is None or not element.startswith(f"{instance_id}:"):
        raise Problem(
            404, "NOT_FOUND", f"no element instance of this instance has key {element_key}"
        )
    token_id = element.partition(":")[2]
    token = api.client._store.queries.checkpoint(instance_id).tokens.get(token_id)
    if token is None:
        raise Problem(404, "NOT_FOUND", f"element instance {element_key} is no longer active")
    return token.node_id


def modify_instance(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    """The engine's modify operation: tokens cancelled at the nodes named (by element
    id, or by an element instance key's node), tokens started before each activated or
    move target; the engine refuses a result it would find inconsistent (409)."""
    req = _model(schemas.ModifyInstance, body)
    instance_id = api.resolve("instance", path["key"], "process instance")
    api.instance(instance_id, OPERATOR)
    activated = any(a.variable_instructions for a in req.activate_instructions)
    if activated or any(m.variable_instructions for m in req.move_instructions):
        raise Problem(
            400,
            "INVALID_ARGUMENT",
            "variableInstructions are not applied by dormant's modification; set the "
            "variables first (PUT /v2/element-instances/{key}/variables)",
        )
    cancel: list[str] = []
    for t in req.terminate_instructions:
        if t.element_instance_key is not None:
            cancel.append(_node_of(api, instance_id, t.element_instance_key))
        elif t.element_id:
            cancel.append(t.element_id)
    start: list[str] = [a.element_id for a in req.activate_instructions]
    for m in req.move_instructions:
        source = m.source_element_instruction
        if source.source_element_instance_key is not None:
            cancel.append(_node_of(api, instance_id, source.source_element_instance_key))
        elif source.source_element_id:
            cancel.append(source.source_element_id)
        start.append(m.target_element_id)
    if not cancel and not start:
        raise Problem(400, "INVALID_ARGUMENT", "no instruction to apply")
    api.client.modify(instance_id, list(dict.fromkeys(cancel)), start)
    return None


def migrate_instance(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    """The engine's migrate operation: to another version of the instance's own process
    (dormant migrates between versions of one process id), nodes mapped as given."""
    req = _model(schemas.MigrateInstance, body)
    instance_id = api.resolve("instance", path["key"], "process instance")
    target, _, v = api.resolve(
        "process", req.target_process_definition_key, "process definition"
    ).rpartition(":")
    view = api.instance(instance_id, OPERATOR)
    if target != view.key:
        raise Problem(
            400,
            "INVALID_ARGUMENT",
            f"dormant migrates an instance between versions of its own process "
            f"({view.key!r}), not to {target!r}",
        )
    mapping = {m.source_element_id: m.target_element_id for m in req.mapping_instructions}
    api.client.migrate(instance_id, int(v), mapping or None)
    return None


# -- jobs ----------------------------------------------------------------------------


def activate_jobs(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    req = _model(schemas.ActivateJobs, body)
    tenants = check_tenants(req.tenant_ids, "tenantIds") if req.tenant_ids else None
    allowed = api.caller.tenants(OPERATOR)
    if allowed is not None:
        # A worker activates only its caller's tenants' jobs (docs/tenants.md).
        refused = [t for t in tenants or () if t not in allowed]
        if refused:
            api.caller.require(refused[0], "")
        tenants = tenants or allowed
    worker = req.worker or "default"
    timeout = timedelta(milliseconds=req.timeout)
    if req.request_timeout < 0:
        wait_s = 0.0
    elif req.request_timeout == 0:
        wait_s = DEFAULT_REQUEST_TIMEOUT_S
    else:
        wait_s = req.request_timeout / 1000
    deadline = time.monotonic() + wait_s
    while True:
        jobs = api_keys.activate(
            api.engine, req.type, worker, timeout, req.max_jobs_to_activate, clock.now(), tenants
        )
        retries = _live(api, jobs)
        jobs = [j for j in jobs if j.key in retries]
        if jobs or time.monotonic() + POLL_S > deadline:
            break
        time.sleep(POLL_S)
    for job in jobs:
        # The engine's own timeout of the job becomes the worker's: a job the worker
        # never reports is dispatched again as the next attempt (engine_core/jobs.py).
        idem = job_idempotency_key(job.instance_id, job.wait_id, job.attempt)
        api.client.report_job(
            job.instance_id,
            JobHeartbeat(
                wait_id=job.wait_id,
                attempt=job.attempt,
                extend_seconds=min(timeout.total_seconds(), 7 * 24 * 3600),
            ),
            wire.job_heartbeat_id(idem),
        )
    processes = api_keys.instance_processes(api.engine, [j.instance_id for j in jobs])
    instance_keys = api.keys("instance", [j.instance_id for j in jobs])
    out = []
    for job in jobs:
        process_key, version = processes.get(job.instance_id, ("", 0))
        variables = job.variables
        if req.fetch_variable:
            variables = {k: v for k, v in variables.items() if k in req.fetch_variable}
        own = instance_keys[job.instance_id]
        out.append(
            {
                "type": job.job_type,
                "processDefinitionId": process_key,
                "processDefinitionVersion": version,
                "elementId": job.node_id,
                "customHeaders": job.headers,
                "worker": worker,
                "retries": retries[job.key],
                "deadline": int((job.deadline or clock.now()).timestamp() * 1000),
                "variables": variables,
                "tenantId": job.tenant,
                "physicalTenantId": TENANT,
                "jobKey": str(job.key),
                "processInstanceKey": own,
                "processDefinitionKey": api.key("process", f"{process_key}:{version}"),
                "elementInstanceKey": api.key("element", f"{job.instance_id}.{job.wait_id}"),
                "kind": _job_kind(api, job, (process_key, version)),
                "listenerEventType": "UNSPECIFIED",
                "userTask": None,
                "tags": [],
                "rootProcessInstanceKey": own,
                "businessId": None,
                "priority": 0,
            }
        )
    return {"jobs": out}


def _job_kind(api: Api, job: api_keys.ApiJob, process: tuple[str, int]) -> str:
    """``AD_HOC_SUB_PROCESS`` for the job of a job-worker ad-hoc sub-process (the
    worker answers it with a result naming the elements to run), else
    ``BPMN_ELEMENT``."""
    try:
        definition, _ = api.client._store.deployments.definition(*process)
    except DormantError:
        return "BPMN_ELEMENT"
    node = definition.nodes.get(job.node_id)
    if node is not None and node.kind is NodeKind.AD_HOC_SUB_PROCESS:
        return "AD_HOC_SUB_PROCESS"
    return "BPMN_ELEMENT"


def _live(api: Api, jobs: list[api_keys.ApiJob]) -> dict[int, int]:
    """The retries left of each job still waited for (Camunda's count: the attempts
    left, this one included); a job whose wait is gone or moved on (its instance was
    cancelled, its element interrupted, the engine timed it out) is removed, not
    handed out."""
    out: dict[int, int] = {}
    for job in jobs:
        try:
            wait = api.client._store.queries.checkpoint(job.instance_id).waits.get(job.wait_id)
        except UnknownInstance:
            wait = None
        if wait is None or wait.attempt != job.attempt or not wait.job_running:
            api_keys.take(api.engine, job.key)
            continue
        out[job.key] = wait.retries_left + 1
    return out


def _take(api: Api, key: str) -> api_keys.ApiJob:
    try:
        number = int(key)
    except ValueError:
        raise Problem(400, "INVALID_ARGUMENT", f"job key {key!r} is not a number") from None
    # Another tenant's job is no job to this caller, and is left where it is.
    job = api_keys.take(api.engine, number, api.caller.tenants(OPERATOR))
    if job is None:
        raise Problem(
            404,
            "NOT_FOUND",
            f"no activated job has key {key} (already completed, failed or timed out)",
        )
    return job


def _report(api: Api, job: api_keys.ApiJob, trigger: Any) -> None:
    idem = job_idempotency_key(job.instance_id, job.wait_id, job.attempt)
    api.client.report_job(job.instance_id, trigger, wire.job_result_id(idem))


def _ad_hoc_result(api: Api, key: str, result: schemas.JobResult) -> AdHocResult:
    """A result of type ``adHocSubProcess``, checked before the job is taken: only the
    job of an ad-hoc sub-process (its job-worker implementation) takes one."""
    if result.type not in (None, "adHocSubProcess"):
        raise Problem(
            400,
            "INVALID_ARGUMENT",
            f"result type {result.type!r} is not served; dormant takes the job result of "
            "an ad-hoc sub-process (type adHocSubProcess) only (docs/camunda-api.md)",
        )
    job = api_keys.job(api.engine, int(key)) if key.isdigit() else None
    if job is not None:
        process = api_keys.instance_processes(api.engine, [job.instance_id])
        process_key, version = process.get(job.instance_id, ("", 0))
        definition, _ = api.client._store.deployments.definition(process_key, version)
        node = definition.nodes.get(job.node_id)
        if node is None or node.kind is not NodeKind.AD_HOC_SUB_PROCESS:
            raise Problem(
                400,
                "INVALID_ARGUMENT",
                f"job {key} is the job of element {job.node_id!r}, not of an ad-hoc "
                "sub-process: a result of type adHocSubProcess is for those only",
            )
    return AdHocResult(
        activate=[
            AdHocActivation(element_id=a.element_id, variables=a.variables or {})
            for a in result.activate_elements
        ],
        completion_condition_fulfilled=result.is_completion_condition_fulfilled,
        cancel_remaining=result.is_cancel_remaining_instances,
    )


def complete_job(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    req = _model(schemas.CompleteJob, body)
    ad_hoc = _ad_hoc_result(api, path["key"], req.result) if req.result is not None else None
    job = _take(api, path["key"])
    trigger = JobCompleted(
        wait_id=job.wait_id, attempt=job.attempt, variables=req.variables or {}, ad_hoc=ad_hoc
    )
    _report(api, job, trigger)
    return None


def fail_job(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    req = _model(schemas.FailJob, body)
    job = _take(api, path["key"])
    error = req.error_message or f"job {path['key']} failed (no error message)"
    trigger = JobFailed(
        wait_id=job.wait_id,
        attempt=job.attempt,
        error=error,
        retries=max(req.retries, 0),
        backoff_seconds=min(max(req.retry_back_off, 0) / 1000, 7 * 24 * 3600),
    )
    _report(api, job, trigger)
    return None


def throw_job_error(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    req = _model(schemas.ThrowJobError, body)
    job = _take(api, path["key"])
    trigger = JobErrorThrown(
        wait_id=job.wait_id,
        attempt=job.attempt,
        code=req.error_code,
        message=req.error_message or "",
        variables=req.variables or {},
    )
    _report(api, job, trigger)
    return None


def update_job(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    """``timeout`` moves the activated job's deadline; ``retries`` sets its attempts
    left (this one included), as a failure's ``retries`` does: one heartbeat trigger
    carries both (engine_core/jobs.py)."""
    req = _model(schemas.UpdateJob, body)
    idem = api.resolve("job", path["key"], "job")
    change = req.changeset
    if change.timeout is None and change.retries is None:
        return None
    job = api_keys.job(api.engine, int(path["key"]))
    allowed = api.caller.tenants(OPERATOR)
    if job is None or job.worker is None or (allowed is not None and job.tenant not in allowed):
        raise Problem(404, "NOT_FOUND", f"no activated job has key {path['key']}")
    extend = None
    if change.timeout is not None:
        api_keys.extend(api.engine, job.key, clock.now() + timedelta(milliseconds=change.timeout))
        extend = min(change.timeout / 1000, 7 * 24 * 3600)
    api.client.report_job(
        job.instance_id,
        JobHeartbeat(
            wait_id=job.wait_id,
            attempt=job.attempt,
            extend_seconds=extend,
            retries=change.retries,
        ),
        wire.job_heartbeat_id(idem),
    )
    return None


# -- messages and signals ------------------------------------------------------------


def publish_message(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    req = _model(schemas.PublishMessage, body)
    ttl = None if req.time_to_live is None else req.time_to_live / 1000
    producer = api.client.for_tenant(check_tenant(req.tenant_id, "tenantId"))
    api.caller.require(producer.tenant, "")
    message_id = producer.send_message(
        req.name, req.correlation_key, req.variables, req.message_id, ttl
    )
    return {"tenantId": producer.tenant, "messageKey": api.key("message", message_id)}


def correlate_message(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    req = _model(schemas.CorrelateMessage, body)
    producer = api.client.for_tenant(check_tenant(req.tenant_id, "tenantId"))
    api.caller.require(producer.tenant, "")
    holders = api_keys.message_holders(api.engine, req.name, req.correlation_key, producer.tenant)
    if not holders:
        raise Problem(
            404,
            "NOT_FOUND",
            f"no process instance waits for message {req.name!r} with correlation key "
            f"{req.correlation_key!r}",
        )
    message_id = producer.send_message(req.name, req.correlation_key, req.variables, None, 0)
    return {
        "tenantId": producer.tenant,
        "messageKey": api.key("message", message_id),
        "processInstanceKey": api.key("instance", holders[0]),
    }


def broadcast_signal(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    req = _model(schemas.BroadcastSignal, body)
    producer = api.client.for_tenant(check_tenant(req.tenant_id, "tenantId"))
    api.caller.require(producer.tenant, "")
    signal_id = producer.signal(req.signal_name, req.variables)
    return {"tenantId": producer.tenant, "signalKey": api.key("signal", signal_id)}


# -- user tasks ----------------------------------------------------------------------


def _user_task(api: Api, view: UserTaskView, process: tuple[str, int]) -> dict[str, Any]:
    instance_key = api.key("instance", view.instance_id)
    return {
        "name": view.name,
        "state": "CREATED" if view.state == "created" else view.state.upper(),
        "assignee": view.assignee,
        "elementId": view.node_id,
        "candidateGroups": list(view.candidate_groups),
        "candidateUsers": list(view.candidate_users),
        "processDefinitionId": process[0],
        "creationDate": _iso(view.created_at),
        "completionDate": None,
        "followUpDate": _iso(view.follow_up_date),
        "dueDate": _iso(view.due_date),
        "tenantId": view.tenant,
        "externalFormReference": view.external_reference,
        "processDefinitionVersion": process[1],
        "customHeaders": {},
        "priority": view.priority,
        "userTaskKey": api.key("user_task", view.id),
        "elementInstanceKey": api.key("element", view.id),
        "processName": process[0],
        "processDefinitionKey": api.key("process", f"{process[0]}:{process[1]}"),
        "processInstanceKey": instance_key,
        "rootProcessInstanceKey": instance_key,
        "businessId": None,
        "formKey": _form_key(api, view, process),
        "tags": [],
    }


def search_user_tasks(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    search = _model(schemas.Search, body)
    instance_key = _filter_key(search, "processInstanceKey")
    instance_id = None
    if instance_key is not None:
        instance_id = api_keys.dormant_id(api.engine, "instance", int(instance_key))
        if instance_id is None:
            return _page([], search)
    assignee = search.filter.get("assignee")
    views = api.client.user_tasks(
        instance_id, assignee=str(assignee) if isinstance(assignee, str) else None
    )
    views = [v for v in views if api.caller.reads(v.tenant)]
    element = search.filter.get("elementId")
    if element is not None:
        views = [v for v in views if v.node_id == element]
    state = search.filter.get("state")
    if state not in (None, "CREATED"):
        views = []  # an open task is CREATED; completed ones are not kept
    processes = api_keys.instance_processes(api.engine, [v.instance_id for v in views])
    return _page([_user_task(api, v, processes[v.instance_id]) for v in views], search)


def _task_id(api: Api, key: str, role: str = VIEWER) -> str:
    """The task a key names, if the caller may read it (another tenant's is a 404) and,
    for ``role`` above viewer, act on it."""
    task_id = api.resolve("user_task", key, "user task")
    tenant = api.client.user_task(task_id).tenant
    if role == VIEWER:
        api.caller.visible(tenant, f"no user task has key {key}")
    else:
        api.caller.require(tenant, f"no user task has key {key}", role)
    return task_id


def get_user_task(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    view = api.client.user_task(_task_id(api, path["key"]))
    process = api_keys.instance_processes(api.engine, [view.instance_id])[view.instance_id]
    return _user_task(api, view, process)


def assign_user_task(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    req = _model(schemas.AssignUserTask, body)
    task_id = _task_id(api, path["key"], OPERATOR)
    if req.allow_override:
        api.client.assign_task(task_id, req.assignee)
    else:
        api.client.claim_task(task_id, req.assignee)
    return None


def unassign_user_task(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    api.client.unassign_task(_task_id(api, path["key"], OPERATOR))
    return None


def complete_user_task(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    req = _model(schemas.CompleteUserTask, body)
    task_id = _task_id(api, path["key"], OPERATOR)
    # The task's own tenant: the request names none (docs/tenants.md).
    producer = api.client.for_tenant(api.client.user_task(task_id).tenant)
    producer.complete_task(task_id, req.variables)
    return None


def _form_key(api: Api, view: UserTaskView, process: tuple[str, int]) -> str | None:
    """The key of the task's form: a linked form's is its form id's (the latest
    version is served, as the tasklist draws it); an embedded one's is its process
    version's."""
    if view.form_id:
        return api.key("form", view.form_id)
    if view.form_key:
        return api.key("form", f"{process[0]}:{process[1]}:{view.form_key}")
    return None


def user_task_form(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    """The task's Camunda Form (``FormResult``: its JSON as the ``schema`` string), or
    204 when it has none; a linked form not deployed is a 404."""
    view = api.client.user_task(_task_id(api, path["key"]))
    process = api_keys.instance_processes(api.engine, [view.instance_id])[view.instance_id]
    form_key = _form_key(api, view, process)
    if view.form_id:
        linked = api.queries.form_source(view.form_id)
        if linked is None:
            raise Problem(404, "NOT_FOUND", f"linked form {view.form_id!r} is not deployed")
        version, text = linked
        return {
            "tenantId": view.tenant,
            "formId": view.form_id,
            "schema": text,
            "version": version,
            "formKey": form_key,
        }
    if view.form_key:
        source = api.queries.definition_source(process[0], process[1]) or ""
        schema = embedded_form(source, view.form_key)
        if schema is None:
            raise Problem(
                404, "NOT_FOUND", f"form key {view.form_key} names no form embedded in the process"
            )
        return {
            "tenantId": view.tenant,
            "formId": str(schema.get("id") or view.form_key.rsplit(":", 1)[-1]),
            "schema": json.dumps(schema),
            "version": process[1],
            "formKey": form_key,
        }
    return None  # 204: the task has no Camunda Form


# -- element instances and variables -------------------------------------------------

_LIVE_TOKENS = ("active", "waiting", "incident")


def _element_type(kind: str) -> str:
    """A model node kind (``serviceTask``) as Camunda's element type (``SERVICE_TASK``)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).upper()


def _element_rows(api: Api, view: InstanceView) -> list[dict[str, Any]]:
    """The instance's element instances dormant can name: the process itself (its key
    is also an element instance key, as in Camunda) and each live token, at the node it
    is at. Completed element instances are history (``dormant instances history``)."""
    instance_key = api.key("instance", view.id)
    process_key = api.key("process", f"{view.key}:{view.version}")
    state = _instance_state(view)
    state = "ACTIVE" if state == "SUSPENDED" else state
    open_incidents = {
        i.token_id: api.key("incident", i.id)
        for i in view.incidents
        if not IncidentState(i.state).closed
    }
    base = {
        "processDefinitionId": view.key,
        "tenantId": view.tenant,
        "processInstanceKey": instance_key,
        "rootProcessInstanceKey": instance_key,
        "processDefinitionKey": process_key,
    }
    rows = [
        {
            **base,
            "startDate": _iso(view.created_at),
            "endDate": _iso(view.ended_at),
            "elementId": view.key,
            "elementName": view.key,
            "type": "PROCESS",
            "state": state,
            "hasIncident": bool(open_incidents),
            "elementInstanceKey": instance_key,
            "incidentKey": None,
        }
    ]
    tokens = [t for t in view.tokens if t.state in _LIVE_TOKENS]
    if not tokens:
        return rows
    definition, _ = api.client._store.deployments.definition(view.key, view.version)
    keys = api.keys("element", [f"{view.id}:{t.id}" for t in tokens])
    for token in tokens:
        node = definition.nodes.get(token.node_id)
        rows.append(
            {
                **base,
                "startDate": _iso(view.created_at),
                "endDate": None,
                "elementId": token.node_id,
                "elementName": (node.name if node is not None else None) or token.node_id,
                "type": _element_type(str(node.kind)) if node is not None else "UNKNOWN",
                "state": "ACTIVE",
                "hasIncident": token.id in open_incidents,
                "elementInstanceKey": keys[f"{view.id}:{token.id}"],
                "incidentKey": open_incidents.get(token.id),
            }
        )
    return rows


def _instances_for(api: Api, search: schemas.Search) -> list[InstanceView]:
    """The instances a search names by ``processInstanceKey`` (or
    ``processDefinitionId``), else the newest (docs/limits.md: ``SEARCH_INSTANCES``)."""
    instance_key = _filter_key(search, "processInstanceKey")
    if instance_key is not None:
        found = api_keys.dormant_id(api.engine, "instance", int(instance_key))
        if found is None:
            return []
        try:
            return [api.instance(found)]
        except (UnknownInstance, Problem):
            return []
    process_id = search.filter.get("processDefinitionId")
    views = api.client.instances(
        key=str(process_id) if process_id else None, limit=SEARCH_INSTANCES
    )
    return [v for v in views if api.caller.reads(v.tenant)]


def _matches(item: dict[str, Any], search: schemas.Search, fields: Sequence[str]) -> bool:
    for field in fields:
        want = search.filter.get(field)
        if isinstance(want, dict):
            want = want.get("$eq")
        if want is not None and str(item.get(field)) != str(want):
            return False
    return True


def search_element_instances(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    search = _model(schemas.Search, body)
    rows = [r for v in _instances_for(api, search) for r in _element_rows(api, v)]
    fields = ("elementId", "state", "type", "elementInstanceKey", "processDefinitionKey")
    return _page([r for r in rows if _matches(r, search, fields)], search)


def _element(api: Api, key: str, role: str = VIEWER) -> tuple[InstanceView, str | None]:
    """The instance and token an element instance key names (token None: the process
    instance's own key, its root scope)."""
    try:
        number = int(key)
    except ValueError:
        raise Problem(
            400, "INVALID_ARGUMENT", f"element instance key {key!r} is not a number"
        ) from None
    element = api_keys.dormant_id(api.engine, "element", number)
    if element is not None and ":" in element:
        instance_id, _, token_id = element.partition(":")
        return api.instance(instance_id, role), token_id
    own = api_keys.dormant_id(api.engine, "instance", number)
    if own is None:
        raise Problem(404, "NOT_FOUND", f"no element instance has key {key}")
    return api.instance(own, role), None


def get_element_instance(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    view, _ = _element(api, path["key"])
    for row in _element_rows(api, view):
        if row["elementInstanceKey"] == path["key"]:
            return row
    raise Problem(404, "NOT_FOUND", f"element instance {path['key']} is no longer active")


def set_element_variables(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    """The engine's set-variables operation: on the process instance's key, or not
    ``local``, the root scope; ``local`` on an element, the scope its token runs in
    (a sub-process's own scope for a sub-process element)."""
    req = _model(schemas.SetVariables, body)
    view, token_id = _element(api, path["key"], OPERATOR)
    scope = ROOT_SCOPE
    if token_id is not None and req.local:
        checkpoint = api.client._store.queries.checkpoint(view.id)
        token = checkpoint.tokens.get(token_id)
        if token is None:
            raise Problem(404, "NOT_FOUND", f"element instance {path['key']} is no longer active")
        scope = token.inner_scope or token.scope_id
    api.client.set_variables(view.id, req.variables, scope=scope)
    return None


def search_variables(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    """Every variable of every scope of the named instances, each value as JSON text
    (``isTruncated`` false: values are never cut)."""
    search = _model(schemas.Search, body)
    items: list[dict[str, Any]] = []
    for view in _instances_for(api, search):
        if not api.caller.sees_values(view.tenant):
            continue  # a viewer not granted values sees no variables (docs/console.md)
        instance_key = api.key("instance", view.id)
        checkpoint = api.client._store.queries.checkpoint(view.id)
        scope_elements = {
            sid: f"{view.id}:{sc.token_id}"
            for sid, sc in checkpoint.scopes.items()
            if sid != ROOT_SCOPE and sc.token_id is not None
        }
        element_keys = api.keys("element", list(scope_elements.values()))
        for sid, scope in checkpoint.scopes.items():
            scope_key = (
                instance_key if sid not in scope_elements else element_keys[scope_elements[sid]]
            )
            names = list(scope.variables)
            var_keys = api.keys("variable", [f"{view.id}:{sid}:{n}" for n in names])
            for name in names:
                items.append(
                    {
                        "value": json.dumps(scope.variables[name]),
                        "isTruncated": False,
                        "name": name,
                        "tenantId": view.tenant,
                        "variableKey": var_keys[f"{view.id}:{sid}:{name}"],
                        "scopeKey": scope_key,
                        "processInstanceKey": instance_key,
                        "rootProcessInstanceKey": instance_key,
                    }
                )
    fields = ("name", "scopeKey", "variableKey")
    return _page([i for i in items if _matches(i, search, fields)], search)


# -- decisions -----------------------------------------------------------------------


def _matched_rules(step: DecisionEvaluation) -> list[dict[str, Any]]:
    return [
        {
            "ruleId": rule.id,
            "ruleIndex": rule.index,
            "evaluatedOutputs": [
                {
                    "outputId": out.id,
                    "outputName": out.name,
                    "outputValue": json.dumps(out.value),
                    "ruleId": rule.id,
                    "ruleIndex": rule.index,
                }
                for out in rule.outputs
            ],
        }
        for rule in step.matched
    ]


def evaluate_decision_(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    """A deployed decision evaluated with the given variables, as a business rule task
    would (engine_core/dmn.py ``explain_decision``); nothing is written. ``output`` is
    the result as JSON text; ``evaluatedDecisions`` lists every decision evaluated, the
    required ones first, each with its table's inputs and the rules that made its
    result."""
    req = _model(schemas.EvaluateDecision, body)
    if req.decision_definition_key is not None:
        decision_id, _, v = api.resolve(
            "decision", req.decision_definition_key, "decision definition"
        ).rpartition(":")
        version: int | None = int(v)
    elif req.decision_definition_id:
        decision_id, version = req.decision_definition_id, None
    else:
        raise Problem(400, "INVALID_ARGUMENT", "give decisionDefinitionId or decisionDefinitionKey")
    with read_only(api.engine) as conn:
        found = deployed_decision(conn, decision_id, version)
        if found is None:
            raise Problem(404, "NOT_FOUND", f"no decision {decision_id!r} is deployed")
        versions = file_versions(conn, decision_id, found[0])
    version, decisions = found
    try:
        trace = explain_decision(decisions, decision_id, req.variables or {}, now=clock.now())
    except Exception as exc:  # a hit policy broken, an expression failed: the caller's input
        raise Problem(
            400, "INVALID_ARGUMENT", f"decision {decision_id!r} v{version}: {exc}"
        ) from exc
    key = api.key("decision", f"{decision_id}:{version}")
    name = decisions[decision_id].name or decision_id
    output = json.dumps(trace[-1].result)
    evaluation = api.key("decision_evaluation", uuid.uuid4().hex)
    names = {step.decision_id: f"{step.decision_id}:{versions[step.decision_id]}" for step in trace}
    keys = api.keys("decision", list(names.values()))
    evaluated = []
    for n, step in enumerate(trace, 1):
        decision = decisions[step.decision_id]
        evaluated.append(
            {
                "decisionDefinitionId": step.decision_id,
                "decisionDefinitionName": decision.name or step.decision_id,
                "decisionDefinitionVersion": versions[step.decision_id],
                "decisionDefinitionType": "DECISION_TABLE"
                if decision.table is not None
                else "LITERAL_EXPRESSION",
                "output": json.dumps(step.result),
                "tenantId": TENANT,
                "matchedRules": _matched_rules(step),
                "evaluatedInputs": [
                    {"inputId": i.id, "inputName": i.name, "inputValue": json.dumps(i.value)}
                    for i in step.inputs
                ],
                "decisionDefinitionKey": keys[names[step.decision_id]],
                # Camunda's shape: the evaluation's key and the decision's place in it
                "decisionEvaluationInstanceKey": f"{evaluation}-{n}",
            }
        )
    return {
        "decisionDefinitionId": decision_id,
        "decisionDefinitionKey": key,
        "decisionDefinitionName": name,
        "decisionDefinitionVersion": version,
        "decisionEvaluationKey": evaluation,
        "decisionInstanceKey": evaluation,
        "decisionRequirementsId": decision_id,
        "decisionRequirementsKey": key,
        "evaluatedDecisions": evaluated,
        "failedDecisionDefinitionId": None,
        "failureMessage": None,
        "output": output,
        "tenantId": TENANT,
    }


# -- incidents -----------------------------------------------------------------------


def _incident_state(view: IncidentView) -> str:
    return "RESOLVED" if IncidentState(view.state).closed else "ACTIVE"


def _incident(
    api: Api, view: IncidentView, process: tuple[str, int], tenant: str
) -> dict[str, Any]:
    instance_key = api.key("instance", view.instance_id)
    return {
        "processDefinitionId": process[0],
        "errorType": "JOB_NO_RETRIES" if view.job_type else "UNKNOWN",
        "errorMessage": view.cause,
        "elementId": view.node_id,
        "creationTime": _iso(view.first_at),
        "state": _incident_state(view),
        "tenantId": tenant,
        "incidentKey": api.key("incident", view.id),
        "processDefinitionKey": api.key("process", f"{process[0]}:{process[1]}"),
        "processInstanceKey": instance_key,
        "rootProcessInstanceKey": instance_key,
        "elementInstanceKey": api.key("element", f"{view.instance_id}:{view.token_id}"),
        "jobKey": None,
    }


def search_incidents(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    search = _model(schemas.Search, body)
    instance_key = _filter_key(search, "processInstanceKey")
    instance_id = None
    if instance_key is not None:
        instance_id = api_keys.dormant_id(api.engine, "instance", int(instance_key))
        if instance_id is None:
            return _page([], search)
    views = api.client.incidents(instance_id)
    tenants = {i: api.tenant_of(i) for i in {v.instance_id for v in views}}
    views = [v for v in views if api.caller.reads(tenants[v.instance_id])]
    processes = api_keys.instance_processes(api.engine, [v.instance_id for v in views])
    items = [
        _incident(api, v, processes.get(v.instance_id, ("", 0)), tenants[v.instance_id])
        for v in views
    ]
    for field in ("state", "tenantId"):
        wanted = search.filter.get(field)
        if isinstance(wanted, dict):
            wanted = wanted.get("$eq")
        if wanted is not None:
            items = [i for i in items if i[field] == wanted]
    return _page(items, search)


def get_incident(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    view = api.client.incident(api.resolve("incident", path["key"], "incident"))
    tenant = api.tenant_of(view.instance_id)
    api.caller.visible(tenant, f"no incident has key {path['key']}")
    process = api_keys.instance_processes(api.engine, [view.instance_id])
    return _incident(api, view, process.get(view.instance_id, ("", 0)), tenant)


def resolve_incident(api: Api, body: dict[str, Any], path: dict[str, str]) -> Any:
    incident_id = api.resolve("incident", path["key"], "incident")
    tenant = api.tenant_of(api.client.incident(incident_id).instance_id)
    api.caller.require(tenant, f"no incident has key {path['key']}")
    api.client.retry_incident(incident_id)
    return None


# -- the app -------------------------------------------------------------------------


def routes() -> list[BaseRoute]:
    """Every route served, below ``PREFIX`` (docs/camunda-api.md lists them, one table)."""
    table: list[tuple[str, str, Handler]] = [
        ("GET", "/topology", topology),
        ("GET", "/status", status),
        ("GET", "/license", license_),
        ("POST", "/process-instances", create_instance),
        ("POST", "/process-instances/search", search_instances),
        ("GET", "/process-instances/{key}", get_instance),
        ("POST", "/process-instances/{key}/cancellation", cancel_instance),
        ("POST", "/process-instances/{key}/modification", modify_instance),
        ("POST", "/process-instances/{key}/migration", migrate_instance),
        ("POST", "/jobs/activation", activate_jobs),
        ("POST", "/jobs/{key}/completion", complete_job),
        ("POST", "/jobs/{key}/failure", fail_job),
        ("POST", "/jobs/{key}/error", throw_job_error),
        ("PATCH", "/jobs/{key}", update_job),
        ("POST", "/messages/publication", publish_message),
        ("POST", "/messages/correlation", correlate_message),
        ("POST", "/signals/broadcast", broadcast_signal),
        ("POST", "/user-tasks/search", search_user_tasks),
        ("GET", "/user-tasks/{key}", get_user_task),
        ("POST", "/user-tasks/{key}/assignment", assign_user_task),
        ("DELETE", "/user-tasks/{key}/assignee", unassign_user_task),
        ("POST", "/user-tasks/{key}/completion", complete_user_task),
        ("GET", "/user-tasks/{key}/form", user_task_form),
        ("POST", "/element-instances/search", search_element_instances),
        ("GET", "/element-instances/{key}", get_element_instance),
        ("PUT", "/element-instances/{key}/variables", set_element_variables),
        ("POST", "/variables/search", search_variables),
        ("POST", "/decision-definitions/evaluation", evaluate_decision_),
        ("POST", "/incidents/search", search_incidents),
        ("GET", "/incidents/{key}", get_incident),
        ("POST", "/incidents/{key}/resolution", resolve_incident),
    ]
    out: list[BaseRoute] = [
        Route("/deployments", _endpoint(deploy, multipart=True), methods=["POST"])
    ]
    out += [Route(p, _endpoint(h), methods=[m]) for m, p, h in table]
    return out


async def _not_found(request: Request, exc: Exception) -> Response:
    status_code = getattr(exc, "status_code", 404)
    return _problem(
        status_code,
        "NOT_FOUND" if status_code == 404 else "INVALID_ARGUMENT",
        f"{request.method} {request.url.path} is not served by dormant (docs/camunda-api.md)",
        request.url.path,
    )


def v2_app(
    client: Client, config: ConsoleConfig, throttle: SignInThrottle | None = None
) -> Starlette:
    """The routes with their guard (auth.py), one app for both hosts: ``dormant api``
    mounts it at ``PREFIX``, and so does ``dormant console`` beside its pages, sharing
    the console's sign-in throttle."""
    app = Starlette(
        routes=routes(),
        middleware=[Middleware(ApiGuard, config=config, throttle=throttle or SignInThrottle())],
        exception_handlers={404: _not_found, 405: _not_found},
    )
    app.state.api = Api(client)
    return app


def create_app(
    client: Client | None = None,
    config: ConsoleConfig | None = None,
    throttle: SignInThrottle | None = None,
) -> Starlette:
    """The API as an ASGI app, on ``client`` (a new Client from the environment when
    None), authenticated as ``config`` says (the console's settings; None: no
    credentials, loopback only)."""
    config = config if config is not None else ConsoleConfig()
    config.check()
    throttle = throttle or SignInThrottle()
    v2 = v2_app(client if client is not None else Client(), config, throttle)
    return Starlette(
        routes=[Mount(PREFIX, app=v2), Mount(oauth.PATH, app=oauth.oauth_app(config, throttle))],
        exception_handlers={404: _not_found, 405: _not_found},
    )

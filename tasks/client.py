"""The producer's door: ``from dormant.tasks.client import Client``.

What the Client can check it checks *before* anything is written or sent, and raises
the named error (unknown process key, variables that are not a JSON object or exceed
the size and depth limits, a name, key or id too long for its column or holding a NUL,
a TTL out of range, an unknown task or incident, a closed incident: engine_core/inputs.py
is the one home of those checks, shared with the trigger tasks and the Store). Then the trigger is
made durable: written to the ``inbox`` table, and only then published as its Celery
task with the inbox id (which is also its trigger id). When a method returns, the
trigger survives a broker restart: the beat sweep re-publishes inbox rows that were
never processed. The trigger itself runs asynchronously on a worker.

Reads (``instance``, ``instances``, ``user_tasks``, ``incidents``, ``history``) go
straight to the Store's ``queries``.

The operator's operations on running instances (suspend, resume, set variables,
migrate, modify, bulk, batches, job types) are methods of the Client because
docs/operations.md documents them so (``client.suspend(id)``); they live in a part the
Client composes (``tasks/client_operations.py``), not a class it inherits, and each
method here hands its call on.
"""

from __future__ import annotations

import copy
import getpass
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, overload

from dormant.engine_core.checkpoint import ROOT_SCOPE, IncidentState, InstanceStatus
from dormant.engine_core.errors import (
    InvalidField,
    InvalidMessage,
    InvalidModel,
    InvalidOperation,
    InvalidVariables,
    TransitionDenied,
    UnknownDeployment,
    UnknownInstance,
    UnknownProcess,
    UnknownTask,
)
from dormant.engine_core.inputs import check_name, check_text, check_variables, variables_params
from dormant.engine_core.job_flow import FlowLimits
from dormant.engine_core.task_attributes import UPDATABLE, check_changes
from dormant.engine_core.tenants import check_tenant
from dormant.engine_core.triggers import (
    Cancel,
    IncidentDrop,
    IncidentResolve,
    IncidentRetry,
    Trigger,
)
from dormant.engine_core.views import (
    FactView,
    FailedTriggerView,
    IncidentView,
    InstanceView,
    UserTaskView,
)
from dormant.persistence import audit, clock, inbox, parked, unmatched
from dormant.persistence.batches import BatchItemView, BatchState, BatchView
from dormant.persistence.deployments import Deployment, DeploymentRecord
from dormant.persistence.failed_triggers import CHECKPOINT_INCIDENT
from dormant.persistence.job_flow import FlowRow
from dormant.persistence.parked import ParkedRow
from dormant.persistence.routing import check_message
from dormant.persistence.selection import Selector, Target
from dormant.persistence.settings import Settings
from dormant.persistence.store import Store
from dormant.persistence.unmatched import MessageReceipt
from dormant.tasks import wire
from dormant.tasks.client_operations import Operations
from dormant.tasks.priorities import message_priority
from dormant.tasks.transient import retry_database
from dormant.tasks.wire import Send

__all__ = ["ENV_ACTOR", "Client", "default_actor"]

# Who acts when the caller names nobody (docs/audit.md).
ENV_ACTOR = "DORMANT_ACTOR"


def default_actor() -> str:
    """``DORMANT_ACTOR``, else the operating system's user, else ``unknown``."""
    named = os.environ.get(ENV_ACTOR, "").strip()
    if named:
        return named
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry, no LOGNAME: a bare container
        return "unknown"


# How often a receipt looks for the message's outcome row while it waits.
_RECEIPT_POLL_SECONDS = 0.05


class Client:
    """Deploy processes, start instances, send messages and signals, operate incidents
    and running instances (``tasks/client_operations.py``)."""

    def __init__(
        self,
        database_url: str | None = None,
        broker_url: str | None = None,
        *,
        actor: str | None = None,
        source: str = "client",
        tenant: str | None = None,
    ) -> None:
        """``actor``: who this Client's operator actions are recorded as (the audit
        trail and the instance's history; default ``default_actor()``); ``source``:
        from where (``client``, ``cli``, ``console``, ``api``).

        ``tenant``: the tenant this Client deploys, starts, messages, signals and
        completes tasks for (docs/tenants.md); without one, the default tenant
        (``<default>``). A Client bound to a tenant also reads only that tenant's
        instances, tasks, incidents and deployments; an unbound one reads every
        tenant's (the operator's view), each list taking a ``tenant`` filter."""
        self.tenant = check_tenant(tenant)
        self._bound = tenant is not None
        self.settings = Settings.from_env(database_url=database_url, broker_url=broker_url)
        self._store = Store(settings=self.settings)
        self._known_keys: set[str] = set()
        self._limits = self.settings.limits
        self.actor = actor or default_actor()
        self.source = source
        self._operations = self._operations_for()

    def _operations_for(self) -> Operations:
        return Operations(
            self._store,
            self._send,
            self.instance,
            self._limits,
            self.settings.broker_url,
            self._command,
            self.actor,
        )

    def acting_as(self, actor: str, source: str) -> Client:
        """This Client (its Store and pools shared) acting for ``actor`` from ``source``:
        the console's one Client serves each signed-in user so."""
        other = copy.copy(self)
        other.actor, other.source = actor, source
        other._operations = other._operations_for()
        return other

    def for_tenant(self, tenant: str | None) -> Client:
        """This Client (its Store and pools shared) bound to ``tenant`` (None: the
        default tenant): the REST API's one Client acts for each request's
        ``tenantId`` so (docs/tenants.md)."""
        other = copy.copy(self)
        other.tenant, other._bound = check_tenant(tenant), True
        other._known_keys = set()
        other._operations = other._operations_for()
        return other

    def _command(
        self,
        action: str,
        *,
        target: str | None = None,
        instance_id: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """An operator action for the audit trail (persistence/audit.py): for an action
        done on the spot, handed to the write that does it (its ``done`` row commits
        with it); otherwise carried by its trigger (``wire.audited``), recorded
        ``accepted`` with its inbox row (``_send_many``) and its outcome by the
        worker."""
        cmd = audit.command(
            self.actor,
            self.source,
            action,
            target=target,
            instance_id=instance_id,
            params=params,
        )
        return cmd

    def audit_log(
        self,
        *,
        actor: str | None = None,
        instance_id: str | None = None,
        since: datetime | None = None,
        limit: int = 200,
        where: audit.AuditFilter | None = None,
    ) -> list[audit.AuditEntry]:
        """The audit trail, newest first (docs/audit.md)."""
        return audit.entries(
            self._store.engine,
            actor=actor,
            instance_id=instance_id,
            since=since,
            limit=limit,
            where=where,
        )

    def audit_export(self, where: audit.AuditFilter) -> Iterator[audit.AuditEntry]:
        """Every row ``where`` selects, oldest first, streamed (docs/audit.md, "Export")."""
        return audit.export(self._store.engine, where)

    # -- sending ---------------------------------------------------------------------

    def _send(self, message: Send) -> str:
        """Durable first (the inbox row), then published; returns the inbox id."""
        return self._send_many([message])[0]

    def _send_many(self, triggers: list[Send]) -> list[str]:
        """Durable first (every inbox row in one transaction), then all published on one
        pooled producer; returns the inbox ids. A crash between the two leaves rows the
        sweep publishes, so nothing returned here can be lost."""
        from dormant.tasks.app import pooled_producer, publish

        now = clock.now()
        accepted = [
            audit.outcome_row(kwargs["audit"], "accepted", now)
            for _, _, kwargs in triggers
            if kwargs.get("audit") is not None
        ]
        # An operator action's ``accepted`` row commits with its inbox row: neither
        # without the other (docs/audit.md).
        inbox_ids = retry_database(
            lambda: inbox.record_many(
                self._store.engine,
                triggers,
                also=(lambda conn: audit.record(conn, accepted)) if accepted else None,
            ),
            self._database_patience(),
            f"{triggers[0].task if triggers else 'trigger'} not sent",
            self.settings,
        )
        s = self.settings
        with pooled_producer(s.broker_url) as producer:
            for inbox_id, (task, routing_key, kwargs) in zip(inbox_ids, triggers, strict=True):
                # a start's instance priority (tasks/priorities.py; None when off)
                priority = (
                    message_priority(
                        s.broker_url, s.priority_levels, s.priority_variable, kwargs["variables"]
                    )
                    if task == wire.START and isinstance(kwargs.get("variables"), dict)
                    else None
                )
                publish(
                    task,
                    routing_key,
                    {**kwargs, "inbox_id": inbox_id},
                    producer=producer,
                    priority=priority,
                )
        return inbox_ids

    # -- processes -------------------------------------------------------------------

    def deploy(self, path_or_xml: str | bytes | Path, *more: str | bytes | Path) -> Deployment:
        """Deploy BPMN, DMN and Camunda Form (``.form``) files (paths) or documents (XML
        or form JSON text) as one deployment; returns ``Deployment(key, version,
        created, deployment_key, resources)``: the first resource's key and version (a
        process key, decision id or form id), the
        deployment's own key, and every resource deployed with it.

        Resources deployed together are what a call activity or business rule task
        with ``bindingType="deployment"`` binds to; ``deploy_all`` returns one
        ``Deployment`` per resource.
        """
        return self.deploy_all(path_or_xml, *more)[0]

    def deploy_all(
        self, path_or_xml: str | bytes | Path, *more: str | bytes | Path
    ) -> list[Deployment]:
        """Deploy every process and decision of the files as one deployment; one
        ``Deployment`` per resource, all with the same ``deployment_key``."""
        limit = self._store.settings.max_model_bytes
        given = (path_or_xml, *more)
        sources = [_read_source(p, limit) for p in given]
        names = [str(p) if isinstance(p, Path) or _is_path(p) else None for p in given]
        deployments = list(
            self._store.deployments.deploy_many(
                sources, clock.now(), names, tenant=self.tenant, audited=self._command("deploy")
            )
        )
        if not deployments:
            raise InvalidModel("the document defines no executable process")
        return deployments

    def deployments(self, limit: int = 100, *, tenant: str | None = None) -> list[DeploymentRecord]:
        """The newest deployments first: key, time, resources, tenant."""
        return self._store.deployments.records(limit, tenant=self._reads(tenant))

    def deployment(self, key: int) -> DeploymentRecord:
        """One deployment; ``UnknownDeployment`` when no deployment has that key."""
        found = self._store.deployments.record(key)
        if self._bound and found.tenant != self.tenant:
            raise UnknownDeployment(f"no deployment {key} for tenant {self.tenant!r}")
        return found

    def _reads(self, tenant: str | None) -> str | None:
        """The tenant a list is filtered on: a bound Client's own (another one asked
        for is refused), else the ``tenant`` asked for (None: every tenant)."""
        asked = None if tenant is None else check_tenant(tenant)
        if not self._bound:
            return asked
        if asked is not None and asked != self.tenant:
            raise InvalidField(
                f"this Client is bound to tenant {self.tenant!r} and reads no other "
                f"(asked for {asked!r})"
            )
        return self.tenant

    def start(
        self,
        key: str,
        variables: dict[str, Any] | None = None,
        business_key: str | None = None,
        *,
        version: int | None = None,
    ) -> str:
        """Enqueue the start of an instance of ``key`` (its latest version, or
        ``version``); returns its id at once."""
        message = self._start_message(key, variables, business_key)
        if version is not None:
            self._store.deployments.definition(key, version)  # UnknownProcess if none
            self._own_process(key)
            task, routing_key, kwargs = message
            message = Send(task, routing_key, {**kwargs, "version": version})
        self._send(message)
        return str(message.kwargs["instance_id"])

    def start_many(
        self,
        key: str,
        many_variables: list[dict[str, Any] | None],
        business_keys: list[str | None] | None = None,
    ) -> list[str]:
        """Enqueue many starts of ``key`` in one inbox transaction; returns their ids.

        Every start is checked before anything is written: one bad entry refuses the
        whole batch with the error of the first bad one (its index named)."""
        keys = business_keys if business_keys is not None else [None] * len(many_variables)
        if len(keys) != len(many_variables):
            raise InvalidOperation(
                f"start_many: {len(many_variables)} variable sets but {len(keys)} business keys"
            )
        batch = []
        for index, (variables, business_key) in enumerate(zip(many_variables, keys, strict=True)):
            try:
                batch.append(self._start_message(key, variables, business_key))
            except InvalidVariables as exc:
                raise InvalidVariables(f"start_many[{index}]: {exc}") from exc
        self._send_many(batch)
        return [str(message.kwargs["instance_id"]) for message in batch]

    def _start_message(
        self, key: str, variables: dict[str, Any] | None, business_key: str | None
    ) -> Send:
        if not isinstance(key, str) or not key:
            raise UnknownProcess(f"process key must be a non-empty string, got {key!r}")
        variables = check_variables(variables, "variables", self._limits)
        if business_key is not None:
            check_text(business_key, "business key", self._limits)
        if key not in self._known_keys:
            retry_database(
                lambda: self._definition(key),
                self._database_patience(),
                f"start of {key!r}",
                self.settings,
            )
            self._own_process(key)
            # A deployed key stays deployed (versions are never deleted) and keeps its
            # tenant: one lookup per key and Client, not one per start.
            self._known_keys.add(key)
        return wire.start(
            key, uuid.uuid4().hex, variables, business_key=business_key, tenant=self.tenant
        )

    def _own_process(self, key: str) -> None:
        """Refuse a process of another tenant, worded as one nobody deployed: a
        producer learns nothing of another tenant's processes (docs/tenants.md)."""
        if self._store.deployments.tenant(key) != self.tenant:
            raise UnknownProcess(
                f"no process {key!r} is deployed for tenant {self.tenant!r}; deploy it "
                "with a Client of that tenant"
            )

    def _database_patience(self) -> float:
        """How long a send waits out a locked or unreachable database before it says so
        (tasks/transient.py ``retry_database``): two whole statement timeouts, so a
        producer queued behind the workers' writes on SQLite gets its turn."""
        return 2 * self.settings.db_statement_timeout_seconds

    def _definition(self, key: str) -> Any:
        try:
            found = self._store.deployments.definition(key)
        except UnknownProcess:
            raise
        except LookupError:
            found = None
        if found is None:
            raise UnknownProcess(
                f"no deployed process has key {key!r}; deploy it with `dormant deploy FILE.bpmn`"
            )
        return found

    def report_job(self, instance_id: str, trigger: Any, trigger_id: str) -> None:
        """A job's outcome (``JobCompleted``, ``JobFailed``, ``JobErrorThrown``,
        ``JobHeartbeat``) reported by a worker outside Celery (the Camunda 8 REST API's
        job workers, tasks/api): durable in the inbox, then applied by a worker as
        ``dormant.apply_trigger``, exactly as a Celery job's deferred outcome."""
        self._send(wire.apply_trigger(instance_id, trigger, trigger_id))

    # -- messages and signals --------------------------------------------------------

    @overload
    def send_message(
        self,
        name: str,
        correlation_key: Any = None,
        variables: dict[str, Any] | None = None,
        message_id: str | None = None,
        ttl: float | None = None,
        *,
        receipt: None = None,
    ) -> str: ...

    @overload
    def send_message(
        self,
        name: str,
        correlation_key: Any = None,
        variables: dict[str, Any] | None = None,
        message_id: str | None = None,
        ttl: float | None = None,
        *,
        receipt: float,
    ) -> MessageReceipt: ...

    def send_message(
        self,
        name: str,
        correlation_key: Any = None,
        variables: dict[str, Any] | None = None,
        message_id: str | None = None,
        ttl: float | None = None,
        *,
        receipt: float | None = None,
    ) -> str | MessageReceipt:
        """Publish a message; returns its id (generated when None, so a resend is
        idempotent). With ``receipt`` (seconds) the call waits, at most that long, for
        what became of it and returns a ``MessageReceipt``: correlated to N instances,
        buffered (TTL) or dropped — ``pending`` if not settled in time (docs/messages.md)."""
        checked = check_message(
            name, correlation_key, variables, message_id, ttl, limits=self._limits
        )
        message = wire.message(name, *checked, self.tenant)
        self._send(message)
        sent_id = str(message.kwargs["message_id"])
        if receipt is None:
            return sent_id
        return self.message_receipt(sent_id, receipt)

    def message_receipt(self, message_id: str, wait: float = 0.0) -> MessageReceipt:
        """What became of message ``message_id``, waiting at most ``wait`` seconds for
        its outcome row (the ``messages`` row the Router writes last,
        persistence/unmatched.py); ``pending`` when it is not there by then."""
        if not wait >= 0:
            raise InvalidField("a receipt's wait is a number of seconds, 0 or more")
        deadline = time.monotonic() + wait
        while True:
            found = unmatched.read_receipt(self._store.engine, message_id, self.tenant)
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                return unmatched.MessageReceipt(message_id, unmatched.PENDING)
            time.sleep(_RECEIPT_POLL_SECONDS)

    def unmatched_messages(
        self, *, name: str | None = None, limit: int = 100, tenant: str | None = None
    ) -> list[unmatched.UnmatchedMessage]:
        """Recent messages that went nowhere (no holder, no start, no TTL), newest
        first: a bounded, expiring record (docs/limits.md, "Unmatched messages")."""
        if limit < 1:
            raise InvalidField("limit must be 1 or more")
        return unmatched.unmatched(
            self._store.engine,
            clock.now(),
            self.settings.unmatched_messages_retention_seconds,
            name=name,
            tenant=self._reads(tenant),
            limit=min(limit, self.settings.unmatched_messages_kept),
        )

    def send_messages(self, messages: list[dict[str, Any]]) -> list[str]:
        """Publish many messages in one inbox transaction; returns their ids.

        Each entry takes ``send_message``'s keyword arguments (``name``, and optionally
        ``correlation_key``, ``variables``, ``message_id``, ``ttl``). Every entry is
        checked before anything is written: one bad entry refuses the whole batch."""
        batch = []
        for index, entry in enumerate(messages):
            if not isinstance(entry, dict) or "name" not in entry:
                raise InvalidMessage(f"send_messages[{index}]: an entry needs at least a name")
            unknown = set(entry) - {"name", "correlation_key", "variables", "message_id", "ttl"}
            if unknown:
                raise InvalidMessage(
                    f"send_messages[{index}]: unknown field(s) {', '.join(sorted(unknown))}"
                )
            try:
                checked = check_message(**entry, limits=self._limits)
                batch.append(wire.message(entry["name"], *checked, self.tenant))
            except (InvalidField, InvalidVariables) as exc:
                raise type(exc)(f"send_messages[{index}]: {exc}") from exc
        self._send_many(batch)
        return [str(message.kwargs["message_id"]) for message in batch]

    def signal(self, name: str, variables: dict[str, Any] | None = None) -> str:
        """Broadcast a signal to every instance of this Client's tenant waiting for it
        (and its processes' signal starts); returns the signal id."""
        check_name(name, "signal name", self._limits)
        variables = check_variables(variables, f"signal {name!r} variables", self._limits)
        signal_id = uuid.uuid4().hex
        self._send(wire.signal(name, variables, signal_id, self.tenant))
        return signal_id

    # -- user tasks ------------------------------------------------------------------

    def user_tasks(
        self,
        instance_id: str | None = None,
        *,
        assignee: str | None = None,
        candidate_user: str | None = None,
        candidate_group: str | None = None,
        due_before: datetime | None = None,
        tenant: str | None = None,
    ) -> list[UserTaskView]:
        """Open user tasks; each filter given must hold (``due_before``: a due date
        strictly earlier, timezone-aware; ``tenant``: of that tenant)."""
        if due_before is not None and due_before.utcoffset() is None:
            raise InvalidField("due_before needs a time zone (e.g. 2026-10-02T08:00:00+00:00)")
        return list(
            self._store.queries.user_tasks(
                instance_id,
                assignee=assignee,
                candidate_user=candidate_user,
                candidate_group=candidate_group,
                due_before=due_before,
                tenant=self._reads(tenant),
            )
        )

    def user_task(self, task_id: str) -> UserTaskView:
        """One open user task (``UnknownTask`` when none has this id, or when it is
        another tenant's and this Client is bound to one)."""
        view = self._store.queries.task_view(task_id)
        if self._bound and view.tenant != self.tenant:
            raise UnknownTask(f"no open user task has id {task_id!r} for tenant {self.tenant!r}")
        return view

    def _transition(self, task_id: str, what: str) -> UserTaskView:
        """The task, if it can take a transition now: refused while the listeners of
        another one run (``InvalidOperation``), as the engine would refuse it."""
        view = self.user_task(task_id)
        if view.state != "created":
            raise InvalidOperation(
                f"user task {task_id} is {view.state} (its task listeners run); "
                f"{what} it once they are done"
            )
        return view

    def complete_task(
        self,
        task_id: str,
        variables: dict[str, Any] | None = None,
        *,
        wait: float | None = None,
    ) -> bool:
        """Complete the task. Its complete listeners run first and may deny it: the task
        then stays open and its ``denied_reason`` says why. With ``wait`` (seconds) the
        call waits for the outcome: it returns once the task completed and raises
        ``TransitionDenied`` (with the listener's reason) when a listener denied it, or
        ``InvalidOperation`` when the engine refused the completion. True once known
        completed; False without ``wait``, or past it with the completion under way."""
        variables = check_variables(variables, "task variables", self._limits)
        view = self._transition(task_id, "complete")
        if view.tenant != self.tenant:  # a producer completes its own tenant's tasks only
            raise UnknownTask(f"no open user task has id {task_id!r} for tenant {self.tenant!r}")
        seen = len(self._store.queries.history(view.instance_id)) if wait is not None else 0
        self._send(wire.complete_task(task_id, variables, self.tenant))
        return self._completion(view, seen, wait) if wait is not None else False

    def _completion(self, view: UserTaskView, seen: int, wait: float) -> bool:
        """The outcome of a completion, read from the facts recorded after ``seen``."""
        wait_id = view.id.rsplit(".", 1)[1]
        deadline = time.monotonic() + wait
        while True:
            for fact in self._store.queries.history(view.instance_id)[seen:]:
                d = fact.details
                if fact.kind == "TaskCompleted" and d.get("task") == view.id:
                    return True
                if fact.kind == "TaskTransitionDenied" and d.get("task") == view.id:
                    if d.get("transition") == "complete":
                        reason = self._denial(view.id)
                        raise TransitionDenied(
                            f"user task {view.id} ({view.name or view.node_id}): its "
                            f"completion was denied by a task listener: {reason}"
                        )
                if fact.kind == "Stale" and d.get("wait") == wait_id:
                    if d.get("trigger") == "task_completed":
                        raise InvalidOperation(f"user task {view.id}: {d.get('reason')}")
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def _denial(self, task_id: str) -> str:
        try:
            return self._store.queries.task_view(task_id).denied_reason or "no reason given"
        except UnknownTask:
            return "no reason given (the task is gone since)"

    def assign_task(self, task_id: str, assignee: str) -> None:
        """Assign the task to ``assignee``, whoever holds it now."""
        self._assign(task_id, assignee, claim=False)

    def claim_task(self, task_id: str, user: str) -> None:
        """Assign the task to ``user`` unless someone else holds it (``InvalidOperation``)."""
        view = self._transition(task_id, "claim")
        if view.assignee is not None and view.assignee != user:
            raise InvalidOperation(
                f"user task {task_id} is assigned to {view.assignee!r}; it can be claimed "
                "once unclaimed (`dormant tasks unclaim`), or assigned by `tasks assign`"
            )
        self._assign(task_id, user, claim=True)

    def unassign_task(self, task_id: str) -> None:
        self._transition(task_id, "unassign")
        self._send(wire.assign_task(task_id, None, claim=False))

    def _assign(self, task_id: str, assignee: str, *, claim: bool) -> None:
        who = check_changes({"assignee": assignee})["assignee"]
        if who is None:
            raise InvalidField("assignee must be a user name, not null; unassign instead")
        self._transition(task_id, "claim" if claim else "assign")
        self._send(wire.assign_task(task_id, who, claim=claim))

    def update_task(self, task_id: str, **changes: Any) -> None:
        """Change the task's ``candidateUsers``, ``candidateGroups``, ``dueDate``,
        ``followUpDate`` or ``priority`` (Camunda's names; dates as ISO 8601 text or
        timezone-aware datetimes). Its update listeners run first."""
        if not changes:
            raise InvalidField(f"nothing to update; give one of: {', '.join(UPDATABLE)}")
        payload = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in changes.items()}
        for key in payload:
            if key not in UPDATABLE:
                raise InvalidField(
                    f"user task attribute {key!r} cannot be updated; one of: {', '.join(UPDATABLE)}"
                )
        check_changes(payload)
        payload = check_variables(payload, "task changes", self._limits)
        self._transition(task_id, "update")
        self._send(wire.update_task(task_id, payload))

    # -- instances -------------------------------------------------------------------

    def instance(self, instance_id: str) -> InstanceView:
        found: InstanceView | None = self._store.queries.instance(instance_id)
        if found is not None and self._bound and found.tenant != self.tenant:
            found = None  # another tenant's: unknown to a Client bound to this one
        if found is None:
            raise UnknownInstance(
                f"no instance {instance_id!r}; list them with `dormant instances list`"
            )
        return found

    def instances(
        self,
        status: str | None = None,
        key: str | None = None,
        limit: int = 1000,
        *,
        tenant: str | None = None,
    ) -> list[InstanceView]:
        return list(self._store.queries.instances(status, key, limit, tenant=self._reads(tenant)))

    def cancel(self, instance_id: str) -> None:
        view = self.instance(instance_id)
        if InstanceStatus(view.status).ended:
            raise InvalidOperation(
                f"instance {instance_id} ({view.key} v{view.version}) is already {view.status}"
            )
        self._store.rehearse(instance_id, Cancel(), clock.now())
        cmd = self._command("cancel", target=instance_id, instance_id=instance_id)
        self._send(wire.audited(wire.cancel(instance_id), cmd))

    def history(self, instance_id: str) -> list[FactView]:
        self.instance(instance_id)
        return list(self._store.queries.history(instance_id))

    # -- operations on running instances (docs/operations.md) ------------------------

    def suspend(self, instance_id: str) -> None:
        """Hold the instance's triggers (and timers) until ``resume``."""
        self._operations.suspend(instance_id)

    def resume(self, instance_id: str) -> None:
        """Apply the held triggers in arrival order; due timers fire once."""
        self._operations.resume(instance_id)

    def set_variables(
        self,
        instance_id: str,
        variables: Mapping[str, Any] | None = None,
        unset: Iterable[str] = (),
        *,
        scope: str = ROOT_SCOPE,
        retry_incidents: bool = False,
    ) -> None:
        """Set or remove variables in ``scope`` (a scope id or a sub-process node id),
        validated as a start's are; ``retry_incidents`` retries the open incidents after."""
        checked = variables_params(variables, unset, scope, retry_incidents, self._limits)
        self._operations.set_variables(instance_id, checked)

    def migration_problems(
        self, instance_id: str, version: int, mapping: Mapping[str, str] | None = None
    ) -> list[str]:
        """Why the instance cannot move to ``version`` (empty: the plan fits). Read-only."""
        return self._operations.migration_problems(instance_id, version, mapping)

    def migrate(
        self, instance_id: str, version: int, mapping: Mapping[str, str] | None = None
    ) -> None:
        """Move the instance to ``version``; the plan is checked first (and again under
        the instance lock), and refused with every reason."""
        self._operations.migrate(instance_id, version, mapping)

    def modify(
        self, instance_id: str, cancel_nodes: Iterable[str] = (), start_before: Iterable[str] = ()
    ) -> None:
        """Cancel the tokens at ``cancel_nodes`` and start a token before each of
        ``start_before``; refused when it would leave the instance inconsistent."""
        self._operations.modify(instance_id, cancel_nodes, start_before)

    def pause_job_type(self, job_type: str) -> None:
        """Stop sending jobs of ``job_type``; they are held until ``resume_job_type``."""
        self._operations.pause_job_type(job_type)

    def resume_job_type(self, job_type: str) -> int:
        """Send the held jobs of ``job_type`` again; returns how many were held."""
        return self._operations.resume_job_type(job_type)

    def paused_job_types(self) -> dict[str, int]:
        """Paused job types and how many jobs each holds."""
        return self._operations.paused_job_types()

    def job_types(self) -> list[FlowRow]:
        """Flow control, per limited job type and per key with jobs out, waiting or
        paused: running, waiting, limit, rate, paused until (docs/flow-control.md)."""
        return self._operations.job_types()

    def set_job_type_limits(self, job_type: str, **changes: Any) -> FlowLimits:
        """Change ``job_type``'s limits at run time (``concurrency``, ``key``,
        ``key_concurrency``, ``rate``, ``key_rate``, ``rate_period_seconds``; None removes
        one); no change given: back to ``DORMANT_JOB_TYPES``. Audited. Workers see it
        within a second; jobs waiting under a raised limit go with beat's next sweep."""
        return self._operations.set_job_type_limits(job_type, changes)

    def select(self, operation: str, selector: Selector) -> list[Target]:
        """What a bulk operation would act on (a dry run)."""
        return self._operations.select(operation, self._scoped(selector))

    def bulk(
        self, operation: str, selector: Selector, params: Mapping[str, Any] | None = None
    ) -> BatchView:
        """Write a batch for ``operation`` (``incident_retry|resolve|drop``, ``cancel``,
        ``suspend``, ``resume``, ``migrate``, ``set_variables``) and start it."""
        return self._operations.bulk(operation, self._scoped(selector), params)

    def _scoped(self, selector: Selector) -> Selector:
        """A batch's selector within this Client's tenant when it is bound to one: a
        batch then acts on nothing of another tenant (docs/tenants.md)."""
        tenant = self._reads(selector.tenant)
        if tenant == selector.tenant:
            return selector
        return selector.model_copy(update={"tenant": tenant})

    def batches(self, limit: int = 100, *, tenant: str | None = None) -> list[BatchView]:
        """Batches, newest first; a bound Client's tenant's only (a batch over every
        tenant names none in its selector, and only an unbound Client lists it)."""
        views = self._operations.batches(limit)
        wanted = self._reads(tenant)
        return views if wanted is None else [v for v in views if v.selector.get("tenant") == wanted]

    def batch(self, batch_id: str) -> BatchView:
        return self._operations.batch(batch_id)

    def batch_items(self, batch_id: str) -> list[BatchItemView]:
        return self._operations.batch_items(batch_id)

    def wait_batch(
        self,
        batch_id: str,
        timeout: float | None = None,
        progress: Callable[[BatchView], None] | None = None,
        poll: float = 0.5,
    ) -> BatchView:
        """Poll until the batch completes (or ``timeout``), calling ``progress`` each time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            view = self.batch(batch_id)
            if progress is not None:
                progress(view)
            if view.state == BatchState.COMPLETED or (
                deadline is not None and time.monotonic() > deadline
            ):
                return view
            time.sleep(poll)

    # -- incidents -------------------------------------------------------------------

    def incidents(
        self,
        instance_id: str | None = None,
        state: str | None = None,
        *,
        key: str | None = None,
        node_id: str | None = None,
        tenant: str | None = None,
    ) -> list[IncidentView]:
        """Incidents, open and closed, oldest last failure first; every filter is optional."""
        return list(
            self._store.queries.incidents(
                instance_id, state, key=key, node_id=node_id, tenant=self._reads(tenant)
            )
        )

    def incident(self, incident_id: str) -> IncidentView:
        found = self._store.queries.incident(incident_id)
        if self._bound:
            self.instance(found.instance_id)  # UnknownInstance: another tenant's
        return found

    def _operate(self, incident_id: str, op: str) -> None:
        incident = self.incident(incident_id)
        if incident.node_id == CHECKPOINT_INCIDENT:
            raise InvalidOperation(
                f"incident {incident_id!r} is a checkpoint this dormant cannot read "
                f"({incident.cause_class}): repair the row or upgrade dormant, then "
                f"`dormant triggers retry` its failed triggers (`dormant triggers list "
                f"--failed --instance {incident.instance_id}`)"
            )
        if IncidentState(incident.state).closed:
            open_ids = [
                i.id
                for i in self._store.queries.incidents(incident.instance_id, None)
                if not IncidentState(i.state).closed
            ]
            raise InvalidOperation(
                f"cannot {op} incident {incident_id!r} of instance {incident.instance_id}: it is "
                f"{incident.state}; open incidents there: {', '.join(open_ids) or 'none'}"
            )
        trigger: Trigger
        if op == "retry":
            trigger = IncidentRetry(incident_id=incident_id)
        elif op == "resolve":
            trigger = IncidentResolve(incident_id=incident_id)
        else:
            trigger = IncidentDrop(incident_id=incident_id)
        self._store.rehearse(incident.instance_id, trigger, clock.now())
        cmd = self._command(f"incident_{op}", target=incident_id, instance_id=incident.instance_id)
        self._send(wire.audited(wire.incident(op, incident_id), cmd))

    def retry_incident(self, incident_id: str) -> None:
        self._operate(incident_id, "retry")

    def resolve_incident(self, incident_id: str) -> None:
        self._operate(incident_id, "resolve")

    def drop_incident(self, incident_id: str) -> None:
        self._operate(incident_id, "drop")

    # -- failed triggers -------------------------------------------------------------

    def failed_triggers(
        self, instance_id: str | None = None, *, tenant: str | None = None
    ) -> list[FailedTriggerView]:
        """Triggers that could not be applied, kept for an operator (docs/limits.md);
        a bound Client's tenant's only, or ``tenant``'s."""
        return list(self._store.failed.failed_triggers(instance_id, tenant=self._reads(tenant)))

    def queued_starts(
        self, limit: int = 100, *, key: str | None = None, tenant: str | None = None
    ) -> list[inbox.QueuedStart]:
        """Starts this Client's kind wrote that no worker has applied yet, newest first
        (they have no checkpoint, so no instance list shows them); a bound Client's
        tenant's only, or ``tenant``'s."""
        return inbox.queued_starts(
            self._store.engine, wire.START, limit, key, tenant=self._reads(tenant)
        )

    def retry_trigger(self, failed_id: str) -> None:
        """Send a failed trigger again: back into the inbox, then published (its
        trigger id unchanged, so a retry of one that did apply meanwhile is a duplicate)."""
        from dormant.tasks.app import app, broker_transport
        from dormant.tasks.failed import resend

        owner = self._store.failed.failed_trigger(failed_id).instance_id
        url = self.settings.broker_url
        cmd = self._command("trigger_retry", target=failed_id, instance_id=owner)
        with app.connection_for_write(url, transport=broker_transport(url)) as conn:
            resend(self._store, failed_id, connection=conn, audited=cmd)

    def drop_trigger(self, failed_id: str) -> FailedTriggerView:
        """Delete a failed trigger for good (its instance's history records it)."""
        cmd = self._command("trigger_drop", target=failed_id)
        return self._store.failed.drop_failed(failed_id, clock.now(), cmd)

    # -- parked sweep rows (persistence/parked.py) -------------------------------------

    def parked_rows(self) -> list[ParkedRow]:
        """Inbox and outbox rows a sweep could not process, parked with their error."""
        return parked.parked_rows(self._store.engine)

    def retry_parked(self, ref: str) -> None:
        """Unpark ``ref`` (``inbox:<id>`` / ``outbox:<id>``): the next sweep sends it.
        Audited like every operator action (docs/audit.md)."""
        parked.retry(self._store.engine, ref, self._command("parked_retry", target=ref))

    def drop_parked(self, ref: str) -> None:
        """Delete parked row ``ref`` for good: what it held is never sent. Audited."""
        parked.drop(self._store.engine, ref, self._command("parked_drop", target=ref))


def _is_path(path_or_xml: str | bytes | Path) -> bool:
    """A path, not a document: text that opens neither XML (``<``) nor a form's JSON
    (``{``)."""
    return isinstance(path_or_xml, str) and not path_or_xml.lstrip("\ufeff \t\r\n").startswith(
        ("<", "{")
    )


def _read_source(path_or_xml: str | bytes | Path, max_bytes: int) -> str | bytes:
    """The model document, refused before it is read whole when it is over
    ``max_bytes`` (``DORMANT_MAX_MODEL_BYTES``): at most one byte more is ever read, so
    ``/dev/zero`` or a huge file costs nothing."""
    if isinstance(path_or_xml, bytes) or (
        isinstance(path_or_xml, str) and not _is_path(path_or_xml)
    ):
        size = len(path_or_xml) if isinstance(path_or_xml, bytes) else len(path_or_xml.encode())
        if size > max_bytes:
            raise _too_large("the model document", max_bytes)
        return path_or_xml
    path = Path(path_or_xml)
    try:
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise InvalidModel(
            f"cannot read BPMN/DMN/form file {str(path)!r}: {exc.strerror or exc}"
        ) from exc
    if len(data) > max_bytes:
        raise _too_large(f"BPMN/DMN file {str(path)!r}", max_bytes)
    return data


def _too_large(what: str, max_bytes: int) -> InvalidModel:
    return InvalidModel(
        f"{what} is larger than DORMANT_MAX_MODEL_BYTES={max_bytes} bytes; "
        "raise the setting if the model is really that big"
    )

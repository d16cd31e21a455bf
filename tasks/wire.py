"""The wire: every message dormant sends on the broker, spelled in one place.

A trigger travels as a Celery task: a task name (``dormant.*``), a routing key on the
``dormant`` topic exchange (``trigger.*``, ``message.<name>``, ``signal.<name>``; the
queues' bindings are ``tasks/app.py``'s ``BINDING_KEYS``) and keyword arguments, the
body. This module owns all three: the names, the keys, and each body's shape (one
builder per trigger), so the Client, the trigger tasks, the outbox relay, job results,
the inbox sweep and a failed trigger's retry send the same thing for the same fact;
and the grammar of the trigger ids the shell makes (an outbox row's, a job result's),
which is what lets a redelivered trigger be recognised as a duplicate.

These are a contract with every worker and every row already written: an inbox row or
a failed trigger stores the task name and routing key it will be sent with, and a
worker of an earlier release consumes what a newer producer sends. So a name or key
here never changes; a new trigger adds its own.

``persistence/`` names no task: what it keeps for a later send is a neutral fact (a
delivery to an instance, or a start: ``persistence/routing.py``), and ``redelivery``
turns it into its message here.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

from dormant.engine_core.tenants import DEFAULT_TENANT
from dormant.engine_core.triggers import Trigger
from dormant.persistence.routing import Undelivered, UndeliveredStart

__all__ = [
    "APPLY_TRIGGER",
    "ASSIGN_TASK",
    "BATCHES_SWEEP",
    "BATCH_RUN",
    "BULK",
    "CANCEL",
    "COMPLETE_TASK",
    "DELIVERY_HEADER",
    "FIRE_DEADLINE",
    "FIRE_DEADLINES",
    "FLOW_SWEEP",
    "HIDDEN",
    "INCIDENT_OPS",
    "INCIDENT_RAISED",
    "JOBS_PAUSE",
    "JOBS_RESUME",
    "MANAGEMENT",
    "MESSAGE",
    "MIGRATE",
    "MODIFY",
    "MOVABLE",
    "PROCESSED_SWEEP",
    "RELAY_OUTBOX",
    "RESUME",
    "SCAN_DEADLINES",
    "SET_VARIABLES",
    "SIGNAL",
    "START",
    "SUSPEND",
    "TASK_NAMES",
    "TRIGGERS",
    "TRIGGERS_DROP",
    "TRIGGERS_RETRY",
    "UPDATE_TASK",
    "Send",
    "apply_trigger",
    "assign_task",
    "batch_run",
    "cancel",
    "complete_task",
    "dotted_key",
    "incident",
    "incident_raised",
    "job_heartbeat_id",
    "job_result_id",
    "job_routing_key",
    "message",
    "migrate",
    "modify",
    "outbox_trigger_id",
    "redelivery",
    "resume",
    "set_variables",
    "shown_kwargs",
    "signal",
    "start",
    "suspend",
    "takes_trigger_id",
    "update_task",
]


class Send(NamedTuple):
    """One message: the task to run, its routing key, its keyword arguments."""

    task: str
    routing_key: str
    kwargs: dict[str, Any]


# -- the trigger tasks: each applies one trigger to one instance (or routes one) --------
START = "dormant.start"
MESSAGE = "dormant.message"
SIGNAL = "dormant.signal"
COMPLETE_TASK = "dormant.complete_task"
ASSIGN_TASK = "dormant.assign_task"
UPDATE_TASK = "dormant.update_task"
CANCEL = "dormant.cancel"
SUSPEND = "dormant.suspend"
RESUME = "dormant.resume"
SET_VARIABLES = "dormant.set_variables"
MIGRATE = "dormant.migrate"
MODIFY = "dormant.modify"
APPLY_TRIGGER = "dormant.apply_trigger"
FIRE_DEADLINE = "dormant.fire_deadline"
FIRE_DEADLINES = "dormant.fire_deadlines"
BATCH_RUN = "dormant.batch.run"
# A no-op whose result names the incidents a job's final failure raised, so Flower's
# search finds them (the job task itself shows only its exception; tasks/jobs.py).
INCIDENT_RAISED = "dormant.incident.raised"
# operator action on an incident -> its task
INCIDENT_OPS: dict[str, str] = {
    "retry": "dormant.incident.retry",
    "resolve": "dormant.incident.resolve",
    "drop": "dormant.incident.drop",
}
TRIGGERS: frozenset[str] = frozenset(
    {
        START,
        MESSAGE,
        SIGNAL,
        COMPLETE_TASK,
        ASSIGN_TASK,
        UPDATE_TASK,
        CANCEL,
        SUSPEND,
        RESUME,
        SET_VARIABLES,
        MIGRATE,
        MODIFY,
        APPLY_TRIGGER,
        FIRE_DEADLINE,
        FIRE_DEADLINES,
        BATCH_RUN,
        *INCIDENT_OPS.values(),
    }
)
# -- the engine's housekeeping, sent by beat or by an operator's command ----------------
SCAN_DEADLINES = "dormant.scan_deadlines"
RELAY_OUTBOX = "dormant.relay_outbox"
BATCHES_SWEEP = "dormant.batches.sweep"
PROCESSED_SWEEP = "dormant.processed.sweep"
BULK = "dormant.bulk"
JOBS_PAUSE = "dormant.jobs.pause"
JOBS_RESUME = "dormant.jobs.resume"
FLOW_SWEEP = "dormant.jobs.flow_sweep"
# The trigger tasks whose shell is ``triggers._run``: a main-lane worker gives them its
# own time limits and moves them to the quarantine lane (tasks/lanes.py). A batch of
# fires and a bulk batch are many triggers' work in one task: never moved.
MOVABLE: frozenset[str] = TRIGGERS - {FIRE_DEADLINES, BATCH_RUN}
TRIGGERS_RETRY = "dormant.triggers.retry"
TRIGGERS_DROP = "dormant.triggers.drop"
MANAGEMENT: frozenset[str] = frozenset(
    {
        SCAN_DEADLINES,
        RELAY_OUTBOX,
        BATCHES_SWEEP,
        PROCESSED_SWEEP,
        BULK,
        JOBS_PAUSE,
        JOBS_RESUME,
        FLOW_SWEEP,
        TRIGGERS_RETRY,
        TRIGGERS_DROP,
        INCIDENT_RAISED,
    }
)
# The message header the inbox sweep names a re-sent trigger's delivery number in
# (persistence/deliveries.py): the worker counts it without reading the database.
DELIVERY_HEADER = "dormant_delivery"

# Every task dormant registers: a model's job type may take none of them
# (engine_core/job_types.py reserves the ``dormant.`` prefix).
TASK_NAMES: frozenset[str] = TRIGGERS | MANAGEMENT


# The keyword arguments of dormant's own tasks that name things (ids, names, versions)
# rather than carry a process's data: Flower shows these as they are.
_NAMING = frozenset(
    {
        "instance_id",
        "incident_id",
        "summary",
        "task_id",
        "batch_id",
        "trigger_id",
        "signal_id",
        "message_id",
        "name",
        "key",
        "version",
        "ttl",
        "claim",
        "cancel_nodes",
        "start_before",
        "mapping",
        "inbox_id",
        "scope",
        "retry_incidents",
        "unset",
        "tenant",
    }
)
HIDDEN = "…"


def shown_kwargs(task: str, kwargs: dict[str, Any]) -> str:
    """The keyword arguments as Flower and the task events show them (``kwargsrepr``).

    Values a process carries (variables, a job's inputs, a correlation key, a trigger's
    body) are replaced by ``…``, as the console hides them from anyone not signed in
    (docs/console.md): Flower has its own sign-in, and its task list outlives the
    instance. A job's keyword arguments are all the job's variables; a dormant task's
    names (ids, message and signal names, versions) stay readable, so an operator can
    still find an instance's tasks in Flower."""
    if not task.startswith("dormant."):
        return repr({str(k): HIDDEN for k in kwargs})
    shown: dict[str, Any] = {}
    for k, v in kwargs.items():
        if k in _NAMING:
            shown[k] = v
        elif isinstance(v, dict):
            shown[k] = {str(name): HIDDEN for name in v}
        else:
            shown[k] = HIDDEN
    return repr(shown)


def takes_trigger_id(task: str) -> bool:
    """Whether ``task`` accepts a ``trigger_id`` argument: a fire carries its claim
    instead (the deadline row and claim token identify it)."""
    return task not in (FIRE_DEADLINE, FIRE_DEADLINES)


def _with_id(kwargs: dict[str, Any], trigger_id: str | None) -> dict[str, Any]:
    return kwargs if trigger_id is None else {**kwargs, "trigger_id": trigger_id}


def _with_tenant(kwargs: dict[str, Any], tenant: str | None) -> dict[str, Any]:
    """A trigger's ``tenant`` keyword (docs/tenants.md): left out for the default
    tenant, so a body is what it was before tenants, and a plain Celery producer that
    never names one is the default tenant's."""
    if tenant is None or tenant == DEFAULT_TENANT:
        return kwargs
    return {**kwargs, "tenant": tenant}


# -- the bodies ------------------------------------------------------------------------


def start(
    key: str,
    instance_id: str,
    variables: dict[str, Any],
    *,
    trigger_id: str | None = None,
    **start_options: Any,
) -> Send:
    """Start ``instance_id`` of process ``key``; ``start_options`` are ``dormant.start``'s
    keyword arguments (``business_key``, ``version``, ``start_node_id``, ``start_key``,
    ``parent``, ``version_tag``, ``tenant``)."""
    tenant = start_options.pop("tenant", None)
    body = {"key": key, "instance_id": instance_id, "variables": variables, **start_options}
    return Send(START, "trigger.start", _with_tenant(_with_id(body, trigger_id), tenant))


def message(
    name: str,
    correlation_key: str | None,
    variables: dict[str, Any],
    message_id: str,
    ttl: float | None,
    tenant: str | None = None,
) -> Send:
    """A message, on ``message.<name>`` so each name can have a queue of its own; the
    fields after the name as ``persistence/routing.py``'s ``check_message`` returns them,
    and the producer's tenant."""
    body = {
        "name": name,
        "correlation_key": correlation_key,
        "variables": variables,
        "message_id": message_id,
        "ttl": ttl,
    }
    return Send(MESSAGE, f"message.{name}", _with_tenant(body, tenant))


def signal(name: str, variables: dict[str, Any], signal_id: str, tenant: str | None = None) -> Send:
    """A signal broadcast within ``tenant``, on ``signal.<name>``; its id is its
    trigger id's prefix."""
    body = {"name": name, "variables": variables, "signal_id": signal_id}
    return Send(SIGNAL, f"signal.{name}", _with_tenant(body, tenant))


def complete_task(task_id: str, variables: dict[str, Any], tenant: str | None = None) -> Send:
    """Complete a user task; refused by the worker when the task is not ``tenant``'s."""
    body = {"task_id": task_id, "variables": variables}
    return Send(COMPLETE_TASK, "trigger.task_completed", _with_tenant(body, tenant))


def assign_task(task_id: str, assignee: str | None, *, claim: bool) -> Send:
    body = {"task_id": task_id, "assignee": assignee, "claim": claim}
    return Send(ASSIGN_TASK, "trigger.task_assign", body)


def update_task(task_id: str, changes: dict[str, Any]) -> Send:
    return Send(UPDATE_TASK, "trigger.task_update", {"task_id": task_id, "changes": changes})


def cancel(instance_id: str, *, trigger_id: str | None = None) -> Send:
    return Send(CANCEL, "trigger.cancel", _with_id({"instance_id": instance_id}, trigger_id))


def audited(message: Send, command: dict[str, Any] | None) -> Send:
    """``message`` carrying an operator's command (persistence/audit.py ``command``) as
    its task's ``audit`` keyword: the worker records the action's outcome with it."""
    if command is None:
        return message
    return Send(message.task, message.routing_key, {**message.kwargs, "audit": command})


def incident(op: str, incident_id: str) -> Send:
    """An operator's ``op`` (a key of ``INCIDENT_OPS``) on one incident."""
    return Send(INCIDENT_OPS[op], f"trigger.incident_{op}", {"incident_id": incident_id})


def suspend(instance_id: str) -> Send:
    return Send(SUSPEND, "trigger.suspend", {"instance_id": instance_id})


def resume(instance_id: str) -> Send:
    return Send(RESUME, "trigger.resume", {"instance_id": instance_id})


def set_variables(instance_id: str, params: dict[str, Any]) -> Send:
    """``params``: ``tasks/client_operations.py``'s ``variables_params``."""
    return Send(SET_VARIABLES, "trigger.set_variables", {"instance_id": instance_id} | params)


def migrate(instance_id: str, version: int, mapping: dict[str, str]) -> Send:
    body = {"instance_id": instance_id, "version": version, "mapping": mapping}
    return Send(MIGRATE, "trigger.migrate", body)


def modify(instance_id: str, cancel_nodes: list[str], start_before: list[str]) -> Send:
    body = {"instance_id": instance_id, "cancel_nodes": cancel_nodes, "start_before": start_before}
    return Send(MODIFY, "trigger.modify", body)


def incident_raised(instance_id: str, summary: str) -> Send:
    body = {"instance_id": instance_id, "summary": summary}
    return Send(INCIDENT_RAISED, "trigger.incident_raised", body)


def batch_run(batch_id: str) -> Send:
    return Send(BATCH_RUN, "trigger.batch", {"batch_id": batch_id})


def apply_trigger(instance_id: str, trigger: Trigger, trigger_id: str) -> Send:
    """Any trigger the engine made itself (a job's result, a child's end for its parent,
    a follow-up past the step budget, a buffered message taken), to one instance; the
    routing key names the trigger's kind so a kind can have a queue of its own."""
    body = {
        "instance_id": instance_id,
        "trigger_json": trigger.model_dump(mode="json"),
        "trigger_id": trigger_id,
    }
    return Send(APPLY_TRIGGER, f"trigger.{trigger.kind}", body)


def job_routing_key(job_type: str) -> str:
    """A job's routing key: its task is the job type itself (a user's task, never a
    ``dormant.`` one), on ``job.<type>`` so each type can have its own queue."""
    return f"job.{job_type}"


# -- trigger ids: what makes a redelivered trigger a recognised duplicate ---------------


def dotted_key(task: str, routing_key: str) -> str:
    """The key dormant publishes ``task`` with, given the key it arrived or was kept with.

    dormant's queues are bound on its topic exchange by dotted patterns (``trigger.#``,
    ``message.#``, ...), which an undotted key never matches: on Redis such a publish
    is dropped without a word. An undotted key is not one of dormant's: it is a plain
    Celery producer's queue name (Celery's default ``celery``) that a kept trigger or an
    inbox row remembers from its first delivery. Sent again, the trigger goes where
    dormant's own send of the task goes: ``trigger.<task>`` (``dormant.incident.retry``
    -> ``trigger.incident_retry``, the key ``incident`` builds), consumed by every
    ``dormant worker``. A dotted key is kept as it is.
    """
    if "." in routing_key:
        return routing_key
    name = task.removeprefix("dormant.").replace(".", "_") or "default"
    return f"trigger.{name}"


def outbox_trigger_id(row_id: Any) -> str:
    """The trigger id of everything the relay publishes for outbox row ``row_id``."""
    return f"outbox:{row_id}"


def job_result_id(idempotency_key: str) -> str:
    """The trigger id of a job's outcome (done, failed, error thrown): one per job
    attempt, so a result reported twice is applied once."""
    return f"{idempotency_key}:done"


def job_heartbeat_id(idempotency_key: str) -> str:
    """A heartbeat's trigger id: each one is new (a heartbeat is never a duplicate)."""
    return f"{idempotency_key}:heartbeat:{uuid.uuid4().hex}"


def redelivery(undelivered: Undelivered) -> Send:
    """The message that sends a delivery the Router kept again (its failed trigger)."""
    if isinstance(undelivered, UndeliveredStart):
        return start(
            undelivered.process_key,
            undelivered.instance_id,
            undelivered.variables,
            trigger_id=undelivered.trigger_id,
            **undelivered.options,
        )
    return apply_trigger(undelivered.instance_id, undelivered.trigger, undelivered.trigger_id)

# mypy: disable-error-code="untyped-decorator,no-untyped-call"
"""Jobs: service tasks run by the user's own Celery tasks, and their results coming back.

A job type is the name of a Celery task. Dispatching a ``DispatchJob`` effect sends
that task with the mapped variables as keyword arguments, on the exchange ``dormant``
with routing key ``job.<type>``, and four headers that tie it to its wait::

    dormant_instance_id, dormant_wait_id, dormant_attempt,
    dormant_idempotency_key = "<instance>:<wait>:<attempt>"

The model's ``zeebe:taskHeaders`` travel as data in one more header,
``dormant_task_headers`` (a JSON object; ``task_headers(self)`` in a bound task), never
merged into the message's headers: there a header named ``task``, ``id``, ``eta`` or
``timelimit`` would be a Celery protocol field, and a model could rename the task it
runs or forge its id. For the same reason a job type in a reserved namespace
(``dormant.*``, ``celery.*``: engine_core/job_types.py) is never sent: the deploy and
the step function refuse it first, and ``dispatch`` refuses it again, as a job failure.

A job type that no worker reading its queue has registered is reported, not dropped:
Celery rejects a message naming an unknown task (``Consumer.on_unknown_task``) and
sends ``task_unknown``; the handler below turns a job's message into a ``JobFailed``
(``NotRegistered``), so the engine's retries run and their exhaustion is an incident
naming the job type, instead of a re-dispatch at every job timeout, forever.

The outcome comes back through Celery's signals in the worker that ran the job, and is
applied *synchronously in the signal handler* (with the results of the fast jobs the
same pool process took after it, in one transaction: tasks/job_batches.py): the
handler runs before the late acknowledgement, so a worker that dies before the result
is stored never acknowledges the job, and the job runs again. That makes jobs
**at-least-once**: a job must be idempotent, and may use ``idempotency_key(self)`` (a
bound task) to detect a repeat, e.g. as the idempotency key of a payment API.

* return a dict → ``JobCompleted`` (merged into the variables; anything else → ``{}``),
  checked to be JSON within the variables limits first (tasks/job_task.py): what is
  not, and a ``MemoryError``, are job failures like any other exception;
* raise ``engine_core.errors.BpmnError`` → ``JobErrorThrown`` (a modelled BPMN error);
* any other exception → ``JobFailed`` — only the *final* failure: a task declaring
  Celery ``autoretry_for`` reports only when Celery gives up (a retry is not a failure).

The engine retries failed jobs itself (a backoff deadline, then a new attempt with a new
idempotency key), so dormant adds no Celery-level retries.

Eager jobs: a job type marked ``eager`` in ``DORMANT_JOB_TYPES`` runs in the worker
process whose trigger dispatched it, right after that trigger committed (and marked its
inbox row and outbox rows), instead of one more trip through the broker (Temporal's
eager activity execution is the same idea): one Celery task where there were two. It
needs the type registered in that worker and its queue read by it (``runs_here``); at
most one job per trigger runs so (the rest are published, so parallel jobs stay
parallel), only while the trigger used less than half its soft time limit, and never
from a job's result applied by the worker that ran the job (``report``: no chain of
jobs inside one task). What changes for such a job: it runs under the trigger task's
time limits (``DORMANT_TRIGGER_SOFT_TIME_LIMIT_SECONDS``; past it the job fails like any
job, and the engine's retry policy takes over), Flower shows the trigger task, not the
job, and a worker that dies while running it leaves no message to redeliver: the sweep
(its row not yet deleted) or the job's timeout sends it again, as for a job message
the broker lost.

Job queues: by default the ``dormant`` queue (bound to ``job.#``). A job type routed
elsewhere by Celery's own routing (``task_routes`` or the task's ``queue`` option) is
sent to that queue instead, through its own direct exchange with the same routing key
``job.<type>``, so it is never also copied into ``dormant``. Start a worker for it with
``dormant worker --queues <queue> --include <module>``.

Tenants: every job names its instance's tenant in ``dormant_tenant_id``
(``job_tenant(self)``); a job of another tenant than the default goes to that
tenant's queue instead (tasks/tenant_queues.py, docs/tenants.md), and such a job is
never run in place (eager).
"""

from __future__ import annotations

from celery import Task

from dormant.engine_core.tenants import DEFAULT_TENANT
from dormant.engine_core.triggers import JobHeartbeat
from dormant.tasks import wire
from dormant.tasks.app import app
from dormant.tasks.job_dispatch import kept_for_a_start
from dormant.tasks.job_headers import (
    HEADER_IDEMPOTENCY_KEY,
    HEADER_TASK_HEADERS,
    HEADER_TENANT,
    job_context,
    read_header,
)
from dormant.tasks.job_results import report

__all__ = ["heartbeat", "idempotency_key", "incident_raised", "job_tenant", "task_headers"]


@app.task(name=wire.INCIDENT_RAISED)
def incident_raised(instance_id: str, summary: str) -> str:
    """Nothing to do: the result is the notice Flower lists (``report``'s
    ``_tell_flower``): ``INCIDENT <id> at <node> (<class>) instance=<id> ...``."""
    return summary


def idempotency_key(task: Task) -> str | None:
    """The running job's idempotency key (``instance:wait:attempt``), or None outside a job.

    Use it from a bound task (``@app.task(bind=True)``) to make a side effect
    idempotent: a job can run more than once (at-least-once delivery).
    """
    value = read_header(task.request, HEADER_IDEMPOTENCY_KEY)
    return str(value) if value is not None else None


def task_headers(task: Task) -> dict[str, str]:
    """The running job's ``zeebe:taskHeaders`` (empty outside a job or without any)."""
    value = read_header(task.request, HEADER_TASK_HEADERS)
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def job_tenant(task: Task) -> str | None:
    """The tenant of the instance the running job serves (``<default>`` for a job
    without one), or None outside a job: a job worker serving several tenants
    (``dormant worker --tenants a,b``) picks its credentials or database by it."""
    if job_context(task) is None:
        return None
    value = read_header(task.request, HEADER_TENANT)
    return str(value) if value else DEFAULT_TENANT


def heartbeat(task: Task, extend_seconds: float | None = None) -> bool:
    """From a long job (a bound task): "still working". Moves the job's timeout to now +
    ``extend_seconds`` (default: its job type's timeout), so the engine does not take it
    for lost and dispatch it again. False outside a dormant job."""
    ctx = job_context(task)
    if ctx is None:
        return False
    instance_id, wait_id, attempt, key = ctx
    if kept_for_a_start(key):  # run before its start was written: no timeout runs yet
        return True
    trigger = JobHeartbeat(wait_id=wait_id, attempt=attempt, extend_seconds=extend_seconds)
    report(instance_id, trigger, wire.job_heartbeat_id(key))
    return True

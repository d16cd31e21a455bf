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
applied *synchronously in the signal handler*: the handler runs before the late
acknowledgement, so a worker that dies before the result is stored never acknowledges
the job, and the job runs again. That makes jobs **at-least-once**: a job must be
idempotent, and may use ``idempotency_key(self)`` (a bound task) to detect a repeat,
e.g. as the idempotency key of a payment API.

* return a dict → ``JobCompleted`` (merged into the variables; anything else → ``{}``);
* raise ``dormant.BpmnError`` → ``JobErrorThrown`` (a modelled BPMN error);
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
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from celery import Task
from celery.signals import task_failure, task_success, task_unknown
from kombu.entity import Exchange, Queue

from dormant.engine_core.effects import DispatchJob, job_idempotency_key
from dormant.engine_core.errors import BpmnError
from dormant.engine_core.job_types import reserved_job_type
from dormant.engine_core.triggers import JobCompleted, JobErrorThrown, JobFailed, JobHeartbeat
from dormant.persistence import clock
from dormant.persistence.store import JobRun
from dormant.tasks import app as app_module
from dormant.tasks import metrics, tracing, wire
from dormant.tasks.app import QUEUE, app, publish, store

__all__ = [
    "HEADER_ATTEMPT",
    "HEADER_IDEMPOTENCY_KEY",
    "HEADER_INSTANCE",
    "HEADER_TASK_HEADERS",
    "HEADER_WAIT",
    "dispatch",
    "heartbeat",
    "idempotency_key",
    "job_queue",
    "run_before_start",
    "run_here",
    "runs_here",
    "some_job_type_is_eager",
    "task_headers",
]

log = logging.getLogger("dormant.jobs")

HEADER_INSTANCE = "dormant_instance_id"
HEADER_WAIT = "dormant_wait_id"
HEADER_ATTEMPT = "dormant_attempt"
HEADER_IDEMPOTENCY_KEY = "dormant_idempotency_key"
# The model's zeebe:taskHeaders, as one JSON object (never as message headers).
HEADER_TASK_HEADERS = "dormant_task_headers"


def job_queue(job_type: str) -> Queue:
    """Where a job of ``job_type`` goes: ``dormant`` unless Celery routing says otherwise."""
    routed = app.amqp.router.route({}, job_type).get("queue")
    name = routed.name if isinstance(routed, Queue) else routed
    if not name or name == QUEUE.name:
        return QUEUE
    return Queue(name, Exchange(name, type="direct"), routing_key=wire.job_routing_key(job_type))


def dispatch(job: DispatchJob) -> None:
    """Send one job: the ``DispatchJob`` effect of an outbox row (``parse_effect``)."""
    instance_id, wait_id, attempt = job.instance_id, job.wait_id, job.attempt
    job_type = job.job_type
    key = job.idempotency_key
    reserved = reserved_job_type(job_type)
    if reserved is not None:  # e.g. an outbox row written before the deploy-time rule
        log.error("job not dispatched instance=%s wait=%s: %s", instance_id, wait_id, reserved)
        defer(
            instance_id,
            JobFailed(
                wait_id=wait_id, attempt=attempt, error=reserved, error_class="ReservedJobType"
            ),
            wire.job_result_id(key),
        )
        return
    queue = job_queue(job_type)
    publish(
        job_type,
        wire.job_routing_key(job_type),
        dict(job.variables),
        queue=queue,
        exchange=queue.exchange.name if queue.exchange else None,
        headers=_job_headers(job),
    )
    metrics.job_dispatched(job_type)
    log.info(
        "job dispatched instance=%s wait=%s type=%s attempt=%s",
        instance_id,
        wait_id,
        job_type,
        attempt,
    )


def _job_headers(job: DispatchJob) -> dict[str, Any]:
    """The headers that tie a job's message (or its run in place) to its wait."""
    return {
        HEADER_TASK_HEADERS: {str(k): str(v) for k, v in job.headers.items()},
        HEADER_INSTANCE: job.instance_id,
        HEADER_WAIT: job.wait_id,
        HEADER_ATTEMPT: str(job.attempt),
        HEADER_IDEMPOTENCY_KEY: job.idempotency_key,
    }


def some_job_type_is_eager() -> bool:
    return any(own.eager for own in app_module.settings.job_types.values())


def runs_here(job_type: str) -> bool:
    """May this process run a job of ``job_type`` itself, right after the trigger that
    dispatched it committed ("Eager jobs" in the module docstring)?

    Only a type its operator marked ``eager`` (``DORMANT_JOB_TYPES``), that this process
    has registered, and whose queue this worker reads: a job routed to its own queue
    (its own workers, its own concurrency) always goes through the broker."""
    own = app_module.settings.job_types.get(job_type)
    if own is None or not own.eager or reserved_job_type(job_type) is not None:
        return False
    if job_type not in app.tasks:
        return False
    return job_queue(job_type).name in app.amqp.queues.consume_from


def run_here(job: DispatchJob, hostname: str | None) -> None:
    """Run one job in this process the way a worker runs a job message: through
    Celery's tracer, so ``task_prerun``, ``task_success``/``task_failure`` and
    ``task_postrun`` fire, and the handlers below report its outcome in its own locked
    transaction, as for a job that came from the broker. The request carries the job's
    headers (``idempotency_key``, ``task_headers`` and ``heartbeat`` work) and its
    routing, so a Celery-level retry the job asks for is published like any retry."""
    from celery.app.trace import trace_task

    task = app.tasks[job.job_type]
    headers = _job_headers(job)
    queue = job_queue(job.job_type)
    task_id = str(uuid.uuid4())
    request = {
        **headers,
        "id": task_id,
        "task": job.job_type,
        "headers": headers,
        "hostname": hostname,
        "is_eager": False,
        "retries": 0,
        "delivery_info": {
            "exchange": queue.exchange.name if queue.exchange else "",
            "routing_key": wire.job_routing_key(job.job_type),
            "priority": None,
            "redelivered": False,
        },
    }
    metrics.job_dispatched(job.job_type)
    log.info(
        "job run in place instance=%s wait=%s type=%s attempt=%s",
        job.instance_id,
        job.wait_id,
        job.job_type,
        job.attempt,
    )
    trace_task(task, task_id, (), dict(job.variables), request, app=app, hostname=hostname)


# The outcomes of jobs run before their start was written (``run_before_start``), by
# idempotency key: the signal handlers below keep them here instead of reporting them,
# for there is no instance yet to report them to.
_kept_outcomes: dict[str, list[JobCompleted | JobErrorThrown | JobFailed]] = {}


def run_before_start(job: DispatchJob, hostname: str | None) -> JobRun:
    """Run a start's first job, before the start is written (``Store.start``'s
    ``job_first``), as ``run_here`` runs it; its outcome comes back instead of being
    reported. No outcome (a Celery retry the job asked for, which the tracer has
    published) leaves the job's wait to be written, as for a job sent to the broker.
    Raises what Celery's tracer itself raised (the job's own exceptions are its
    outcome)."""
    key = job.idempotency_key
    _kept_outcomes[key] = []
    try:
        run_here(job, hostname)
    finally:
        outcomes = _kept_outcomes.pop(key, [])
    return JobRun(outcomes[0] if outcomes else None, clock.now())


def _kept(key: str, outcome: JobCompleted | JobErrorThrown | JobFailed) -> bool:
    """Keep a job's outcome for ``run_before_start`` if that is who ran it."""
    kept = _kept_outcomes.get(key)
    if kept is None:
        return False
    kept.append(outcome)
    return True


def _header(request: Any, name: str) -> Any:
    """Custom headers surface both as ``request.<name>`` and in ``request.headers``."""
    value = getattr(request, name, None)
    if value is None:
        value = (getattr(request, "headers", None) or {}).get(name)
    return value


def idempotency_key(task: Task) -> str | None:
    """The running job's idempotency key (``instance:wait:attempt``), or None outside a job.

    Use it from a bound task (``@app.task(bind=True)``) to make a side effect
    idempotent: a job can run more than once (at-least-once delivery).
    """
    value = _header(task.request, HEADER_IDEMPOTENCY_KEY)
    return str(value) if value is not None else None


def task_headers(task: Task) -> dict[str, str]:
    """The running job's ``zeebe:taskHeaders`` (empty outside a job or without any)."""
    value = _header(task.request, HEADER_TASK_HEADERS)
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def heartbeat(task: Task, extend_seconds: float | None = None) -> bool:
    """From a long job (a bound task): "still working". Moves the job's timeout to now +
    ``extend_seconds`` (default: its job type's timeout), so the engine does not take it
    for lost and dispatch it again. False outside a dormant job."""
    ctx = _context(task)
    if ctx is None:
        return False
    instance_id, wait_id, attempt, key = ctx
    if key in _kept_outcomes:  # run before its start was written: no timeout runs yet
        return True
    trigger = JobHeartbeat(wait_id=wait_id, attempt=attempt, extend_seconds=extend_seconds)
    report(instance_id, trigger, wire.job_heartbeat_id(key))
    return True


def _context(task: Any) -> tuple[str, str, int, str] | None:
    request = getattr(task, "request", None)
    if request is None:
        return None
    instance_id = _header(request, HEADER_INSTANCE)
    wait_id = _header(request, HEADER_WAIT)
    if not instance_id or not wait_id:
        return None  # not a dormant job: an ordinary task of the user's
    attempt = int(_header(request, HEADER_ATTEMPT) or 1)
    key = _header(request, HEADER_IDEMPOTENCY_KEY) or job_idempotency_key(
        instance_id, wait_id, attempt
    )
    return str(instance_id), str(wait_id), attempt, str(key)


@tracing.report_span
def report(instance_id: str, trigger: Any, trigger_id: str) -> None:
    """Apply a job's outcome now; if the database refuses, hand it to the broker.

    Three quick tries cover a database restart; after that the trigger is published as
    ``dormant.apply_trigger`` (which retries with backoff) rather than dropped.
    """
    from dormant.tasks.outbox import publish_rows

    last: Exception | None = None
    delays = (0.0, 0.5, 2.0)
    for attempt, delay in enumerate(delays, 1):
        if delay:
            time.sleep(delay)
        began = time.perf_counter()
        try:
            applied = store().apply(instance_id, trigger, clock.now(), trigger_id=trigger_id)
        except Exception as exc:  # mapped below: the result must not be lost
            from dormant.engine_core.errors import DormantError, UnknownInstance

            # Retrying cannot help a refusal: keep it for an operator. An unknown
            # instance gets the quick tries first: it may be a start still being
            # written, whose job ran before it (``run_before_start``) and asked Celery
            # for a prompt retry.
            unknown = isinstance(exc, UnknownInstance)
            if isinstance(exc, DormantError) and (not unknown or attempt == len(delays)):
                task, routing_key, kwargs = wire.apply_trigger(instance_id, trigger, trigger_id)
                failed_id = store().failed.keep_failed(
                    task,
                    routing_key,
                    kwargs,
                    exc,
                    clock.now(),
                    trigger_id=trigger_id,
                    instance_id=instance_id,
                )
                log.error(
                    "job result for instance %s not applied, kept as failed trigger %s: %s",
                    instance_id,
                    failed_id,
                    type(exc).__name__,
                )
                return
            last = exc
            continue
        metrics.record_trigger(trigger.kind, applied, time.perf_counter() - began)
        publish_rows(applied.outbox_rows)
        log.info(
            "instance=%s revision=%s trigger=%s%s",
            instance_id,
            applied.revision,
            trigger.kind,
            " duplicate" if applied.duplicate else "",
        )
        return
    log.warning("job result for instance %s deferred to a worker: %r", instance_id, last)
    defer(instance_id, trigger, trigger_id)


def defer(instance_id: str, trigger: Any, trigger_id: str) -> None:
    """Hand a job's outcome to any worker as ``dormant.apply_trigger`` (which retries).

    Also the way out of places that must not touch the database themselves: the
    consumer's unknown-task hook runs in the worker's main process.
    """
    publish(*wire.apply_trigger(instance_id, trigger, trigger_id))


@task_success.connect(weak=False)
def _on_success(sender: Any = None, result: Any = None, **_: Any) -> None:
    ctx = _context(sender)
    if ctx is None:
        return
    instance_id, wait_id, attempt, key = ctx
    variables = result if isinstance(result, dict) else {}
    outcome = JobCompleted(wait_id=wait_id, attempt=attempt, variables=variables)
    if not _kept(key, outcome):
        report(instance_id, outcome, wire.job_result_id(key))


@task_failure.connect(weak=False)
def _on_failure(sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
    ctx = _context(sender)
    if ctx is None or exception is None:
        return
    instance_id, wait_id, attempt, key = ctx
    trigger: JobErrorThrown | JobFailed
    if isinstance(exception, BpmnError):
        trigger = JobErrorThrown(
            wait_id=wait_id,
            attempt=attempt,
            code=exception.code,
            message=exception.message,
            variables=dict(exception.variables),
        )
    else:
        metrics.job_failed(str(getattr(sender, "name", "")))
        trigger = JobFailed(
            wait_id=wait_id,
            attempt=attempt,
            error=str(exception)[:2000],
            error_class=type(exception).__name__,
        )
    if not _kept(key, trigger):
        report(instance_id, trigger, wire.job_result_id(key))


@task_unknown.connect(weak=False)
def _on_unknown(sender: Any = None, message: Any = None, name: str | None = None, **_: Any) -> None:
    """A job whose type this worker has not registered: a job failure, never a drop.

    Celery has already rejected the message (it would otherwise be redelivered to the
    same worker forever); if reporting fails too, the job's timeout in the engine
    dispatches it again, so the job is late, never lost. Messages that are not dormant
    jobs (no job headers) are left to Celery's own error line.
    """
    headers = getattr(message, "headers", None) or {}
    instance_id, wait_id = headers.get(HEADER_INSTANCE), headers.get(HEADER_WAIT)
    if not instance_id or not wait_id:
        return
    attempt = int(headers.get(HEADER_ATTEMPT) or 1)
    key = headers.get(HEADER_IDEMPOTENCY_KEY) or f"{instance_id}:{wait_id}:{attempt}"
    queue = (getattr(message, "delivery_info", None) or {}).get("routing_key") or "?"
    error = (
        f"job type {name!r} is not registered on the worker that received it "
        f"(routing key {queue}); load its module with `dormant worker --include MODULE`"
    )
    log.error("job not run instance=%s wait=%s: %s", instance_id, wait_id, error)
    try:
        defer(
            str(instance_id),
            JobFailed(
                wait_id=str(wait_id), attempt=attempt, error=error, error_class="NotRegistered"
            ),
            wire.job_result_id(key),
        )
    except Exception:  # the job timeout dispatches it again
        log.exception("unknown job type %r not reported; its job timeout will retry it", name)

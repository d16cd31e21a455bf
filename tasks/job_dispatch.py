# mypy: disable-error-code="untyped-decorator,no-untyped-call"
"""Job dispatch: a ``DispatchJob`` effect sent as its job type's Celery task on routing
key ``job.<type>``, or run in this process (eager jobs, a start's first job). What a job
is, its headers, its queues and eager jobs are described in tasks/jobs.py."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from celery.app.trace import trace_task
from kombu.entity import Exchange, Queue

from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.job_types import reserved_job_type
from dormant.engine_core.tenants import DEFAULT_TENANT
from dormant.engine_core.triggers import JobCompleted, JobErrorThrown, JobFailed
from dormant.persistence import api_keys, clock
from dormant.persistence.store import JobRun
from dormant.tasks import app as app_module
from dormant.tasks import metrics, priorities, wire
from dormant.tasks.app import QUEUE, app, publish
from dormant.tasks.job_headers import (
    HEADER_ATTEMPT,
    HEADER_IDEMPOTENCY_KEY,
    HEADER_INSTANCE,
    HEADER_TASK_HEADERS,
    HEADER_TENANT,
    HEADER_WAIT,
)
from dormant.tasks.tenant_queues import tenant_queue

__all__ = [
    "defer",
    "dispatch",
    "job_queue",
    "keep_outcome",
    "kept_for_a_start",
    "run_before_start",
    "run_here",
    "runs_here",
    "some_job_type_is_eager",
]

log = logging.getLogger("dormant.jobs")


def job_queue(job_type: str) -> Queue:
    """Where a job of ``job_type`` goes: ``dormant`` unless Celery routing says otherwise."""
    routed = app.amqp.router.route({}, job_type).get("queue")
    name = routed.name if isinstance(routed, Queue) else routed
    if not name or name == QUEUE.name:
        return QUEUE
    return Queue(name, Exchange(name, type="direct"), routing_key=wire.job_routing_key(job_type))


def dispatch(job: DispatchJob, tenant: str = DEFAULT_TENANT) -> None:
    """Send one job: the ``DispatchJob`` effect of an outbox row (``parse_effect``),
    of an instance of ``tenant``. Another tenant's than the default goes to that
    tenant's own queue, read by ``dormant worker --tenants`` (docs/tenants.md)."""
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
    own = app_module.settings.job_types.get(job_type)
    if own is not None and own.api:
        _offer_to_api(job, tenant)
        return
    queue = job_queue(job_type) if tenant == DEFAULT_TENANT else tenant_queue(tenant)
    publish(
        job_type,
        wire.job_routing_key(job_type) if tenant == DEFAULT_TENANT else str(queue.routing_key),
        dict(job.variables),
        queue=queue,
        exchange=queue.exchange.name if queue.exchange else None,
        headers=_job_headers(job, tenant),
        priority=_priority(job.variables),
        together=True,  # a batch's jobs go out in one round trip (tasks/drain.py)
    )
    metrics.job_dispatched(job_type)
    log.info(
        "job dispatched instance=%s wait=%s type=%s attempt=%s",
        instance_id,
        wait_id,
        job_type,
        attempt,
    )


def _priority(variables: dict[str, Any]) -> int | None:
    """The instance's priority for the broker, when priorities are on (tasks/priorities.py)."""
    s = app_module.settings
    return priorities.message_priority(
        s.broker_url, s.priority_levels, s.priority_variable, variables
    )


def _offer_to_api(job: DispatchJob, tenant: str) -> None:
    """A job of a type API workers serve (``DORMANT_JOB_TYPES`` ``"api": true``): kept
    for their activation instead of sent to Celery (persistence/api_keys.py)."""
    key = api_keys.offer(
        app_module.store().engine,
        idempotency_key=job.idempotency_key,
        job_type=job.job_type,
        instance_id=job.instance_id,
        wait_id=job.wait_id,
        node_id=job.node_id,
        attempt=job.attempt,
        variables=dict(job.variables),
        headers={str(k): str(v) for k, v in job.headers.items()},
        now=clock.now(),
        tenant=tenant,
    )
    metrics.job_dispatched(job.job_type)
    log.info(
        "job offered to API workers instance=%s wait=%s type=%s attempt=%s key=%s",
        job.instance_id,
        job.wait_id,
        job.job_type,
        job.attempt,
        key,
    )


def _job_headers(job: DispatchJob, tenant: str = DEFAULT_TENANT) -> dict[str, Any]:
    """The headers that tie a job's message (or its run in place) to its wait, and
    name its instance's tenant."""
    return {
        HEADER_TENANT: tenant,
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
    if own is None or not own.eager or own.api or reserved_job_type(job_type) is not None:
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


def keep_outcome(key: str, outcome: JobCompleted | JobErrorThrown | JobFailed) -> bool:
    """Keep a job's outcome for ``run_before_start`` if that is who ran it."""
    kept = _kept_outcomes.get(key)
    if kept is None:
        return False
    kept.append(outcome)
    return True


def kept_for_a_start(key: str) -> bool:
    """Is the job of idempotency key ``key`` running before its start was written?"""
    return key in _kept_outcomes


def defer(instance_id: str, trigger: Any, trigger_id: str) -> None:
    """Hand a job's outcome to any worker as ``dormant.apply_trigger`` (which retries).

    Also the way out of places that must not touch the database themselves: the
    consumer's unknown-task hook runs in the worker's main process.
    """
    publish(*wire.apply_trigger(instance_id, trigger, trigger_id))

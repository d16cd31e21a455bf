# mypy: disable-error-code="untyped-decorator,no-untyped-call"
"""Job outcomes coming back: Celery's signals in the worker that ran a job, each applied
at once in its own locked transaction (``report``), before the late acknowledgement;
why that makes jobs at-least-once is in tasks/jobs.py."""

from __future__ import annotations

import logging
import time
from typing import Any

from celery.signals import task_failure, task_success, task_unknown

from dormant.engine_core.errors import BpmnError, DormantError, UnknownInstance
from dormant.engine_core.inputs import shorten
from dormant.engine_core.job_flow import RateLimited
from dormant.engine_core.triggers import JobCompleted, JobErrorThrown, JobFailed
from dormant.persistence import clock
from dormant.tasks import app as app_module
from dormant.tasks import job_batches, metrics, tracing, wire
from dormant.tasks.app import publish, store
from dormant.tasks.job_dispatch import defer, keep_outcome
from dormant.tasks.job_flow import rate_limited
from dormant.tasks.job_headers import (
    HEADER_ATTEMPT,
    HEADER_IDEMPOTENCY_KEY,
    HEADER_INSTANCE,
    HEADER_WAIT,
    job_context,
)
from dormant.tasks.outbox import publish_rows
from dormant.tasks.transient import backoff as transient_backoff
from dormant.tasks.transient import may_retry

__all__ = ["report"]

log = logging.getLogger("dormant.jobs")


# Retries a job's outcome gets in the job's own pool process before it is handed to
# any worker: short ones, because the job's message stays unacknowledged meanwhile and
# the process serves no other job; the deferred trigger task has the whole transient
# budget (tasks/triggers.py).
RETRIES_IN_PLACE = 2
# The waits of an unknown instance's retries: a start's transaction, not a fault, so
# they do not shrink with the transient backoff settings.
UNKNOWN_DELAYS = (0.5, 2.0)


@tracing.report_span
def report(instance_id: str, trigger: Any, trigger_id: str, *, task: Any = None) -> None:
    """Apply a job's outcome now, or with the fast jobs queued behind it: ``task``, the
    job's own task, may start a batch of them (tasks/job_batches.py), and a batch
    running on this thread collects it."""
    outcome = job_batches.Outcome(instance_id, trigger, trigger_id)
    if job_batches.collect(outcome):
        return
    if job_batches.may_batch(task):
        job_batches.run_batch(outcome, _finish, _report_alone)
        return
    _report_alone(outcome)


def run_queued_jobs(task: Any) -> None:
    """At the end of the trigger task ``task``: run the fast jobs queued now, and apply
    their outcomes together (tasks/job_batches.py ``may_take_after``). Whatever goes
    wrong here leaves the trigger's own work as it is: what was taken went back."""
    if not job_batches.may_take_after(task):
        return
    try:
        job_batches.run_batch(None, _finish, _report_alone)
    except Exception:
        log.warning("the jobs queued after a trigger were not run here", exc_info=True)


def _report_alone(outcome: job_batches.Outcome) -> None:
    """Apply one job's outcome in its own transaction; if the database refuses, hand it
    to the broker.

    A transient failure (tasks/transient.py) is retried in place a little, under the
    same settings as every trigger (``DORMANT_TRANSIENT_*``), then published as
    ``dormant.apply_trigger``, whose task retries it with the rest of that budget: the
    result heals by itself, never dropped. An unknown instance gets the same short
    patience: it may be a start still being written, whose job ran before it
    (``run_before_start``). A refusal is kept for an operator at once; any other error
    is deferred too, so a second try decides it.
    """
    instance_id, trigger, trigger_id = outcome.instance_id, outcome.trigger, outcome.trigger_id
    settings = app_module.settings
    retries = 0
    while True:
        began = time.perf_counter()
        try:
            applied = store().apply(instance_id, trigger, clock.now(), trigger_id=trigger_id)
            break
        except Exception as exc:  # mapped below: the result must not be lost
            unknown = isinstance(exc, UnknownInstance)
            patient = unknown or may_retry(exc, retries, settings)
            if patient and retries < RETRIES_IN_PLACE:
                delay = UNKNOWN_DELAYS[retries] if unknown else transient_backoff(retries, settings)
                log.info(
                    "job result for instance %s: %s, retrying in %.2f s",
                    instance_id,
                    type(exc).__name__,
                    delay,
                )
                time.sleep(delay)
                retries += 1
                continue
            if isinstance(exc, DormantError):
                _keep(instance_id, trigger, trigger_id, exc)
                return
            log.warning(
                "job result for instance %s deferred to a worker: %s",
                instance_id,
                type(exc).__name__,
            )
            defer(instance_id, trigger, trigger_id)
            return
    _finish(outcome, applied, time.perf_counter() - began)


def _finish(outcome: job_batches.Outcome, applied: Any, seconds: float) -> None:
    """What follows a job's outcome once its transaction (or savepoint) committed."""
    metrics.record_trigger(outcome.trigger.kind, applied, seconds)
    publish_rows(applied.outbox_rows)
    _tell_flower(outcome.instance_id, applied)
    log.info(
        "instance=%s revision=%s trigger=%s%s",
        outcome.instance_id,
        applied.revision,
        outcome.trigger.kind,
        " duplicate" if applied.duplicate else "",
    )


def _keep(instance_id: str, trigger: Any, trigger_id: str, exc: Exception) -> None:
    """Retrying cannot help a refusal: keep the outcome as a failed trigger."""
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


def _tell_flower(instance_id: str, applied: Any) -> None:
    """A job's final failure that raised an incident: publish ``dormant.incident.raised``,
    whose result starts with ``INCIDENT`` and names it, so searching Flower for
    ``INCIDENT`` finds the most common incident too (issue 28). The job's own task shows
    only its exception, which Flower does not search. Best effort: the incident is in
    the database already; a notice the broker refuses is logged and skipped."""
    head = metrics.incident_head([applied] if applied.changed else [])
    if not head:
        return
    text = f"{head}instance={instance_id} revision={applied.revision}"
    try:
        publish(*wire.incident_raised(instance_id, text))
    except Exception as exc:  # the notice only; the incident itself is committed
        log.warning("incident notice for instance %s not published: %r", instance_id, exc)


@task_success.connect(weak=False)
def _on_success(sender: Any = None, result: Any = None, **_: Any) -> None:
    ctx = job_context(sender)
    if ctx is None:
        return
    job_batches.finished(sender)
    instance_id, wait_id, attempt, key = ctx
    variables = result if isinstance(result, dict) else {}
    outcome = JobCompleted(wait_id=wait_id, attempt=attempt, variables=variables)
    if not keep_outcome(key, outcome):
        report(instance_id, outcome, wire.job_result_id(key), task=sender)


@task_failure.connect(weak=False)
def _on_failure(sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
    ctx = job_context(sender)
    if ctx is None or exception is None:
        return
    job_batches.finished(sender)
    instance_id, wait_id, attempt, key = ctx
    if isinstance(exception, RateLimited):  # not a failure: back to waiting, no retry used
        rate_limited(sender, exception, instance_id, wait_id, attempt)
        return
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
    if not keep_outcome(key, trigger):
        report(instance_id, trigger, wire.job_result_id(key), task=sender)


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
        log.exception(
            "unknown job type %s not reported; its job timeout will retry it", shorten(name)
        )

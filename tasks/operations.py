# mypy: disable-error-code="untyped-decorator"
"""Management tasks for operations on running instances (``dormant.*``, callable from
Flower): one instance at a time, or in bulk through a batch.

The single-instance tasks are the trigger tasks' shell (``tasks.triggers._run``) with
an operator's trigger: a refused action fails the task with its reason. ``dormant.bulk``
selects and writes a batch; ``dormant.batch.run`` works on it one slice at a time and
enqueues the next slice; beat's ``dormant.batches.sweep`` enqueues any running batch
that nobody holds (never started, or its worker died).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from celery import Task

from dormant.engine_core.checkpoint import ROOT_SCOPE
from dormant.engine_core.errors import DormantError
from dormant.engine_core.inputs import variables_params
from dormant.engine_core.triggers import (
    MigrateInstance,
    ModifyInstance,
    Resume,
    SetVariables,
    Suspend,
    Trigger,
)
from dormant.persistence import audit as audit_rows
from dormant.persistence import batches, clock, job_pause
from dormant.persistence.deliveries import sweep_redeliveries
from dormant.persistence.processed import SWEEP_SLICE, sweep_processed
from dormant.persistence.selection import Selector
from dormant.tasks import app as app_module
from dormant.tasks import wire
from dormant.tasks.app import app, publish, store
from dormant.tasks.sweeps import each_row
from dormant.tasks.triggers import _run, apply_audited

__all__ = [
    "batch_run",
    "batches_sweep",
    "bulk",
    "enqueue_batch",
    "migrate",
    "modify",
    "pause_job_type",
    "resume",
    "resume_job_type",
    "set_variables",
    "suspend",
]

log = logging.getLogger("dormant.operations")


def _operate(
    task: Task,
    instance_id: str,
    kind: str,
    make: Callable[[], Trigger],
    inbox_id: str | None,
    trigger_id: str | None,
    audit: dict[str, Any] | None = None,
) -> None:
    """The trigger is built inside the shell, so arguments that do not fit are kept as
    a failed trigger (visible, retryable) like any other failure; a refusal fails the
    task with its reason. ``audit``: the operator's command, its outcome recorded with
    the action (``apply_audited``)."""

    if audit is None and inbox_id is None and trigger_id is None:
        audit = audit_rows.by_hand(kind, target=instance_id, instance_id=instance_id)

    def call(tid: str, now: datetime) -> Any:
        return apply_audited(instance_id, make(), now, tid, None, audit)

    _run(task, kind, call, inbox_id, trigger_id, operator=True, instance_id=instance_id)


# ``throws``: a refused action is an expected outcome, logged without a traceback.
_OPERATOR: dict[str, Any] = {"bind": True, "throws": (DormantError,)}


@app.task(name=wire.SUSPEND, **_OPERATOR)
def suspend(
    self: Task,
    instance_id: str,
    *,
    inbox_id: str | None = None,
    trigger_id: str | None = None,
    audit: dict[str, Any] | None = None,
) -> None:
    """Suspend an instance: its triggers are held until it is resumed."""
    _operate(self, instance_id, "suspend", Suspend, inbox_id, trigger_id, audit)


@app.task(name=wire.RESUME, **_OPERATOR)
def resume(
    self: Task,
    instance_id: str,
    *,
    inbox_id: str | None = None,
    trigger_id: str | None = None,
    audit: dict[str, Any] | None = None,
) -> None:
    """Resume an instance: its held triggers apply in arrival order."""
    _operate(self, instance_id, "resume", Resume, inbox_id, trigger_id, audit)


@app.task(name=wire.SET_VARIABLES, **_OPERATOR)
def set_variables(
    self: Task,
    instance_id: str,
    variables: dict[str, Any] | None = None,
    unset: list[str] | None = None,
    scope: str = ROOT_SCOPE,
    retry_incidents: bool = False,
    *,
    inbox_id: str | None = None,
    trigger_id: str | None = None,
    audit: dict[str, Any] | None = None,
) -> None:
    """Set or remove variables in one scope, and optionally retry the open incidents."""

    def make() -> Trigger:
        params = variables_params(
            variables, unset or (), scope, retry_incidents, store().settings.limits
        )
        return SetVariables(**params)

    _operate(self, instance_id, "set_variables", make, inbox_id, trigger_id, audit)


@app.task(name=wire.MIGRATE, **_OPERATOR)
def migrate(
    self: Task,
    instance_id: str,
    version: int,
    mapping: dict[str, str] | None = None,
    *,
    inbox_id: str | None = None,
    trigger_id: str | None = None,
    audit: dict[str, Any] | None = None,
) -> None:
    """Move an instance to another version of its process (refused with the reasons)."""

    def make() -> Trigger:
        return MigrateInstance(version=version, mapping=mapping or {})

    _operate(self, instance_id, "migrate", make, inbox_id, trigger_id, audit)


@app.task(name=wire.MODIFY, **_OPERATOR)
def modify(
    self: Task,
    instance_id: str,
    cancel_nodes: list[str] | None = None,
    start_before: list[str] | None = None,
    *,
    inbox_id: str | None = None,
    trigger_id: str | None = None,
    audit: dict[str, Any] | None = None,
) -> None:
    """Cancel the tokens at some nodes and/or start a token before others."""

    def make() -> Trigger:
        return ModifyInstance(cancel_nodes=cancel_nodes or [], start_before=start_before or [])

    _operate(self, instance_id, "modify", make, inbox_id, trigger_id, audit)


def enqueue_batch(batch_id: str, producer: Any = None) -> None:
    """Enqueue a slice of the batch's runner. Not through the inbox: the batch row is
    the durable record, and the sweep enqueues a running batch that nobody holds."""
    publish(*wire.batch_run(batch_id), producer=producer)


@app.task(name=wire.JOBS_PAUSE, bind=True, throws=(DormantError,))
def pause_job_type(self: Task, job_type: str) -> None:
    """Stop sending jobs of ``job_type``: they are held until it is resumed."""
    cmd = audit_rows.by_hand("job_type_pause", target=job_type)
    job_pause.pause(store().engine, job_type, clock.now(), cmd)


@app.task(name=wire.JOBS_RESUME, bind=True, throws=(DormantError,))
def resume_job_type(self: Task, job_type: str) -> int:
    """Send the held jobs of ``job_type`` again (through the outbox)."""
    cmd = audit_rows.by_hand("job_type_resume", target=job_type)
    return job_pause.resume(store().engine, job_type, clock.now(), cmd)


@app.task(name=wire.BULK, bind=True)
def bulk(
    self: Task,
    operation: str,
    selector: dict[str, Any],
    params: dict[str, Any] | None = None,
) -> str:
    """Create a batch (``operation`` on what ``selector`` selects) and start it; returns
    its id. From Flower: ``{"operation": "incident_retry", "selector": {"key": "order",
    "node": "charge"}}``."""
    chosen = Selector.model_validate(selector)
    cmd = audit_rows.by_hand(
        f"bulk_{operation}",
        params={
            "selector": chosen.model_dump(mode="json", exclude_none=True),
            **{k: v for k, v in (params or {}).items() if k != "actor"},
        },
    )
    view = batches.create(store(), operation, chosen, params or {}, clock.now(), cmd)
    enqueue_batch(view.id)
    log.info("batch %s %s created: %s", view.id, operation, view.report())
    return view.id


@app.task(name=wire.BATCH_RUN, bind=True, ignore_result=True)
def batch_run(self: Task, batch_id: str) -> None:
    """Work on a batch for one slice; enqueue the next slice if there is more."""
    more = batches.run(
        store(),
        batch_id,
        clock.now,
        claim_seconds=app_module.settings.batch_claim_seconds,
        # A slice ends well inside the trigger tasks' soft time limit.
        budget_seconds=min(20.0, app_module.settings.trigger_soft_time_limit_seconds / 2),
    )
    view = batches.batch(store(), batch_id)
    if more:
        enqueue_batch(batch_id)
    if view is not None:
        log.info("batch %s %s: %s", batch_id, view.operation, view.report())


@app.task(name=wire.BATCHES_SWEEP, bind=True, ignore_result=True)
def batches_sweep(self: Task) -> int:
    """Enqueue every running batch that nobody holds, each on its own (tasks/sweeps.py:
    nothing to park, a batch not enqueued now is still stalled at the next sweep)."""
    ids = batches.stalled(store(), clock.now())
    return each_row("batches_sweep", ids, enqueue_batch).done


@app.task(name=wire.PROCESSED_SWEEP, bind=True, ignore_result=True)
def processed_sweep(self: Task) -> int:
    """Delete processed trigger ids past their retention (persistence/processed.py), a
    slice at a time until none is left or a few slices went (the next tick goes on)."""
    retention = app_module.settings.processed_trigger_retention_seconds
    swept = 0
    for _ in range(10):
        gone = sweep_processed(store().engine, clock.now(), retention, SWEEP_SLICE)
        swept += gone
        if gone < SWEEP_SLICE:
            break
    # The redelivery counts of triggers without an inbox row, on the same retention
    # (persistence/deliveries.py): one slice a tick, as few are ever written.
    swept += sweep_redeliveries(store().engine, clock.now(), retention, SWEEP_SLICE)
    if swept:
        log.info("processed_sweep: %s processed trigger id(s) past retention deleted", swept)
    return swept + _sweep_audit()


def _sweep_audit() -> int:
    """The audit trail's rows past ``DORMANT_AUDIT_RETENTION_DAYS`` (persistence/audit.py,
    docs/limits.md), on the same housekeeping tick, a few slices at most per tick."""
    retention = app_module.settings.audit_retention_days
    swept = 0
    for _ in range(10):
        gone = audit_rows.sweep(store().engine, clock.now(), retention, audit_rows.SWEEP_SLICE)
        swept += gone
        if gone < audit_rows.SWEEP_SLICE:
            break
    if swept:
        log.info("processed_sweep: %s audit row(s) past retention deleted", swept)
    return swept

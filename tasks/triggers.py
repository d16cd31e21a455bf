# mypy: disable-error-code="untyped-decorator"
"""The trigger tasks: one Celery task per kind of trigger, names public (``dormant.*``).

Each is the same thin shell: parse → one Store / Router / scheduler call (the one
locked transaction, which also marks the Client's inbox row processed) → after commit,
publish the outbox rows it returned (as written, never read back) and mark them
published → one log line (instance id, revision, trigger kind; never payload values)
→ at most one job of an eager type it dispatched, run in place (tasks/jobs.py).
A trigger whose transaction did not mark its inbox row (a failed trigger kept, a
duplicate message, a broadcast) marks it after, in a transaction of its own. No BPMN.

Outcomes, decided at this seam:

* a stale or duplicate trigger is acknowledged (the Store records it), never retried;
  a failure of the model or its data is an incident the Store committed (the trigger
  applied);
* ``sqlalchemy.exc.OperationalError`` (the database restarting, a lock timeout) is
  transient: the task retries with exponential backoff;
* ANY other exception (a field refused at this edge, an undecodable checkpoint, a
  database refusal, a bug, a ``MemoryError``), and a transient one whose retries ran
  out, keeps the trigger as a failed trigger (persistence/failed_triggers.py) in a
  transaction of its own, logged once at ERROR; an operator lists, retries or drops it.
  Only when even that cannot be written is the task retried: the trigger is never
  acknowledged away;
* an operator's refused action (``OperatorError`` from an incident task) is the
  operator's answer: re-raised so Flower shows the task FAILED with the reason.

Every task takes an optional ``inbox_id`` (the Client's durable copy; also the trigger
id) or ``trigger_id`` (an outbox-derived id). A producer with only Celery installed
may send the public tasks without either; the Celery task id then serves as the trigger
id, which is stable across redeliveries of that message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded
from celery.signals import task_failure

from dormant.engine_core.calls import missing_child
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.errors import (
    DormantError,
    OperatorError,
    PoisonTrigger,
    UnknownProcess,
    UnknownTask,
)
from dormant.engine_core.inputs import check_variables
from dormant.engine_core.task_attributes import check_changes
from dormant.engine_core.tenants import DEFAULT_TENANT, check_tenant
from dormant.engine_core.triggers import (
    Cancel,
    IncidentDrop,
    IncidentResolve,
    IncidentRetry,
    TaskAssign,
    TaskCompleted,
    TaskUpdate,
    Trigger,
    parse_trigger,
)
from dormant.persistence import audit as audit_rows
from dormant.persistence import clock, deliveries, inbox, job_pause
from dormant.persistence.failed_triggers import call_kwargs, one_line
from dormant.persistence.outbox_queue import OutboxRow
from dormant.persistence.results import TriggerResult
from dormant.persistence.routing import Router
from dormant.persistence.store import JobRun, NewInstance
from dormant.persistence.tables import audit_log
from dormant.persistence.writes import Writes
from dormant.tasks import app as app_module
from dormant.tasks import drain, wire
from dormant.tasks.app import app, marks_redeliveries, store
from dormant.tasks.job_dispatch import (
    dispatch,
    run_before_start,
    run_here,
    runs_here,
    some_job_type_is_eager,
)
from dormant.tasks.job_results import run_queued_jobs
from dormant.tasks.lanes import (
    SUSPECT_SECONDS,
    OutOfLaneBudget,
    movable,
    quarantine_key,
    suspect,
    suspected,
)
from dormant.tasks.metrics import observe_trigger
from dormant.tasks.outbox import (
    HEADER_OUTBOX,
    consumed,
    follow_up_marker,
    publish_keeping_a_job,
    publish_rows,
)
from dormant.tasks.sweeps import relay
from dormant.tasks.transient import RETRY_UNBOUNDED, interrupt_in_chain, is_transient, may_retry
from dormant.tasks.transient import backoff as transient_backoff

__all__ = [
    "apply_trigger",
    "assign_task",
    "cancel",
    "complete_task",
    "describe_result",
    "incident_drop",
    "incident_resolve",
    "incident_retry",
    "keep_as",
    "message",
    "outbox_rows_of",
    "poison",
    "relay_outbox",
    "retry_backoff",
    "signal",
    "start",
    "update_task",
]

log = logging.getLogger("dormant.triggers")


def retry_backoff(retries: int) -> float:
    """Seconds before a trigger task's next try after a database error (the batch of
    fires, tasks/timers.py, backs off the same way)."""
    return float(min(30, 2**retries) * 0.5)


def outbox_rows_of(result: TriggerResult | None) -> list[OutboxRow]:
    """What a trigger's result asks the shell to publish (none when nothing applied)."""
    return [] if result is None else list(result.outbox_rows)


def describe_result(result: TriggerResult | None) -> str:
    """The one-line summary a trigger task logs and Flower shows."""
    return "nothing" if result is None else result.summary()


class _JobBeforeStart:
    """``Store.start``'s ``job_first`` for a start task: runs the first job a start
    dispatches before the instance is written, if this worker may run it in place
    (tasks/jobs.py, "Eager jobs"). ``ran``: it was asked and ran one, so the task
    runs no other job in place (one per trigger)."""

    def __init__(self, hostname: str | None) -> None:
        self.hostname = hostname
        self.ran = False

    @classmethod
    def for_task(cls, task: Task) -> _JobBeforeStart | None:
        """Only for a start delivered by a broker that holds it unacknowledged until
        the task ends and marks a delivery again (``marks_redeliveries``), and only at
        its first try: a redelivered start, or one retried after a database error,
        writes its job's wait first, so a job that kills its worker, or whose start
        cannot be written, is retried by the engine, not run again at every try."""
        request = task.request
        if request.is_eager or request.called_directly or not some_job_type_is_eager():
            return None
        if drain.collecting():  # taken into a batch: its locks wait for no job
            return None
        if not marks_redeliveries(app_module.settings.broker_url):
            return None
        if request.retries or (request.delivery_info or {}).get("redelivered"):
            return None
        return cls(request.hostname)

    def may_run(self, job_type: str) -> bool:
        return job_type.startswith("=") or runs_here(job_type)

    def __call__(self, job: DispatchJob) -> JobRun | None:
        if self.ran or not runs_here(job.job_type):
            return None
        if job_pause.is_paused(store().engine, job.job_type):
            return None  # its dispatch is written; publishing it holds it (tasks/outbox.py)
        if store().flow.limits_of(job.job_type) is not None:
            return None  # its slot is taken with its dispatch (persistence/job_flow.py)
        self.ran = True
        try:
            return run_before_start(job, self.hostname)
        except Exception:
            log.exception("job of type %s not run in place; dispatching it", job.job_type)
            return None


@observe_trigger  # metrics, the trace span, and the summary Flower shows (tasks/metrics.py)
def _run(
    task: Task,
    kind: str,
    call: Callable[[str, datetime], TriggerResult | None],
    inbox_id: str | None = None,
    trigger_id: str | None = None,
    *,
    operator: bool = False,
    instance_id: str | None = None,
    job_before: _JobBeforeStart | None = None,
    lane_key: str | None = None,
) -> None:
    """The shell every trigger task shares (see the module docstring).

    The trigger id: an explicit one first (an outbox follow-up, or a failed trigger
    sent again through the inbox keeps its first id), else the inbox row's, else the
    Celery task id. ``operator``: a refused action is re-raised after it is recorded.
    ``job_before``: the start's job runner, which may have run its one job already.
    ``lane_key``: what a main lane remembers a moved trigger by (tasks/lanes.py): a
    start's process, an instance's id."""
    began = time.monotonic()
    tid = trigger_id or inbox_id or task.request.id or "eager"
    number = _delivery_number(task, inbox_id, tid)
    if number > app_module.settings.max_deliveries:
        refused = poison(number, _last_error(inbox_id, tid))
        return _keep(task, kind, refused, tid, inbox_id, instance_id)
    if app_module.settings.worker_lane == "main":
        if number > 1:
            _suspect(lane_key, instance_id)
            return _quarantine(task, kind, tid, inbox_id, instance_id, number, "a redelivery")
        if suspected(lane_key):
            why = f"a trigger of {lane_key} moved within {SUSPECT_SECONDS:g} s"
            return _quarantine(task, kind, tid, inbox_id, instance_id, number, why)
    try:
        with movable():
            result = drain.applied(task, kind, call, tid, alone=job_before is not None)
    except OutOfLaneBudget as exc:
        _suspect(lane_key, instance_id)
        return _quarantine(task, kind, tid, inbox_id, instance_id, number, f"past {exc}")
    except OperatorError as exc:
        if not operator:
            return _keep(task, kind, exc, tid, inbox_id, instance_id)
        log.warning("trigger=%s refused: %s: %s", kind, type(exc).__name__, exc)
        _processed(inbox_id)
        consumed(task.request)
        raise
    except Exception as exc:
        settings = app_module.settings
        if settings.worker_lane == "main" and isinstance(
            interrupt_in_chain(exc), SoftTimeLimitExceeded
        ):
            _suspect(lane_key, instance_id)
            why = "past the main lane's soft time limit (DORMANT_LANE_TIME_LIMIT_SECONDS)"
            return _quarantine(task, kind, tid, inbox_id, instance_id, number, why)
        if may_retry(exc, task.request.retries, settings):
            log.info("trigger=%s transient failure, retrying: %s", kind, type(exc).__name__)
            raise task.retry(
                exc=exc,
                countdown=transient_backoff(task.request.retries, settings),
                max_retries=RETRY_UNBOUNDED,
            ) from exc
        if is_transient(exc):
            log.error("trigger=%s gave up after %s transient errors", kind, task.request.retries)
        return _keep(task, kind, exc, tid, inbox_id, instance_id)
    rows = outbox_rows_of(result)
    job: DispatchJob | None = None
    if job_before is not None and job_before.ran:
        publish_rows(rows)
    elif _may_run_a_job(task, began):
        job = publish_keeping_a_job(rows)
    else:
        publish_rows(rows)
    if result is None or not result.inbox_marked:
        _processed(inbox_id)
    consumed(task.request)
    log.info("trigger=%s %s", kind, describe_result(result))
    if job is not None:
        _run_job_here(job, task.request.hostname)
    else:
        run_queued_jobs(task)  # the jobs just published, under load (tasks/job_batches.py)
    return None


def _suspect(lane_key: str | None, instance_id: str | None) -> None:
    """A moved trigger's process (or instance) and its instance: their next triggers
    on this pool process move before they run (tasks/lanes.py)."""
    suspect(lane_key)
    if instance_id:
        suspect(f"instance {instance_id}")


def _quarantine(
    task: Task,
    kind: str,
    tid: str,
    inbox_id: str | None,
    instance_id: str | None,
    number: int,
    why: str,
) -> None:
    """Move the trigger to the quarantine lane (tasks/lanes.py), unapplied: the same
    task and body under the quarantine key, its trigger id named (a plain producer's
    trigger id is its first task id), its delivery number carried as the inbox sweep
    carries it, and its outbox row's mark if it is a follow-up (acknowledged once the
    quarantine lane applies it). Its message is acknowledged when this task returns,
    after the publish: a crash in between delivers it again, and its trigger id makes
    the second copy a duplicate."""
    request = task.request
    kwargs = call_kwargs(task.run, tuple(request.args or ()), dict(request.kwargs or {}))
    if not inbox_id:
        kwargs["trigger_id"] = tid
    routing_key = (request.delivery_info or {}).get("routing_key") or f"trigger.{kind}"
    headers: dict[str, Any] = {wire.DELIVERY_HEADER: number}
    follow_up = follow_up_marker(request)
    if follow_up is not None:  # its outbox row is acknowledged where it is applied
        headers[HEADER_OUTBOX] = follow_up
    try:
        app_module.publish(
            task.name,
            quarantine_key(wire.dotted_key(task.name, routing_key)),
            kwargs,
            headers=headers,
        )
    except Exception as exc:  # not moved: it stays in the broker and comes again
        log.error("trigger=%s %s not moved to the quarantine lane (%s); retrying", kind, tid, exc)
        raise task.retry(
            exc=exc, countdown=retry_backoff(min(request.retries, 6)), max_retries=RETRY_UNBOUNDED
        ) from exc
    log.warning(
        "trigger=%s %s (instance=%s) moved to the quarantine lane: %s",
        kind,
        tid,
        instance_id or "-",
        why,
    )


def _delivery_number(task: Task, inbox_id: str | None, tid: str) -> int:
    """Which delivery of its trigger this is, counting only what may follow a delivery
    that died (persistence/deliveries.py): a first delivery is 1 and costs nothing; one
    the broker flags as redelivered is counted in a commit of its own before it is
    applied; one the inbox sweep re-sent carries its number in a header. A count that
    cannot be written leaves the delivery uncounted: its apply meets the same fault,
    and the transient retries handle it."""
    request = task.request
    if request.is_eager or request.called_directly:
        return 1
    if (request.delivery_info or {}).get("redelivered"):
        try:
            counted = deliveries.count_redelivery(
                store().engine,
                inbox_id,
                tid,
                clock.now(),
                bound=app_module.settings.max_deliveries,
            )
            return 1 + counted
        except Exception as exc:
            log.info("trigger %s: redelivery not counted (%s)", tid, type(exc).__name__)
            return 1
    nested = getattr(request, "headers", None) or {}
    sent = getattr(request, wire.DELIVERY_HEADER, None) or nested.get(wire.DELIVERY_HEADER)
    return sent if isinstance(sent, int) and sent > 1 else 1


def poison(number: int, last_error: str | None = None) -> PoisonTrigger:
    """The error a poison trigger is kept with: which delivery was refused, the bound,
    and the last error known: a hard time limit's, as the worker's main process kept
    it (``_on_ending``), else the ending itself (a pool process killed by a signal or
    out of memory returns no error; the worker's log names it)."""
    bound = app_module.settings.max_deliveries
    last = last_error or (
        "the worker process ended during the delivery (a signal or out of memory; "
        "the worker's log says which)"
    )
    return PoisonTrigger(
        f"delivery {number} refused (DORMANT_MAX_DELIVERIES={bound}): the deliveries "
        f"before it never finished; last error: {last}"
    )


def _last_error(inbox_id: str | None, tid: str) -> str | None:
    try:
        return deliveries.last_error(store().engine, inbox_id, tid)
    except Exception as exc:  # the trigger is still kept, with the ending it can name
        log.info("trigger %s: last error not read (%s)", tid, type(exc).__name__)
        return None


@task_failure.connect(weak=False)
def _on_ending(
    sender: Any = None,
    task_id: str | None = None,
    exception: BaseException | None = None,
    kwargs: Any = None,
    **_: Any,
) -> None:
    """A trigger task past its hard time limit: Celery kills its pool process and tells
    the worker's main process, which keeps the error for the poison trigger it may
    become (persistence/deliveries.py). Only then, so no delivery that finishes pays."""
    if not isinstance(exception, TimeLimitExceeded):
        return
    if getattr(sender, "name", None) not in wire.TRIGGERS:
        return
    body = kwargs if isinstance(kwargs, dict) else {}
    inbox_id = body.get("inbox_id") if isinstance(body.get("inbox_id"), str) else None
    tid = str(body.get("trigger_id") or inbox_id or task_id)
    limit = exception.args[0] if exception.args else "?"
    error = f"TimeLimitExceeded: past the hard time limit ({limit} s), the pool process was killed"
    try:
        deliveries.record_ending(store().engine, inbox_id, tid, error, clock.now())
    except Exception as exc:  # the poison trigger is then kept naming the ending only
        log.warning("trigger %s: its hard time limit not recorded (%s)", tid, exc)


def _run_job_here(job: DispatchJob, hostname: str | None) -> None:
    """Run the job the trigger kept back; if Celery's tracer itself fails (the job's
    own exceptions are its outcome, reported by the job signals), send the job through
    the broker instead: a job may run twice, never not at all."""
    try:
        run_here(job, hostname)
    except Exception:
        log.exception("job of type %s not run in place; dispatching it", job.job_type)
        dispatch(job)


def _may_run_a_job(task: Task, began: float) -> bool:
    """A trigger run by a worker (not eagerly, not called directly) with at least half
    its soft time limit left may run one job it dispatched (tasks/jobs.py, "Eager
    jobs"); without an eager job type its rows are published as they are."""
    request = task.request
    if request.is_eager or request.called_directly or not some_job_type_is_eager():
        return False
    budget = app_module.settings.trigger_soft_time_limit_seconds
    return time.monotonic() - began < budget / 2


def _keep(
    task: Task,
    kind: str,
    exc: Exception,
    tid: str,
    inbox_id: str | None,
    instance_id: str | None,
) -> None:
    """Keep the trigger as a failed trigger, then acknowledge it; if even that cannot
    be written, retry the task (the trigger stays in the broker) instead."""
    request = task.request
    kwargs = call_kwargs(task.run, tuple(request.args or ()), dict(request.kwargs or {}))
    routing_key = (request.delivery_info or {}).get("routing_key") or f"trigger.{kind}"
    try:
        keep_as(task.name, routing_key, kwargs, kind, exc, tid, instance_id)
    except Exception as keep_exc:
        log.error("trigger=%s failed and could not be kept (%s); retrying", kind, keep_exc)
        raise task.retry(
            exc=exc, countdown=retry_backoff(min(request.retries, 6)), max_retries=RETRY_UNBOUNDED
        ) from exc
    _processed(inbox_id)
    consumed(request)
    return None


def keep_as(
    task_name: str,
    routing_key: str,
    kwargs: dict[str, Any],
    kind: str,
    exc: Exception,
    tid: str,
    instance_id: str | None,
) -> str:
    """Write one failed trigger (the task and body an operator's retry sends) and log
    it once at ERROR; its id. Raises whatever keeping it raised: the caller retries.

    ``_keep`` keeps a whole task this way; a batch of fires keeps one claim of it, as
    the single ``dormant.fire_deadline`` it would have been (tasks/timers.py)."""
    failed_id = store().failed.keep_failed(
        task_name, routing_key, kwargs, exc, clock.now(), trigger_id=tid, instance_id=instance_id
    )
    log.error(
        "trigger=%s failed, kept as failed trigger %s (instance=%s): %s",
        kind,
        failed_id,
        instance_id or "-",
        one_line(exc),
        exc_info=not isinstance(exc, DormantError),
    )
    return failed_id


def _processed(inbox_id: str | None) -> None:
    if inbox_id:
        try:
            inbox.mark_processed(store().engine, inbox_id)
        except Exception:  # the sweep re-publishes it; the trigger id makes that harmless
            log.exception("inbox row %s not marked processed", inbox_id)


@app.task(name=wire.START, bind=True)
def start(
    self: Task,
    key: str,
    instance_id: str,
    variables: dict[str, Any] | None = None,
    business_key: str | None = None,
    *,
    version: int | None = None,
    start_node_id: str | None = None,
    start_key: str | None = None,
    parent: dict[str, str] | None = None,
    version_tag: str | None = None,
    inbox_id: str | None = None,
    trigger_id: str | None = None,
    tenant: str | None = None,
) -> str | None:
    """Start instance ``instance_id`` of process ``key`` (idempotent on the id); with
    ``version_tag``, of its newest version carrying that ``zeebe:versionTag``.

    ``tenant``: the producer's; a start without one is the default tenant's, and a
    process of another tenant is unknown to it (docs/tenants.md). A call activity's
    child is started in its parent's tenant. A child (``parent`` given) whose
    process is not deployed fails back to its caller with the trigger the core
    decides (``calls.missing_child``).
    """

    # Another tenant's start never runs its first job here: that job goes to its
    # tenant's queue (tasks/tenant_queues.py).
    job_before = _JobBeforeStart.for_task(self) if tenant in (None, DEFAULT_TENANT) else None
    if job_before is not None and not store().may_run_a_job_first(key, version, job_before):
        job_before = None  # no job of the model would run first: free to share a batch

    def call(tid: str, now: datetime) -> Any:
        # A call activity's child names its parent's tenant (tasks/outbox.py
        # ``_start_child``; left out for the default one, like every producer's).
        asked = check_tenant(tenant)
        try:
            return store().start(
                NewInstance(
                    key,
                    instance_id,
                    variables or {},
                    business_key=business_key,
                    version=version,
                    start_node_id=start_node_id,
                    start_key=start_key,
                    parent=parent,
                    trigger_id=tid,
                    version_tag=version_tag,
                    inbox_id=inbox_id,
                    tenant=asked,
                ),
                now=now,
                job_first=job_before,
            )
        except UnknownProcess as exc:
            if parent is None:
                raise
            failed = missing_child(parent["wait_id"], str(exc))
            return store().apply(parent["instance_id"], failed, now, trigger_id=f"{tid}:unknown")

    return _run(
        self,
        "start",
        call,
        inbox_id,
        trigger_id,
        instance_id=instance_id,
        job_before=job_before,
        lane_key=f"process {key}",
    )


@app.task(name=wire.MESSAGE, bind=True)
def message(
    self: Task,
    name: str,
    correlation_key: str | None = None,
    variables: dict[str, Any] | None = None,
    message_id: str | None = None,
    ttl: float | None = None,
    *,
    inbox_id: str | None = None,
    trigger_id: str | None = None,
    tenant: str | None = None,
) -> str | None:
    """Correlate a message to its holders, start a message start, or buffer it (TTL),
    all within ``tenant`` (none: the default tenant)."""

    def call(tid: str, now: datetime) -> Any:
        return Router(store(), wire.redelivery).message(
            name,
            correlation_key,
            variables or {},
            message_id=message_id or tid,
            ttl_seconds=ttl,
            now=now,
            inbox_id=inbox_id,
            tenant=check_tenant(tenant),
        )

    return _run(self, "message", call, inbox_id, trigger_id)


@app.task(name=wire.SIGNAL, bind=True)
def signal(
    self: Task,
    name: str,
    variables: dict[str, Any] | None = None,
    signal_id: str | None = None,
    *,
    inbox_id: str | None = None,
    trigger_id: str | None = None,
    tenant: str | None = None,
) -> str | None:
    """Broadcast a signal to every holder (and signal starts) of ``tenant`` (none:
    the default tenant)."""

    def call(tid: str, now: datetime) -> Any:
        return Router(store(), wire.redelivery).signal(
            name, variables or {}, signal_id=signal_id or tid, now=now, tenant=check_tenant(tenant)
        )

    return _run(self, "signal", call, inbox_id, trigger_id)


def _task_wait(task_id: str, tenant: str | None = None) -> tuple[str, str]:
    """The open task's (instance, wait); with ``tenant``, only a task of that tenant:
    another tenant's task is unknown to it, worded as a task nobody has."""
    view = store().queries.task_view(task_id)
    if tenant is not None and view.tenant != tenant:
        raise UnknownTask(f"no open user task has id {task_id!r} for tenant {tenant!r}")
    return view.instance_id, view.id.rsplit(".", 1)[1]


@app.task(name=wire.COMPLETE_TASK, bind=True)
def complete_task(
    self: Task,
    task_id: str,
    variables: dict[str, Any] | None = None,
    *,
    inbox_id: str | None = None,
    trigger_id: str | None = None,
    tenant: str | None = None,
) -> str | None:
    """Complete user task ``task_id`` with ``variables``; the task must be ``tenant``'s
    (none: the default tenant's)."""

    def call(tid: str, now: datetime) -> Any:
        checked = check_variables(variables, "task variables", store().settings.limits)
        instance_id, wait_id = _task_wait(task_id, check_tenant(tenant))
        trigger = TaskCompleted(wait_id=wait_id, variables=checked)
        return store().apply(instance_id, trigger, now, trigger_id=tid, inbox_id=inbox_id)

    owner = task_id.rsplit(".", 1)[0] if isinstance(task_id, str) and "." in task_id else None
    return _run(self, "task_completed", call, inbox_id, trigger_id, instance_id=owner)


def _owner(task_id: Any) -> str | None:
    return task_id.rsplit(".", 1)[0] if isinstance(task_id, str) and "." in task_id else None


@app.task(name=wire.ASSIGN_TASK, bind=True)
def assign_task(
    self: Task,
    task_id: str,
    assignee: str | None = None,
    claim: bool = False,
    *,
    inbox_id: str | None = None,
    trigger_id: str | None = None,
) -> str | None:
    """Assign user task ``task_id`` to ``assignee`` (None: unassign); ``claim`` refuses
    a task assigned to someone else."""

    def call(tid: str, now: datetime) -> Any:
        who = check_changes({"assignee": assignee})["assignee"]
        instance_id, wait_id = _task_wait(task_id)
        trigger = TaskAssign(wait_id=wait_id, assignee=who, claim=bool(claim))
        return store().apply(instance_id, trigger, now, trigger_id=tid)

    return _run(self, "task_assign", call, inbox_id, trigger_id, instance_id=_owner(task_id))


@app.task(name=wire.UPDATE_TASK, bind=True)
def update_task(
    self: Task,
    task_id: str,
    changes: dict[str, Any] | None = None,
    *,
    inbox_id: str | None = None,
    trigger_id: str | None = None,
) -> str | None:
    """Change user task ``task_id``'s candidates, dates or priority (Camunda names)."""

    def call(tid: str, now: datetime) -> Any:
        checked = check_variables(changes, "task changes", store().settings.limits)
        instance_id, wait_id = _task_wait(task_id)
        trigger = TaskUpdate(wait_id=wait_id, changes=checked)
        return store().apply(instance_id, trigger, now, trigger_id=tid)

    return _run(self, "task_update", call, inbox_id, trigger_id, instance_id=_owner(task_id))


@app.task(name=wire.CANCEL, bind=True)
def cancel(
    self: Task,
    instance_id: str,
    *,
    inbox_id: str | None = None,
    trigger_id: str | None = None,
    audit: dict[str, Any] | None = None,
) -> str | None:
    """Terminate an instance (its waits and hold rows go with it)."""

    if audit is None and inbox_id is None and trigger_id is None:
        audit = audit_rows.by_hand("cancel", target=instance_id, instance_id=instance_id)

    def call(tid: str, now: datetime) -> Any:
        return apply_audited(instance_id, Cancel(), now, tid, inbox_id, audit)

    return _run(self, "cancel", call, inbox_id, trigger_id, instance_id=instance_id)


def apply_audited(
    instance_id: str,
    trigger: Trigger,
    now: datetime,
    tid: str,
    inbox_id: str | None,
    command: dict[str, Any] | None,
) -> Any:
    """Apply an operator's trigger and record its outcome in the audit trail
    (persistence/audit.py): ``applied`` in the same transaction as its effect (the
    Store's ``also``), ``refused`` with the reason in a transaction of its own (the
    action's was rolled back). The trigger carries the command's actor onto the
    instance's facts (the history's "cancelled by ann"). ``command`` None: sent without
    one (by a dormant older than the audit trail, or by the engine itself)."""
    if command is None:
        return store().apply(instance_id, trigger, now, trigger_id=tid, inbox_id=inbox_id)
    if command["actor"] != audit_rows.UNKNOWN_ACTOR:  # nobody known: the history names nobody
        trigger = trigger.model_copy(update={"actor": command["actor"]})

    def also(writes: Writes) -> None:
        row = audit_rows.outcome_row(command, "applied", now, instance_id=instance_id)
        writes.add_rows(audit_log, [row])

    try:
        result = store().apply(
            instance_id, trigger, now, trigger_id=tid, inbox_id=inbox_id, also=also
        )
    except DormantError as exc:
        row = audit_rows.outcome_row(
            command, "refused", now, detail=one_line(exc), instance_id=instance_id
        )
        audit_rows.record(store().engine, [row])
        raise
    if not result.changed and not result.duplicate:
        # A stale action (its wait already gone): no effect to ride with, so its own row.
        row = audit_rows.outcome_row(
            command, "applied", now, detail="nothing changed", instance_id=instance_id
        )
        audit_rows.record(store().engine, [row])
    return result


def incident_instance(incident_id: str) -> str:
    """The instance holding incident ``incident_id`` (UnknownIncident if none does)."""
    return str(store().queries.incident(incident_id).instance_id)


def _incident_task(name: str, trigger_cls: Any, op: str) -> Any:
    # ``throws``: a refused action is an expected outcome, logged without a traceback.
    @app.task(name=name, bind=True, throws=(DormantError,))
    def incident_op(
        self: Task,
        incident_id: str,
        *,
        inbox_id: str | None = None,
        trigger_id: str | None = None,
        audit: dict[str, Any] | None = None,
    ) -> str | None:
        command = audit
        if command is None and inbox_id is None and trigger_id is None:
            owner = incident_id.rsplit(".", 1)[0] if isinstance(incident_id, str) else None
            command = audit_rows.by_hand(
                f"incident_{op}", target=str(incident_id), instance_id=owner
            )

        def call(tid: str, now: datetime) -> Any:
            instance_id = incident_instance(incident_id)
            trigger = trigger_cls(incident_id=incident_id)
            return apply_audited(instance_id, trigger, now, tid, inbox_id, command)

        kind = trigger_cls.model_fields["kind"].default
        owner = incident_id.rsplit(".", 1)[0] if isinstance(incident_id, str) else None
        return _run(self, kind, call, inbox_id, trigger_id, operator=True, instance_id=owner)

    incident_op.__doc__ = f"Apply {trigger_cls.__name__} to the instance holding the incident."
    return incident_op


incident_retry = _incident_task(wire.INCIDENT_OPS["retry"], IncidentRetry, "retry")
incident_resolve = _incident_task(wire.INCIDENT_OPS["resolve"], IncidentResolve, "resolve")
incident_drop = _incident_task(wire.INCIDENT_OPS["drop"], IncidentDrop, "drop")


@app.task(name=wire.APPLY_TRIGGER, bind=True)
def apply_trigger(
    self: Task,
    instance_id: str,
    trigger_json: dict[str, Any] | str,
    trigger_id: str | None = None,
    *,
    inbox_id: str | None = None,
) -> str | None:
    """Apply any trigger to one instance: the follow-ups the outbox sends, and each
    holder's own delivery of a message or signal kept for a retry."""

    def call(tid: str, now: datetime) -> Any:
        return store().apply(
            instance_id, parse_trigger(trigger_json), now, trigger_id=tid, inbox_id=inbox_id
        )

    kind = trigger_json.get("kind") if isinstance(trigger_json, dict) else None
    return _run(
        self,
        str(kind or "trigger"),
        call,
        inbox_id,
        trigger_id,
        instance_id=instance_id,
        lane_key=f"instance {instance_id}",
    )


@app.task(name=wire.RELAY_OUTBOX, bind=True, ignore_result=True)
def relay_outbox(self: Task) -> int:
    """Sweep: publish outbox rows and re-publish inbox rows that their publisher left,
    each row on its own, only the lost ones again (tasks/sweeps.py).

    Both are idempotent on the receiving side, so sweeping a row that is being
    published right now costs a duplicate trigger, never a wrong one.
    """
    request = self.request
    return relay(own_messages=0 if request.is_eager or request.called_directly else 1)

# mypy: disable-error-code="untyped-decorator,no-untyped-call"
"""Several jobs per task: a pool process that has run a job takes the fast jobs queued
behind it, runs them too, and applies all their results in one transaction (issue 25).

Why: a job delivered by Celery costs the worker's main process a broker pop, the
unacknowledged record, the hand-over to a pool process and the acknowledgement, and
its result one commit of its own; for a job that runs in a millisecond that is most of
its cost (bench/README.md, "Several jobs per task", has the figures). Jobs taken here
cost one broker script each and share one commit.

Which jobs, so that no job waits behind another:

- a job is taken only if its type is *proven fast* in this process: each of its last
  ``FAST_RUNS`` runs here took at most ``DORMANT_JOB_BATCH_FAST_SECONDS`` (10 ms). A
  type that calls a slow service is never taken ahead; its jobs come one per task;
- a batch takes, in one script, such jobs among the next ``LOOK_AHEAD`` (32) queued
  messages, at most ``DORMANT_JOB_BATCH_MAX`` - 1: only what is queued when it begins,
  never a job that arrives while it runs. A message it does not take (a trigger, a job
  of another type, a redelivery, a message with an ETA, an expiry or a time limit of
  its own) keeps its place, for the worker's next delivery, never moved behind the
  backlog (tasks/redis_transport.py ``take_queued``);
- a taken job whose turn comes after ``DORMANT_JOB_BATCH_SECONDS`` (50 ms), or whose
  type has just run slow, is given back unrun;
- so the results taken first wait at most the run of the jobs after them: a few tens
  of milliseconds, unless a proven-fast type suddenly stalls (documented in
  docs/internals.md with its bound, the running task's time limit).

How, in order:

1. The first job is a Celery task like any other. Its outcome reaches ``report``
   (tasks/job_results.py), which hands it here when the job came through the broker
   from the ``dormant`` queue of the default tenant, on Redis and PostgreSQL, with task
   events off (Flower lists each job as the task that ran it). A trigger task comes in
   too, at its end (``may_take_after``), with no outcome of its own: under load the
   jobs its triggers just published are still queued, and taken here they wait for no
   other delivery.
2. Each taken message is listed as held by this process (the trigger batches'
   registry, tasks/drain.py: a process killed mid-batch has them given back), then run
   through Celery's tracer as the pool runs a task: the same signals, the same checks
   of its result (tasks/job_task.py), its outcome reported through ``report``, which
   adds it to the batch instead of applying it.
3. The outcomes are applied in ONE transaction, sorted by instance (the lock order of
   every batch), each in its own savepoint (persistence/savepoints.py). What one of
   them raises rolls back its savepoint only; that outcome then goes the single way
   (``report``'s retries, deferral or a kept failed trigger), as does every outcome of
   a batch whose commit failed: an outcome applied twice is stale the second time
   (its wait's attempt is over), never applied twice.
4. After the commit each applied outcome's outbox rows are published, and every taken
   message is acknowledged; the first job's message is acknowledged by Celery when
   its task returns (acks late).

What a crash costs: nothing is acknowledged before the commit. A taken message not yet
acknowledged is delivered again (at once, given back by the next pool process; else
after the visibility timeout) and its job runs again: jobs are at-least-once
(tasks/jobs.py), and the repeated result is stale.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from billiard.process import current_process
from celery.app.trace import trace_task_ret
from celery.signals import task_postrun, task_prerun

from dormant.engine_core.tenants import DEFAULT_TENANT
from dormant.persistence import clock, savepoints
from dormant.tasks import app as app_module
from dormant.tasks import drain, wire
from dormant.tasks.app import QUEUE, app, store
from dormant.tasks.job_headers import HEADER_TENANT, job_context, read_header
from dormant.tasks.lanes import QUARANTINE_KEY_PREFIX
from dormant.tasks.redis_transport import take_queued

__all__ = [
    "FAST_RUNS",
    "Outcome",
    "collect",
    "finished",
    "may_batch",
    "may_take_after",
    "run_batch",
]

log = logging.getLogger("dormant.jobs")

# A type is taken ahead once each of its last FAST_RUNS runs in this process took at
# most ``DORMANT_JOB_BATCH_FAST_SECONDS`` (its body and the check of its result).
FAST_RUNS = 3


@dataclass(frozen=True, slots=True)
class Outcome:
    """A job's outcome on its way to its instance: the arguments of ``report``."""

    instance_id: str
    trigger: Any
    trigger_id: str


Applied = Callable[[Outcome, Any, float], None]
Alone = Callable[[Outcome], None]


class _Batch(threading.local):
    outcomes: list[Outcome] | None = None
    started: dict[str, float]

    def __init__(self) -> None:
        self.started = {}


_batch = _Batch()
# job type -> how long its last runs in this process took
_recent: dict[str, collections.deque[float]] = collections.defaultdict(
    lambda: collections.deque(maxlen=FAST_RUNS)
)


@task_prerun.connect(weak=False)
def _started(sender: Any = None, task_id: str | None = None, **_: Any) -> None:
    if task_id and job_context(sender) is not None:
        _batch.started[task_id] = time.perf_counter()


@task_postrun.connect(weak=False)
def _ended(task_id: str | None = None, **_: Any) -> None:
    """A job with no outcome (a Celery retry) leaves no start time behind."""
    if task_id:
        _batch.started.pop(task_id, None)


def finished(task: Any) -> None:
    """The job ``task`` runs has its outcome: remember how long it took."""
    began = _batch.started.pop(str(getattr(task.request, "id", "")), None)
    if began is not None:
        _recent[str(task.name)].append(time.perf_counter() - began)


def _proven_fast() -> list[str]:
    """The job types this process may take ahead (see the module docstring): no time
    limit of their own either, which a job run inside another's task would not keep."""
    names = []
    fast = app_module.settings.job_batch_fast_seconds
    # Copies: a thread pool's other threads add runs meanwhile.
    for name, kept in list(_recent.items()):
        runs = tuple(kept)
        if len(runs) < FAST_RUNS or max(runs) > fast:
            continue
        task = app.tasks.get(name)
        if task is None or task.time_limit or task.soft_time_limit:
            continue
        names.append(name)
    return names


def collect(outcome: Outcome) -> bool:
    """Add ``outcome`` to the batch running on this thread, if one is."""
    outcomes = _batch.outcomes
    if outcomes is None:
        return False
    outcomes.append(outcome)
    return True


def may_batch(task: Any) -> bool:
    """Does the job ``task`` runs start a batch? (The conditions of step 1.)"""
    if task is None or not _may_take(task.request):
        return False
    request = task.request
    if (read_header(request, HEADER_TENANT) or DEFAULT_TENANT) != DEFAULT_TENANT:
        return False
    info = request.delivery_info or {}
    return info.get("exchange") == QUEUE.exchange.name and info.get(
        "routing_key"
    ) == wire.job_routing_key(str(task.name))


def may_take_after(task: Any) -> bool:
    """May the trigger task ``task``, its triggers applied and their jobs published, run
    the fast jobs queued now (step 1's other way in)? Under load those are the jobs it
    just published: run here they wait for no other delivery, where each would wait its
    turn at the worker behind the queue. Not in a task replayed inside a batch of
    triggers (the task that took them runs it once, at its end), not on the quarantine
    lane, and only on a worker that reads the ``dormant`` queue."""
    if task is None or not _may_take(task.request) or drain.in_batch():
        return False
    routing_key = str((task.request.delivery_info or {}).get("routing_key") or "")
    if routing_key.startswith(QUARANTINE_KEY_PREFIX):
        return False
    return QUEUE.name in app.amqp.queues.consume_from


def _may_take(request: Any) -> bool:
    """What every batch of jobs needs: batches on, PostgreSQL, a worker's delivery, task
    events off, and no transaction or batch of triggers already open on this thread."""
    settings = app_module.settings
    if settings.job_batch_max <= 1 or not store().is_postgres:
        return False
    if request.is_eager or request.called_directly or app.conf.worker_send_task_events:
        return False
    return savepoints.joined(store().engine) is None and not drain.collecting()


def run_batch(first: Outcome | None, applied: Applied, alone: Alone) -> None:
    """Take and run the fast jobs queued now, then apply ``first`` (None for a trigger
    task's: ``may_take_after``) and their outcomes together; ``applied`` finishes an
    outcome its savepoint committed, ``alone`` reports one the single way."""
    taken: list[Any] = []
    _batch.outcomes = outcomes = [] if first is None else [first]
    try:
        _take_and_run(outcomes, taken)
        _batch.outcomes = None
        if len(outcomes) == 1:
            alone(outcomes[0])
        elif outcomes:
            _apply_together(outcomes, applied, alone)
    except BaseException:
        # The process is being ended (a time limit's SIGTERM), or reporting failed
        # past every fallback: the jobs taken go back to the broker and run again
        # (at-least-once), so none is acknowledged without its result.
        for message in taken:
            drain._give_back(message)
        raise
    else:
        drain.acknowledge(taken)
    finally:
        _batch.outcomes = None
        drain._forget(taken)


def _take_and_run(outcomes: list[Outcome], taken: list[Any]) -> None:
    """Take the fast jobs queued now, in one script, and run them one after the other.
    Only what is queued when the batch begins: a job that arrives meanwhile waits for
    the next delivery, so no result here waits for jobs that were not there yet. A job
    whose turn comes after the batch's time is up, or whose type has just run slow, is
    given back unrun (a redelivery: a task of its own)."""
    names = _proven_fast()
    if not names or _retiring():
        return
    settings = app_module.settings
    try:
        found = take_queued(drain._channel(), QUEUE.name, names, settings.job_batch_max - 1)
    except Exception:
        log.warning("the queue could not be polled for more jobs", exc_info=True)
        drain._reset()
        return
    if not found:
        return
    taken.extend(found)
    drain._remember(taken)
    began = time.perf_counter()
    for i, message in enumerate(found):
        late = time.perf_counter() - began >= settings.job_batch_seconds
        if late or _retiring() or message.headers.get("task") not in _proven_fast():
            for unrun in found[i:]:
                taken.remove(unrun)
                drain._give_back(unrun)
            return
        try:
            _run(message)
        except Exception:
            # Not the job's own failure (the tracer reports that) but its message's,
            # e.g. a body that does not decode: Celery's worker runs it as a task of its
            # own and handles it as it would any.
            log.warning("a taken job could not be run; it goes back", exc_info=True)
            taken.remove(message)
            drain._give_back(message)


def _run(message: Any) -> None:
    """Run a taken job as the pool runs a task (celery/worker/request.py builds the same
    request), through Celery's tracer: its signals, result checks and failure handling."""
    headers = dict(message.headers or {})
    properties = message.properties or {}
    info = message.delivery_info or {}
    request = {
        **headers,
        "properties": properties,
        "reply_to": properties.get("reply_to"),
        "correlation_id": properties.get("correlation_id"),
        "delivery_info": {
            "exchange": info.get("exchange"),
            "routing_key": info.get("routing_key"),
            "priority": properties.get("priority"),
            "redelivered": False,
        },
    }
    trace_task_ret(
        headers["task"],
        headers["id"],
        request,
        message.body,
        message.content_type,
        message.content_encoding,
        app=app,
    )


def _apply_together(outcomes: list[Outcome], applied: Applied, alone: Alone) -> None:
    now = clock.now()
    done: list[tuple[Outcome, Any, float]] = []
    refused: list[Outcome] = []
    try:
        with savepoints.one_transaction(store().engine) as conn:
            for outcome in sorted(outcomes, key=lambda o: o.instance_id):
                began = time.perf_counter()
                try:
                    result = store().apply(
                        outcome.instance_id, outcome.trigger, now, trigger_id=outcome.trigger_id
                    )
                except Exception:
                    if conn.invalidated:
                        raise  # the connection was lost: nothing of the batch commits
                    refused.append(outcome)  # rolled back to its savepoint; the single way
                    continue
                done.append((outcome, result, time.perf_counter() - began))
    except Exception:
        log.warning("a batch of %s job results not committed", len(outcomes), exc_info=True)
        for outcome in outcomes:
            alone(outcome)
        return
    log.info("batch of %s job results applied in one transaction", len(outcomes))
    for outcome, result, seconds in done:
        applied(outcome, result, seconds)
    for outcome in refused:
        alone(outcome)


def _retiring() -> bool:
    """Has this pool process asked to be replaced (tasks/job_task.py)? Then it runs no
    more jobs."""
    worker = getattr(current_process(), "_target", None)
    event = getattr(worker, "_shutdown", None)
    return bool(event is not None and hasattr(event, "is_set") and event.is_set())

"""Prometheus metrics: every family dormant exposes, and how a scrape is served.

Two kinds of numbers, two mechanisms:

* **Events** (triggers applied, apply time, row-lock waits, incidents raised, jobs
  dispatched / failed / timed out, timer lateness) are counters and histograms updated
  by one-line calls at the shell's seams. A prefork worker runs its tasks in pool
  children, so these use prometheus-client's multiprocess mode: ``dormant worker
  --metrics-port N`` points ``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory *before*
  anything creates a metric, every child writes its values into its own file there,
  and the parent's HTTP endpoint sums them at scrape time. A child replaced by the
  pool keeps counting in the total (its file stays), so counters never go backwards.
  One port per worker, not per child: children come and go, a port must not.
  (The directory is prepared by the CLI, before prometheus-client is first imported.)
* **Database state** (deadline backlog, open incidents, inbox and outbox backlog and
  their oldest age) is read by ``DatabaseCollector`` at scrape time, with a
  connection of its own that is never pooled (so nothing of it is inherited by a
  forked child). Every process that serves ``/metrics`` reports the same state; an
  alert aggregates with ``max``. A database that does not answer makes the scrape
  report ``dormant_database_up 0``, never an error page.

Labels are bounded by deployments, never by traffic: trigger kind and outcome (fixed
sets), process key, node id and job type (from deployed models). Never an instance id.
The reference, with example alerts, is docs/metrics.md.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    make_asgi_app,
    multiprocess,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from sqlalchemy import create_engine, func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from dormant.engine_core.checkpoint import IncidentState
from dormant.engine_core.errors import DormantError
from dormant.persistence import clock
from dormant.persistence import store as store_module
from dormant.persistence.parked import count_parked
from dormant.persistence.results import TriggerResult, raised_incidents
from dormant.persistence.settings import Settings
from dormant.persistence.store import Applied
from dormant.persistence.tables import (
    deadlines,
    inbox,
    job_flow_keys,
    job_flow_types,
    outbox,
    start_timers,
)
from dormant.persistence.tables import incidents as incident_table
from dormant.tasks import tracing

__all__ = [
    "BATCH_COLLECT",
    "CONSOLE_SIGN_IN_LOCKOUTS",
    "DatabaseCollector",
    "applied_of",
    "asgi_app",
    "console_route",
    "incident_head",
    "job_dispatched",
    "job_failed",
    "observe_trigger",
    "outcome_of",
    "record_refusal",
    "record_trigger",
    "registry",
    "serve",
    "summary",
    "timer_fired",
]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Seconds: from a millisecond trigger to one stuck behind a long lock.
_APPLY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Timer lateness is measured against a 1 s beat: the targets are p99 <= 1 s.
_LATENESS_BUCKETS = (0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0, 300.0)

TRIGGERS_APPLIED = Counter(
    "dormant_triggers_applied",
    "Trigger tasks finished, by trigger kind and outcome.",
    ["kind", "outcome"],
)
APPLY_SECONDS = Histogram(
    "dormant_trigger_apply_duration_seconds",
    "Time to apply one trigger: its transaction(s), before the outbox is published.",
    ["kind"],
    buckets=_APPLY_BUCKETS,
)
LOCK_WAIT_SECONDS = Histogram(
    "dormant_row_lock_wait_seconds",
    "Time from asking for an instance's row lock to holding it (the row read included).",
    buckets=_APPLY_BUCKETS,
)
INCIDENTS_RAISED = Counter(
    "dormant_incidents_raised",
    "Incidents raised by committed triggers, by process key and node.",
    ["process", "node"],
)
JOBS_DISPATCHED = Counter(
    "dormant_jobs_dispatched", "Jobs published to the broker, by job type.", ["job_type"]
)
JOBS_FAILED = Counter(
    "dormant_jobs_failed",
    "Jobs whose final failure (after Celery's own retries) was reported, by job type.",
    ["job_type"],
)
JOBS_RATE_LIMITED = Counter(
    "dormant_jobs_rate_limited",
    "Jobs that raised RateLimited: put back to wait, no retry consumed (docs/flow-control.md).",
    ["job_type"],
)
JOBS_TIMED_OUT = Counter(
    "dormant_jobs_timed_out",
    "Jobs with no result within their timeout, dispatched again, by job type.",
    ["job_type"],
)
CONSOLE_SIGN_IN_LOCKOUTS = Counter(
    "dormant_console_sign_in_lockouts",
    "Sign-in lockouts of the console, per client address or of every sign-in (global).",
    ["scope"],
)
TIMER_LATENESS = Histogram(
    "dormant_timer_lateness_seconds",
    "Fire time minus due time of every deadline fired (timers, job timeouts, retries).",
    buckets=_LATENESS_BUCKETS,
)

store_module.LOCK_WAIT_OBSERVERS.append(LOCK_WAIT_SECONDS.observe)


# -- outcomes --------------------------------------------------------------------------


def applied_of(result: TriggerResult | None) -> list[Applied]:
    """Every committed step of a task's result (one, a Router's fan-out, a deadline fire)."""
    return [] if result is None else result.steps


def outcome_of(result: TriggerResult | None) -> str:
    """One word for what a trigger did (the ``outcome`` label; docs/metrics.md)."""
    return "none" if result is None else result.outcome


def _outcome_of_exception(exc: BaseException) -> str:
    """The shell's own mapping (tasks/triggers.py), seen from outside it."""
    if isinstance(exc, DormantError):
        return "refused"
    if isinstance(exc, OperationalError):
        return "retry"
    return "error"


def incident_head(steps: list[Applied]) -> str:
    """``INCIDENT <id> at <node> (<cause class>); ... `` for the incidents ``steps``
    raised, or nothing: the word Flower's search finds (docs/incidents.md)."""
    parts: list[str] = []
    for a in steps:
        for d in raised_incidents(a):
            parts.append(f"{d.get('incident')} at {d.get('node')} ({d.get('cause_class')})")
    return f"INCIDENT {'; '.join(parts)} " if parts else ""


def summary(result: TriggerResult | None) -> str:
    """The trigger task's return value, which Flower shows in its task list.

    A trigger that raised an incident starts with ``INCIDENT`` and names each one (id,
    node, cause class): the task itself succeeded — the trigger was applied and the
    incident is the model's outcome — so the result is where Flower can show it
    (docs/incidents.md). Ids and classes only, never a variable value.
    """
    head = incident_head(applied_of(result))
    return (
        head
        + outcome_of(result)
        + "".join(
            f" instance={a.instance_id} revision={a.revision}" for a in applied_of(result)[:5]
        )
    )


def record_trigger(kind: str, result: TriggerResult | None, seconds: float | None = None) -> str:
    """Count one finished trigger and what its committed step(s) raised and timed out."""
    outcome = outcome_of(result)
    TRIGGERS_APPLIED.labels(kind, outcome).inc()
    tracing.annotate(outcome, applied_of(result))
    if seconds is not None:
        APPLY_SECONDS.labels(kind).observe(seconds)
    for a in applied_of(result):
        if not a.changed:
            continue
        for d in raised_incidents(a):
            INCIDENTS_RAISED.labels(a.key or "", str(d.get("node") or "")).inc()
        for f in a.facts:
            if f.kind == "JobTimedOut":
                JOBS_TIMED_OUT.labels(str(f.details.get("job_type") or "")).inc()
    return outcome


# The request attribute that marks a batch's first pass over a taken trigger.
BATCH_COLLECT = "dormant_batch_collect"


def record_refusal(kind: str, exc: BaseException) -> None:
    """Count one trigger whose apply raised (the shell then retries or keeps it)."""
    outcome = _outcome_of_exception(exc)
    TRIGGERS_APPLIED.labels(kind, outcome).inc()
    tracing.annotate(outcome, [])


def observe_trigger(run: Callable[..., None]) -> Callable[..., str | None]:
    """Wrap the trigger tasks' shell (``tasks.triggers._run``): time the apply, count
    its outcome, open its trace span around the whole task (so what it publishes after
    commit carries the trace), and return the summary Flower shows.

    The shell's ``call`` is wrapped to see its result or exception: the shell itself
    maps exceptions (retry, drop, re-raise) and must keep doing so unchanged.
    """

    @functools.wraps(run)
    def wrapper(
        task: Any, kind: str, call: Callable[[str, datetime], Any], *a: Any, **kw: Any
    ) -> str | None:
        if getattr(task.request, BATCH_COLLECT, False):
            # A batch's first pass over a taken trigger (tasks/drain.py): it only hands
            # its call over; its span and count come with the pass after the commit.
            run(task, kind, call, *a, **kw)
            return None
        seen: dict[str, Any] = {}

        def watched(tid: str, now: datetime) -> Any:
            began = time.perf_counter()
            try:
                seen["result"] = call(tid, now)
            except BaseException as exc:
                seen["error"] = exc
                raise
            finally:
                seen["seconds"] = time.perf_counter() - began
            return seen["result"]

        with tracing.trigger_span(kind, task.request):
            try:
                run(task, kind, watched, *a, **kw)
            finally:
                if "error" in seen:
                    record_refusal(kind, seen["error"])
                elif "result" in seen:
                    record_trigger(kind, seen["result"], seen["seconds"])
        return summary(seen.get("result")) if "error" not in seen else None

    return wrapper


def job_dispatched(job_type: str) -> None:
    JOBS_DISPATCHED.labels(job_type).inc()


def job_rate_limited(job_type: str) -> None:
    JOBS_RATE_LIMITED.labels(job_type).inc()


def job_failed(job_type: str) -> None:
    JOBS_FAILED.labels(job_type).inc()


def timer_fired(due_at: str | None, now: datetime, status: str) -> None:
    """Lateness of a fired deadline (``due_at`` as the scan claimed it, ISO text)."""
    if due_at is None or status != "fired":
        return
    try:
        due = datetime.fromisoformat(due_at)
    except ValueError:
        return
    TIMER_LATENESS.observe(max(0.0, (now - due).total_seconds()))


# -- database state, read at scrape time ---------------------------------------------

# The most keys of flow-controlled job types one scrape reports (docs/flow-control.md).
_FLOW_KEYS = 50


class DatabaseCollector(Collector):
    """Gauges that are database state, one short read transaction per scrape."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._engine: Any = None

    def _connect(self) -> Any:
        if self._engine is None:
            self._engine = create_engine(self.database_url, poolclass=NullPool)
        return self._engine.connect()

    def describe(self) -> Iterable[Metric]:
        return []  # collected lazily: registering must not query the database

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("dormant_database_up", "1 if the last scrape read the database.")
        try:
            families = self._read()
        except Exception:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _read(self) -> list[Metric]:
        now = clock.now()

        def age(oldest: datetime | None) -> float:
            if oldest is None:
                return 0.0
            if oldest.tzinfo is None:  # SQLite through a plain engine: stored as UTC
                oldest = oldest.replace(tzinfo=UTC)
            return max(0.0, (now - oldest).total_seconds())

        def count(conn: Any, table: Any, *where: Any) -> int:
            return int(
                conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one()
            )

        with self._connect() as conn:
            due = count(conn, deadlines, deadlines.c.due_at <= now) + count(
                conn, start_timers, start_timers.c.due_at <= now
            )
            waiting = count(conn, deadlines) + count(conn, start_timers)
            open_rows = conn.execute(
                select(
                    incident_table.c.process_key,
                    incident_table.c.node_id,
                    incident_table.c.tenant_id,
                    func.count(),
                )
                .where(incident_table.c.state == IncidentState.OPEN.value)
                .group_by(
                    incident_table.c.process_key,
                    incident_table.c.node_id,
                    incident_table.c.tenant_id,
                )
            ).all()
            inbox_backlog, inbox_oldest = conn.execute(
                select(func.count(), func.min(inbox.c.created_at)).where(
                    inbox.c.processed_at.is_(None)
                )
            ).one()
            unpublished = count(conn, outbox, outbox.c.published_at.is_(None))
            outbox_all, outbox_oldest = conn.execute(
                select(func.count(), func.min(outbox.c.created_at))
            ).one()
            parked_rows = count_parked(conn)
            flow_types = conn.execute(
                select(
                    job_flow_types.c.job_type,
                    job_flow_types.c.running,
                    job_flow_types.c.waiting,
                    job_flow_types.c.paused_until,
                )
            ).all()
            # keys: only those with jobs out, waiting or paused, the busiest first, and at
            # most _FLOW_KEYS of them (a key is data, e.g. a customer id: unbounded)
            flow_keys = conn.execute(
                select(
                    job_flow_keys.c.job_type,
                    job_flow_keys.c.flow_key,
                    job_flow_keys.c.running,
                    job_flow_keys.c.waiting,
                    job_flow_keys.c.paused_until,
                )
                .where(
                    (job_flow_keys.c.running > 0)
                    | (job_flow_keys.c.waiting > 0)
                    | (job_flow_keys.c.paused_until > now)
                )
                .order_by((job_flow_keys.c.running + job_flow_keys.c.waiting).desc())
                .limit(_FLOW_KEYS)
            ).all()

        def gauge(name: str, doc: str, value: float) -> Metric:
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], value)
            return g

        incidents_open = GaugeMetricFamily(
            "dormant_incidents_open",
            "Incidents in state open (not retry_scheduled, not closed), by process and node.",
            labels=["process", "node"],
        )
        # A process id belongs to one tenant, so (process, node) never spans two.
        by_tenant: dict[str, int] = {}
        for key, node, tenant, n in open_rows:
            incidents_open.add_metric([key, node], n)
            by_tenant[tenant] = by_tenant.get(tenant, 0) + int(n)
        tenant_incidents = GaugeMetricFamily(
            "dormant_tenant_incidents_open",
            "Incidents in state open, by tenant (docs/tenants.md).",
            labels=["tenant"],
        )
        for tenant, n in sorted(by_tenant.items()):
            tenant_incidents.add_metric([tenant], n)
        outbox_backlog = GaugeMetricFamily(
            "dormant_outbox_backlog",
            "Outbox rows not yet acknowledged: unpublished, or published and not consumed.",
            labels=["state"],
        )
        outbox_backlog.add_metric(["unpublished"], unpublished)
        outbox_backlog.add_metric(["unconsumed"], int(outbox_all) - unpublished)
        sweep_parked = GaugeMetricFamily(
            "dormant_sweep_rows_parked",
            "Inbox and outbox rows a sweep could not process, parked with their error "
            "(`dormant triggers parked`), by table.",
            labels=["table"],
        )
        for table, n in sorted(parked_rows.items()):
            sweep_parked.add_metric([table], n)
        flow = {
            name: GaugeMetricFamily(f"dormant_job_flow_{name}", doc, labels=["job_type", "key"])
            for name, doc in (
                ("running", "Jobs out under flow control (holding a slot), by type and key."),
                ("waiting", "Jobs waiting for a slot, a token or a pause's end."),
                ("paused_seconds", "Seconds left of a RateLimited pause (0: not paused)."),
            )
        }

        def paused_left(until: datetime | None) -> float:
            if until is None:
                return 0.0
            if until.tzinfo is None:  # SQLite through a plain engine: stored as UTC
                until = until.replace(tzinfo=UTC)
            return max(0.0, (until - now).total_seconds())

        # the type's own line has key "" and holds the totals
        for t in flow_types:
            flow["running"].add_metric([t.job_type, ""], t.running)
            flow["waiting"].add_metric([t.job_type, ""], t.waiting)
            flow["paused_seconds"].add_metric([t.job_type, ""], paused_left(t.paused_until))
        for k in flow_keys:
            label = k.flow_key or "(none)"
            flow["running"].add_metric([k.job_type, label], k.running)
            flow["waiting"].add_metric([k.job_type, label], k.waiting)
            flow["paused_seconds"].add_metric([k.job_type, label], paused_left(k.paused_until))
        return [
            *flow.values(),
            gauge("dormant_deadlines_due", "Deadlines due and not yet fired (the backlog).", due),
            gauge(
                "dormant_deadlines_waiting",
                "Deadline rows held (timers, job timeouts, retries, start timers).",
                waiting,
            ),
            incidents_open,
            tenant_incidents,
            gauge(
                "dormant_inbox_backlog",
                "Producer triggers written and not yet processed.",
                int(inbox_backlog),
            ),
            gauge(
                "dormant_inbox_oldest_age_seconds",
                "Age of the oldest unprocessed inbox row (0 if none).",
                age(inbox_oldest),
            ),
            outbox_backlog,
            sweep_parked,
            gauge(
                "dormant_outbox_oldest_age_seconds",
                "Age of the oldest outbox row (0 if none).",
                age(outbox_oldest),
            ),
        ]


# -- serving -----------------------------------------------------------------------------


def registry(database_url: str | None = None) -> CollectorRegistry:
    """What a ``/metrics`` endpoint serves: this process's (or, in multiprocess mode,
    all pool children's) event metrics, plus the database state."""
    if database_url is None:
        database_url = Settings.from_env().database_url
    if os.environ.get(MULTIPROC_ENV):
        reg = CollectorRegistry()
        multiprocess.MultiProcessCollector(reg)  # type: ignore[no-untyped-call]
    else:
        reg = CollectorRegistry()
        reg.register(_Forward(REGISTRY))
    reg.register(DatabaseCollector(database_url))
    return reg


class _Forward(Collector):
    """This process's default registry inside another registry (single-process mode)."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        yield from self.source.collect()


def serve(port: int, host: str = "0.0.0.0", database_url: str | None = None) -> None:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread (the worker's parent)."""
    start_http_server(port, addr=host, registry=registry(database_url))


def console_route(database_url: str | None = None) -> Any:
    """The console's ``/metrics`` (a Starlette route): the scrape's database read runs
    in a thread, off the console's event loop."""
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    served = registry(database_url)

    async def metrics(request: Request) -> Response:
        body = await run_in_threadpool(generate_latest, served)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return Route("/metrics", metrics)


def asgi_app(database_url: str | None = None) -> Any:
    """An ASGI app answering ``/metrics``, for the console (or any ASGI server) to mount."""
    return make_asgi_app(registry(database_url))

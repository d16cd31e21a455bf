# mypy: disable-error-code="untyped-decorator,no-untyped-call"
"""The Celery app ``app`` and everything about how dormant uses the broker.

Why each setting is what it is (bench/README.md has the measurements):

* ``task_acks_late`` + ``task_reject_on_worker_lost``: a trigger is acknowledged only
  after its transaction committed; a killed pool child's trigger is requeued, never
  acknowledged as failed. Triggers are idempotent (trigger ids), so running one twice
  is harmless, losing one is not.
* ``worker_prefetch_multiplier=1``: a worker holds at most one unstarted trigger per
  process, so a dead worker strands as little as possible.
* Redis ``visibility_timeout=60`` (``DORMANT_REDIS_VISIBILITY_TIMEOUT``) with
  ``unacked_restore_interval=1`` and ``unacked_restore_throttle=1``: when a whole
  worker dies, Redis hands its unacked triggers back after about a minute (the kombu
  defaults make it an hour and ~100 s).
  The price: a trigger running longer than 60 s is delivered again; ours take
  milliseconds, and a user's long job must be idempotent anyway (at-least-once).
* JSON only: triggers and job arguments are JSON documents, never pickles.
* One topic exchange ``dormant`` with one queue ``dormant`` bound to ``trigger.#``,
  ``message.#``, ``signal.#`` and ``job.#``. Every publish names both the queue and a
  *dotted* routing key: on Redis a publish that names only an exchange is silently
  dropped, and ``trigger.#`` does not match a bare ``trigger``.
* Timers have a queue of their own, ``dormant.timers`` (``TIMER_QUEUE``), bound to
  ``timer.#`` only: beat's deadline scan (``timer.scan``) and every fire it claims
  (``timer.fire``) travel there, so a backlog of other triggers in ``dormant`` never
  stands in front of a timer. The prefix is new on purpose: bindings outlive a release
  in a deployed broker (Redis keeps them in ``_kombu.binding.dormant``), and the
  ``dormant`` queue's ``trigger.#`` still catches the old ``trigger.timer`` /
  ``trigger.scan_deadlines`` keys, so a ``trigger.``-key bound to the new queue would be
  delivered to both. Messages queued under the old keys before an upgrade are the same
  tasks in the ``dormant`` queue and are applied as before.
* ``dormant worker`` reads ``dormant.timers`` first, then ``dormant``, then ``celery``.
  The order matters little on Redis: the transport rotates the queue it just took
  from to the end of its BRPOP list, so with a backlog in ``dormant`` a worker
  alternates, and a queued scan or fire is taken by the first or second pool process
  that frees up (docs/waits.md). A worker of its own (``--queues dormant.timers``) is the
  punctual option: no backlog trigger at all in front of a timer.

* Workers also read Celery's default queue ``celery`` (``PLAIN_QUEUE``, declared as
  Celery declares it: direct exchange ``celery``, routing key ``celery``). A producer
  with only Celery installed and no dormant configuration, as the docs show it
  (``Celery(broker=...).send_task("dormant.incident.retry", args=[id])``), publishes
  there; without it the operator's call would sit in a queue nobody reads. A message
  there naming a task this worker lacks is rejected with Celery's error line, so keep
  other Celery applications off dormant's broker database / vhost.

Worker start-up refuses an un-migrated PostgreSQL database with ``NotMigrated``; the
embedded SQLite default migrates itself.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from celery import Celery
from celery.app import trace as celery_trace
from celery.signals import beat_init, worker_init, worker_process_init
from kombu.connection import Connection
from kombu.entity import Exchange, Queue, binding
from kombu.pools import producers
from kombu.transport import sqlalchemy as sqla_transport

from dormant.engine_core.errors import DormantError
from dormant.engine_core.feel import syntax as feel_syntax
from dormant.persistence import clock, migrate, sqlite_forks
from dormant.persistence.settings import Settings
from dormant.persistence.store import Store
from dormant.tasks import embedded_broker, lanes, priorities, quiet_logs, wire
from dormant.tasks.job_task import JobTask
from dormant.tasks.tracing import publish_headers

__all__ = [
    "BINDING_KEYS",
    "EXCHANGE",
    "MAIN_LANE_QUEUES",
    "PLAIN_QUEUE",
    "QUARANTINE_QUEUE",
    "QUEUE",
    "REDIS_VISIBILITY_TIMEOUT",
    "TIMER_BINDING_KEYS",
    "TIMER_FIRE_KEY",
    "TIMER_KEY_PREFIX",
    "TIMER_QUEUE",
    "TIMER_SCAN_KEY",
    "WORKER_QUEUES",
    "after_publishing",
    "app",
    "broker_transport",
    "configure",
    "ensure_database",
    "pooled_producer",
    "producer_connection",
    "publish",
    "publishing_together",
    "queue_for",
    "settings",
    "store",
]

log = logging.getLogger("dormant.tasks")

# Celery's success line prints the task's return value: for a job that is the user's
# payload. Payload values never go into our logs, so the line names the task only.
celery_trace.LOG_SUCCESS = "Task %(name)s[%(id)s] succeeded in %(runtime)ss"

EXCHANGE = Exchange("dormant", type="topic", durable=True)
BINDING_KEYS = ("trigger.#", "message.#", "signal.#", "job.#")
QUEUE = Queue(
    "dormant",
    exchange=EXCHANGE,
    bindings=[binding(EXCHANGE, routing_key=key) for key in BINDING_KEYS],
    durable=True,
)
# The timers' own queue: beat's scan and the fires it claims (see the module docstring
# for why the prefix is ``timer.``, never ``trigger.``).
TIMER_KEY_PREFIX = "timer."
TIMER_BINDING_KEYS = (f"{TIMER_KEY_PREFIX}#",)
TIMER_QUEUE = Queue(
    "dormant.timers",
    exchange=EXCHANGE,
    bindings=[binding(EXCHANGE, routing_key=key) for key in TIMER_BINDING_KEYS],
    durable=True,
)
TIMER_SCAN_KEY = f"{TIMER_KEY_PREFIX}scan"
TIMER_FIRE_KEY = f"{TIMER_KEY_PREFIX}fire"
# The quarantine lane's queue (tasks/lanes.py): what a main-lane worker moved out of its
# way, under ``quarantine.`` + the trigger's own key, which no other binding matches.
QUARANTINE_QUEUE = Queue(
    "dormant.quarantine",
    exchange=EXCHANGE,
    bindings=[binding(EXCHANGE, routing_key=f"{lanes.QUARANTINE_KEY_PREFIX}#")],
    durable=True,
)
# Celery's default queue, where a bare ``send_task`` from a plain Celery app lands.
PLAIN_QUEUE = Queue("celery", Exchange("celery", type="direct"), routing_key="celery")
# What ``dormant worker`` and ``dormant dev`` consume unless ``--queues`` or ``--lane``
# says otherwise: the timers first (a worker taking from several queues starts with the
# first), the quarantine lane's last.
MAIN_LANE_QUEUES = f"{TIMER_QUEUE.name},{QUEUE.name},{PLAIN_QUEUE.name}"
WORKER_QUEUES = f"{MAIN_LANE_QUEUES},{QUARANTINE_QUEUE.name}"
# Seconds before Redis redelivers a task whose worker died without acknowledging it
# (the default of the ``DORMANT_REDIS_VISIBILITY_TIMEOUT`` setting).
REDIS_VISIBILITY_TIMEOUT = Settings.model_fields["redis_visibility_timeout"].default
# How often beat scans the deadline table, and sweeps the outbox and inbox. Every half
# second: a timer waits for the next tick (up to this long) before anything else, and
# with its fires batched on a queue of its own the tick was what kept p99 lateness
# above 1 s under load (bench/README.md, bench_lateness); an idle scan is one index
# range read that claims nothing, twice a second.
SCAN_DEADLINES_EVERY = 0.5
RELAY_OUTBOX_EVERY = 3.0
# How often beat looks for a bulk batch that nobody runs (never started, worker died).
BATCH_SWEEP_EVERY = 5.0
# How often beat deletes processed trigger ids past their retention (persistence/processed.py).
PROCESSED_SWEEP_EVERY = 60.0
# How often beat grants waiting jobs no finished job will (docs/flow-control.md): the
# lag of a job behind a RateLimited pause, a token bucket or a raised limit.
FLOW_SWEEP_EVERY = 0.5
# A periodic sweep queued behind a backlog (workers down or busy) is stale by the time a
# worker reaches it, and the next tick sends a fresh one: each expires after a few of its
# own periods, and a worker discards it unrun, so a backlog never multiplies the sweeps'
# work (the deadline scan has a queue of its own and is never behind one). Never sooner
# than a minute: Celery compares beat's expiry with the worker's own clock, and a host
# clock a few seconds off must not discard every sweep.
SWEEP_EXPIRES_PERIODS = 4
SWEEP_EXPIRES_AT_LEAST_SECONDS = 60.0


def _sweep_expires(every: float) -> float:
    """Seconds after which a sweep sent every ``every`` seconds is discarded unrun."""
    return max(SWEEP_EXPIRES_PERIODS * every, SWEEP_EXPIRES_AT_LEAST_SECONDS)


_REDIS_SCHEMES = ("redis://", "rediss://", "redis+socket://")


def _transport_options(broker_url: str, visibility_timeout: float) -> dict[str, Any]:
    """Redis: recover a dead worker's triggers in about a minute, not an hour.

    Only for Redis: the ``sqla+`` transport hands its options to ``create_engine``,
    which refuses unknown keywords.
    """
    if broker_url.startswith(_REDIS_SCHEMES):
        return {
            "visibility_timeout": visibility_timeout,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        }
    if broker_url.startswith("sqla+"):
        # The sqla transport polls its table once a second by default and takes its
        # interval from no option it can be given (its options go to create_engine):
        # poll every 0.1 s so a trigger on the embedded default waits ~0.1 s, not ~1 s,
        # each round one plain read of which queues have messages (tasks/embedded_broker.py).
        sqla_transport.Transport.polling_interval = 0.1
        embedded_broker.use()
    return {}


def _broker_transport_options(broker_url: str, s: Settings) -> dict[str, Any]:
    """The kombu transport options for ``broker_url``: its own, never another broker's
    (a pool opened on the embedded URL with Redis's options fails in ``create_engine``)."""
    return _transport_options(
        broker_url, s.redis_visibility_timeout
    ) | priorities.transport_options(broker_url, s.priority_levels)


def marks_redeliveries(broker_url: str) -> bool:
    """Does this broker flag a message it delivers again (``delivery_info
    ["redelivered"]``)? RabbitMQ does, and kombu's Redis transport does when it
    restores an unacknowledged message; the embedded ``sqla+`` transport does not."""
    return broker_url.startswith((*_REDIS_SCHEMES, "amqp://", "amqps://", "pyamqp://"))


def broker_transport(broker_url: str) -> str | None:
    """dormant's own Redis transport for a ``redis://`` URL (tasks/redis_transport.py:
    the exchanges known to a channel at birth, bindings written again when Redis lost
    them), for the app's connections and for a producer's pool on any broker URL."""
    return "dormant.tasks.redis_transport:Transport" if broker_url.startswith("redis://") else None


def _conf(s: Settings) -> dict[str, Any]:
    return {
        "broker_url": s.broker_url,
        "broker_connection_retry_on_startup": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        # Each pool process gets its own graceful-exit event (billiard's restart
        # sentinel): a process whose job ran out of memory sets its own and is replaced
        # once the failure is reported (tasks/job_task.py, ``retire_this_process``).
        "worker_pool_restarts": True,
        # SIGTERM is a cold shutdown with this grace (the CLI sets REMAP_SIGTERM): a
        # warm one waits for running tasks without any bound.
        "worker_soft_shutdown_timeout": s.worker_shutdown_timeout_seconds,
        "broker_transport_options": _broker_transport_options(s.broker_url, s),
        # Instance priorities, when on (tasks/priorities.py): RabbitMQ's x-max-priority.
        **priorities.broker_options(s.broker_url, s.priority_levels),
        # Redis: dormant's exchanges known to each channel before kombu's restore of a
        # dead worker's messages (tasks/redis_transport.py says why).
        "broker_transport": broker_transport(s.broker_url),
        "task_queues": (TIMER_QUEUE, QUEUE, PLAIN_QUEUE, QUARANTINE_QUEUE),
        "task_default_queue": QUEUE.name,
        "task_default_exchange": EXCHANGE.name,
        "task_default_exchange_type": EXCHANGE.type,
        "task_default_routing_key": "trigger.default",
        "task_create_missing_queues": True,
        "beat_schedule": {
            wire.SCAN_DEADLINES: {
                "task": wire.SCAN_DEADLINES,
                "schedule": SCAN_DEADLINES_EVERY,
                "options": {
                    "queue": TIMER_QUEUE.name,
                    "exchange": EXCHANGE.name,
                    "routing_key": TIMER_SCAN_KEY,
                },
            },
            wire.RELAY_OUTBOX: {
                "task": wire.RELAY_OUTBOX,
                "schedule": RELAY_OUTBOX_EVERY,
                "options": {
                    "expires": _sweep_expires(RELAY_OUTBOX_EVERY),
                    "queue": "dormant",
                    "exchange": "dormant",
                    "routing_key": "trigger.relay_outbox",
                },
            },
            wire.BATCHES_SWEEP: {
                "task": wire.BATCHES_SWEEP,
                "schedule": BATCH_SWEEP_EVERY,
                "options": {
                    "expires": _sweep_expires(BATCH_SWEEP_EVERY),
                    "queue": "dormant",
                    "exchange": "dormant",
                    "routing_key": "trigger.batches_sweep",
                },
            },
            wire.FLOW_SWEEP: {
                "task": wire.FLOW_SWEEP,
                "schedule": FLOW_SWEEP_EVERY,
                "options": {
                    "expires": _sweep_expires(FLOW_SWEEP_EVERY),
                    "queue": "dormant",
                    "exchange": "dormant",
                    "routing_key": "trigger.flow_sweep",
                },
            },
            wire.PROCESSED_SWEEP: {
                "task": wire.PROCESSED_SWEEP,
                "schedule": PROCESSED_SWEEP_EVERY,
                "options": {
                    "expires": _sweep_expires(PROCESSED_SWEEP_EVERY),
                    "queue": "dormant",
                    "exchange": "dormant",
                    "routing_key": "trigger.processed_sweep",
                },
            },
        },
    }


settings: Settings = Settings.from_env()
# Every task's class checks a job's result and memory failure first (tasks/job_task.py).
JobTask.limits = settings.limits
app = Celery(
    "dormant",
    task_cls=JobTask,
    include=[
        "dormant.tasks.triggers",
        "dormant.tasks.timers",
        "dormant.tasks.jobs",
        "dormant.tasks.job_flow",
        "dormant.tasks.operations",
        "dormant.tasks.failed",
    ],
)
app.conf.update(_conf(settings))
# An idle sweep writes no log line (tasks/quiet_logs.py).
quiet_logs.install()

_store: Store | None = None
_store_lock = threading.Lock()


def configure(new: Settings) -> None:
    """Point this process at other URLs (the CLI's ``dev``/``demo`` and tests).

    Must run before the worker starts or anything is published; it drops the cached
    Store so the next ``store()`` opens the new database.
    """
    global settings, _store
    settings = new
    JobTask.limits = new.limits
    app.conf.update(_conf(new))
    # The connection and producer pools still point at the old broker: drop them.
    app._pool = None
    app.amqp._producer_pool = None
    os.environ["DORMANT_DATABASE_URL"] = new.database_url
    os.environ["DORMANT_BROKER_URL"] = new.broker_url
    with _store_lock:
        _store = None
    clock.use_database_clock(_database_time)  # another database: read its clock afresh


def store() -> Store:
    """This process's Store, opened on first use (never before a fork: see below)."""
    global _store
    if _store is None:
        with _store_lock:
            if _store is None:
                _store = Store(
                    settings=settings,
                    compute_guard=lanes.compute_guard(
                        settings.worker_lane, settings.lane_budget_seconds
                    ),
                )
    return _store


def _database_time() -> clock.ClockReading | None:
    """The clock's source: this process's own Store, resolved at each read (a pool
    child reads through its own connections, never the parent's)."""
    return store().database_time()


clock.use_database_clock(_database_time)


@worker_process_init.connect
def _reset_after_fork(**_: Any) -> None:
    """A pool child must not share the parent's database connections."""
    global _store
    _store = None


def ensure_database(s: Settings | None = None) -> None:
    """Migrate the embedded SQLite database; refuse an un-migrated server database.

    Raises ``NotMigrated`` naming the URL and the fix (``dormant db upgrade``).
    """
    migrate.ensure_schema((s or settings).database_url)


def _check_or_exit(**_: Any) -> None:
    try:
        ensure_database()
    except DormantError as exc:
        log.critical("dormant: %s", exc)
        raise SystemExit(2) from exc


worker_init.connect(_check_or_exit, weak=False)


# A main lane's soft limit, as a share of its hard one: time for the move after it.
MAIN_LANE_SOFT_SHARE = 0.8


def _bound_trigger_tasks(**_: Any) -> None:
    """Give every engine task (``dormant.*``) the trigger time limits.

    Per task, not ``task_time_limit``: a user's job may rightly run for an hour. Set at
    ``worker_init``, after every module is imported and ``configure`` has run, and
    before the consumer builds its per-task request classes (which copy the limits).
    Celery enforces them in the prefork pool only (``dormant worker``); the soft one
    raises ``SoftTimeLimitExceeded`` inside the task, which the trigger tasks keep as a
    failed trigger, the hard one kills the pool process.

    A trigger past its hard limit is put back on its queue (``acks_on_timeout`` off,
    Celery 5.7), not acknowledged as Celery does by default: acknowledged, a plain
    producer's trigger (no inbox row for the sweep to re-send) would be lost. Put back,
    it comes again flagged ``redelivered`` and is counted, and past
    ``DORMANT_MAX_DELIVERIES`` it is kept as a ``PoisonTrigger`` (docs/limits.md,
    "What an operator sees: poison triggers").
    """
    soft, hard = settings.trigger_soft_time_limit_seconds, settings.trigger_time_limit_seconds
    lane_soft, lane_hard = soft, hard
    if settings.worker_lane == "main" and settings.lane_time_limit_seconds < hard:
        # The main lane's own, on the triggers it may move (tasks/lanes.py): past the
        # soft one a trigger moves to the quarantine lane instead of being kept; past
        # the hard one its redelivery does. Sweeps and batches keep the full limits.
        lane_hard = settings.lane_time_limit_seconds
        lane_soft = min(soft, lane_hard * MAIN_LANE_SOFT_SHARE)
    for name, task in app.tasks.items():
        if name.startswith("dormant."):
            movable = name in wire.MOVABLE
            task.soft_time_limit = lane_soft if movable else soft
            task.time_limit = lane_hard if movable else hard
            task.acks_on_timeout = False


worker_init.connect(_bound_trigger_tasks, weak=False)


def _note_task_events(sender: Any = None, **_: Any) -> None:
    """Write a worker's ``--events`` (``-E``) into the app's configuration, which its
    pool processes inherit: a trigger task that would take the triggers queued behind it
    (tasks/drain.py) does not while the worker sends task events, since Flower's task
    list shows only the tasks a worker ran as tasks of its own (docs/operations.md,
    "Several triggers per task")."""
    if getattr(sender, "task_events", False):
        app.conf.worker_send_task_events = True


worker_init.connect(_note_task_events, weak=False)


def _build_feel_parser(**_: Any) -> None:
    """Build the FEEL parser in the worker's main process, before the pool forks: each
    pool process (and each replacement of one) inherits it instead of building its own
    before its first trigger (engine_core/feel/syntax.py, ``parser``)."""
    feel_syntax.parser()


worker_init.connect(_build_feel_parser, weak=False)
beat_init.connect(_check_or_exit, weak=False)


_producer_pools: dict[str, Any] = {}
_producer_pools_lock = threading.Lock()


def _forget_producer_pools() -> None:
    _producer_pools.clear()


os.register_at_fork(after_in_child=_forget_producer_pools)
# Pool processes are forked while the consumer polls the embedded broker's SQLite table:
# never in the middle of a transaction on it (persistence/sqlite_forks.py).
sqlite_forks.install()


@contextmanager
def pooled_producer(broker_url: str) -> Iterator[Any]:
    """A kombu producer on a pooled connection to ``broker_url``, for producers.

    A new connection per publish costs a connect and a queue declaration each time
    (about 85 % of a Client call, measured): the pool keeps connections open, and
    kombu's ``maybe_declare`` remembers per connection what it declared, so the queue
    is declared once per pooled connection. A pool is per broker URL (a Client may
    name another broker than this process's app) and per process (forgotten in a
    forked child, whose inherited sockets belong to the parent).
    """
    with _producer_pools_lock:
        pool = _producer_pools.get(broker_url)
        if pool is None:
            connection = producer_connection(broker_url)
            pool = producers[connection]
            _producer_pools[broker_url] = pool
    with pool.acquire(block=True) as producer:
        yield producer


def producer_connection(broker_url: str) -> Connection:
    """A connection to ``broker_url`` with that broker's own transport options, not the
    app's configured ones, which may name another broker in a process that served
    several (the CLI, the tests): Redis's options on the embedded URL fail in
    ``create_engine``."""
    return Connection(
        broker_url,
        transport=broker_transport(broker_url),
        transport_options=_broker_transport_options(broker_url, settings),
        ssl=app.conf.broker_use_ssl,
        connect_timeout=app.conf.broker_connection_timeout,
    )


def queue_for(routing_key: str) -> Queue:
    """The dormant queue whose binding takes ``routing_key``: the one declared with the
    publish (on Redis a publish is delivered only to queues bound before it)."""
    if routing_key.startswith(TIMER_KEY_PREFIX):
        return TIMER_QUEUE
    if routing_key.startswith(lanes.QUARANTINE_KEY_PREFIX):
        return QUARANTINE_QUEUE
    return QUEUE


class _Together(threading.local):
    producer: Any = None
    after: list[Callable[[], None]] | None = None


_together = _Together()


@contextmanager
def publishing_together() -> Iterator[None]:
    """The publishes of this thread inside the block that may wait for its end
    (``publish(..., together=True)``: the jobs a batch of triggers dispatched) go out
    together when it ends: one Redis pipeline, one round trip, through kombu's
    ``Producer.batch`` (other transports publish each at once). What must follow a
    send (``after_publishing``: a published job's outbox row deleted) runs once the
    batch is sent; if it fails, that never runs and the sweep sends the rows again
    (bench/README.md has what it saves)."""
    if _together.producer is not None:  # nested: the outer block sends
        yield
        return
    stack = ExitStack()
    try:
        producer = stack.enter_context(app.producer_or_acquire())
        stack.enter_context(producer.batch())
    except Exception:  # no producer now: each publish tries on its own
        stack.close()
        log.warning("publishes not batched: no producer", exc_info=True)
        yield
        return
    after: list[Callable[[], None]] = []
    _together.producer, _together.after = producer, after
    try:
        yield
    except BaseException:
        _together.producer = _together.after = None
        stack.__exit__(*sys.exc_info())  # the batch discarded: nothing of it sent
        raise
    _together.producer = _together.after = None
    try:
        stack.close()  # sent: one round trip
    except Exception:
        # As for a single publish (tasks/outbox.py ``publish_rows``): the broker is
        # down, the rows stay, and the sweep sends them.
        log.exception("%s publishes not sent together; the sweep will send them", len(after))
        return
    for then in after:
        then()


def after_publishing(then: Callable[[], None]) -> None:
    """Run ``then`` once what this thread published so far is sent: at once, or at the
    end of its ``publishing_together`` block."""
    if _together.after is None:
        then()
    else:
        _together.after.append(then)


def publish(
    task_name: str,
    routing_key: str,
    kwargs: dict[str, Any],
    *,
    queue: Queue | str | None = None,
    exchange: str | None = None,
    headers: dict[str, Any] | None = None,
    connection: Any = None,
    producer: Any = None,
    priority: int | None = None,
    together: bool = False,
) -> None:
    """Send one task, always naming queue, exchange and a dotted routing key (an
    undotted one is replaced by the task's own, ``wire.dotted_key``).

    The one place that publishes, so the Redis pitfalls (an exchange-only route is
    dropped; ``trigger.#`` misses ``trigger``) are handled once. With no ``queue``, the
    routing key picks it: ``timer.*`` the timers' queue, anything else ``dormant`` (a
    kept fire sent again by an operator goes back where fires go). ``together``: it may
    wait for the end of this thread's ``publishing_together`` block.
    """
    # An undotted key (a plain Celery producer's queue, kept with its trigger) would
    # match no binding of dormant's exchange: tasks/wire.py ``dotted_key``.
    routing_key = wire.dotted_key(task_name, routing_key)
    target = queue_for(routing_key) if queue is None else queue
    if together and producer is None and connection is None:
        producer = _together.producer  # None outside a block: sent at once
    with publish_headers(task_name, headers) as traced:  # the trace context, if any
        app.send_task(
            task_name,
            kwargs=kwargs,
            queue=target,
            routing_key=routing_key,
            # Always named: the dormant queue has several bindings, so kombu keeps no
            # exchange on it, and Celery would otherwise publish to the anonymous exchange.
            exchange=exchange or EXCHANGE.name,
            headers=traced,
            connection=connection,
            producer=producer,
            # An instance's priority (tasks/priorities.py); None: the queue's default.
            **({"priority": priority} if priority is not None else {}),
            # No time limit rides the message: the worker that runs it applies its
            # own (a main lane's shorter ones stay there, tasks/lanes.py). Celery
            # would copy the sending process's limits for the task into it.
            time_limit=None,
            soft_time_limit=None,
            # What Flower shows of the arguments: no variable's value (tasks/wire.py).
            argsrepr="()",
            kwargsrepr=wire.shown_kwargs(task_name, kwargs),
        )

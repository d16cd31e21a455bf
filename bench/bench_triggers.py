#!/usr/bin/env python
"""Triggers per second, end to end, beside the plain-Celery floor, in ONE run.

On one Redis database (a free number 15..1, locked like the integration tests do) and
a fresh, migrated PostgreSQL database (created here, dropped at the end):

(a) a no-op Celery task;
(b) a Celery task that locks one row, rewrites a 2 KB JSONB column and commits;
(c) dormant: instances waiting on a message catch; N messages sent through the Client
    (``Client.send_messages``: the inbox rows, then one ``dormant.message`` task each,
    correlation key = the instance's key) → correlated → instance advanced to its end →
    checkpoint saved; drained by the real ``dormant worker``;
(d) dormant: completed instances of a one-service-task process (``dormant.start`` →
    the job ``bench-noop-job`` → its result), drained by the same kind of worker;
(e) the producer: ``Client.send_message`` and ``Client.start`` per call beside the floor
    of one inbox INSERT commit + one publish on a pooled producer, and the batch calls;
(f) (c) again with a backlog of ``--backlog`` (10,000) messages queued at once, beside
    (c) drained right before and right after it (the steady state, at the same moment):
    its rate >= 0.9x their mean, and deliveries per trigger (each delivery written by
    the worker: tests/faults/delivery_log.py) <= 1.0.

Each is queued first, then drained by ONE worker process (prefork x2, acks late,
prefetch 1), timed from its first take to the last task done (bench/harness.py); for
(c) and (d) the end is also confirmed in the database. Everything dormant is measured
through the broker: a worker that finds triggers queued applies several per task
(tasks/drain.py), which is what a backlog looks like. (b), (c) and (d) run in
``--rounds`` rounds (3), the order of (b) and (c) swapped every round, (b) with
N / rounds tasks each time: one drain of each, one after the other, moved by more than
the margin between two runs on a shared machine (a neighbour's load, PostgreSQL's
checkpoints). Targets (issue 25): the median of the rounds' (c)/(b) >= 1.0, the median
of (d) >= 250 completed instances/s, and beside it start -> completed latency at half
that capacity, offered once per round (p50 <= 50 ms, p99 <= 250 ms on the rounds'
medians; bench_latency's method); (d') the in-place
job path printed beside (d), not instead of it; (e) against <= 1.5x the floor. Beside
(c) in every round, (c) again with batches off (``DORMANT_TRIGGER_BATCH_MAX=1``): what
the batches themselves are worth on the same machine at the same moment.

Writes, counted for (c) and (d): every commit of the worker's pool processes
(bench/sqlcount.py's commit log, armed through the worker's environment) and of this
process's Client, per trigger / per instance, against <= 2 write transactions per
message trigger through the Client and <= 3 per instance start -> job -> end; beside
them the ``pg_stat_database.xact_commit`` delta of the bench's own database (every
transaction, reads included, this process's polling subtracted).

    .venv/bin/python bench/bench_triggers.py [--quick] [-n N] [--rounds R] [--latency-seconds S]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common, harness
from bench.models import MESSAGE, SERVICE, SERVICE_EAGER

# Issue 25's targets: message triggers through the Client ÷ the floor (a Celery task
# that locks one row, rewrites 2 KB JSONB and commits), and one-service-task instances
# per second with the job through the broker; latency at half that capacity beside it.
MESSAGE_FLOOR_TARGET = 1.0
SERVICE_TARGET = 250.0
# (f): a backlog of this many message triggers drains at >= 0.9x the steady state's
# rate, each delivered once (issue 25).
BACKLOG = 10_000
BACKLOG_THROUGHPUT_TARGET = 0.9
BACKLOG_DELIVERIES_TARGET = 1.0


def latency_beside(
    client: Any,
    store: Any,
    broker_url: str,
    database_url: str,
    logdir: Path,
    capacity: float,
    seconds: float,
    rounds: int,
    vacuum_first: bool,
) -> None:
    """Start -> completed latency of one-service-task instances (the job through the
    broker) offered at half the capacity just measured, open loop, to a fresh worker,
    ``rounds`` times (bench_latency's method and targets, on the rounds' medians: p50 <=
    50 ms, p99 <= 250 ms); each round from a vacuumed database unless ``vacuum_first``
    is off."""
    from bench import bench_latency as lat

    worker = harness.dormant_worker(broker_url, database_url, logdir, "dormant-latency")
    try:
        warm = count_status(store, "bench_service", "completed") + 50
        client.start_many("bench_service", [{"i": i} for i in range(50)])
        lat.wait_until(
            lambda: count_status(store, "bench_service", "completed") >= warm, 120, "warm-up"
        )
        rate = capacity * lat.JUDGED_LOAD
        judged: list[tuple[float, float] | None] = []
        for round_number in range(1, rounds + 1):
            label = (
                f"round {round_number}: start -> completed at {lat.JUDGED_LOAD:.0%} of "
                f"that capacity ({rate:.0f}/s)"
            )
            vacuums = lat.quiet(label, database_url, vacuum_first)
            time.sleep(2.0)
            before = count_status(store, "bench_service", "completed")
            sent = lat.paced(rate, seconds, lambda i: client.start("bench_service", {"i": i}))
            lat.wait_until(
                lambda: count_status(store, "bench_service", "completed") >= before + len(sent),  # noqa: B023
                600,
                "latency load",
            )
            lat.met_vacuums(label, database_url, vacuums)
            judged.append(
                lat.report(
                    label,
                    lat.latencies_ms(sent, lat.completed_at(store.engine, "bench_service")),
                    len(sent),
                )
            )
            lat.report_legs(label, *lat.legs(store.engine, "bench_service", sent))
        lat.judge(f"start -> completed at {lat.JUDGED_LOAD:.0%} of that capacity", judged)
    finally:
        worker.stop()


def publish_many(
    app: Any,
    name: str,
    queue: Any,
    routing_key: str,
    kwargs_list: list[dict[str, Any]],
    exchange: str | None = None,
) -> float:
    """Publish on one connection; returns tasks/s (for the record)."""
    t0 = time.perf_counter()
    with app.producer_or_acquire() as producer:
        for kwargs in kwargs_list:
            app.send_task(
                name,
                kwargs=kwargs,
                queue=queue,
                routing_key=routing_key,
                exchange=exchange,
                producer=producer,
            )
    return len(kwargs_list) / (time.perf_counter() - t0)


def count_status(store: Any, key: str, status: str) -> int:
    from sqlalchemy import func, select

    from dormant.persistence.tables import instances

    with store.engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count())
                .select_from(instances)
                .where(instances.c.key == key, instances.c.status == status)
            ).scalar_one()
        )


class SqlCounter:
    """Statements and (write) transactions per call on an engine (bench/sqlcount.py)."""

    def __init__(self, engine: Any) -> None:
        from bench.sqlcount import TxCounter

        self.counter = TxCounter(engine)

    def measure(self, fn: Any, k: int) -> str:
        before = self.counter.snapshot()
        t0 = time.perf_counter()
        for i in range(k):
            fn(i)
        ms = (time.perf_counter() - t0) / k * 1e3
        c = self.counter.snapshot() - before
        return (
            f"{c.statements / k:4.1f} statements, {c.write_transactions / k:3.1f} write + "
            f"{c.read_transactions / k:3.1f} read transactions, {ms:5.2f} ms in-process"
        )


def xact_commits(store: Any) -> int:
    """Committed transactions of the bench's own database so far (pg_stat_database)."""
    from sqlalchemy import text

    with store.engine.connect() as conn:
        conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        return int(
            conn.execute(
                text("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
            ).scalar_one()
        )


def counted_drain(store: Any, sql_log: Path, drain: Any, n: int) -> tuple[Any, Any, float]:
    """Run ``drain()`` (which stops its worker) and count what it cost PostgreSQL: the
    worker's commits (its log), this process's (the polling), and the database's
    ``xact_commit`` delta with this process's own transactions taken out, per unit."""
    from bench.sqlcount import TxCounter, read_log

    ours = TxCounter(store.engine)
    logged = read_log(sql_log)
    commits = xact_commits(store)
    result = drain()
    time.sleep(1.2)  # the worker's backends have exited: their statistics are flushed
    worker = read_log(sql_log) - logged
    polling = ours.snapshot()
    ours.close()
    total = xact_commits(store) - commits - polling.write_transactions - polling.read_transactions
    return result, worker, (total - 1) / n  # - 1: the second xact_commits read itself


def profile_paths(store: Any, base_url: str, now: datetime) -> None:
    """Per trigger, in this process (no broker): statements, transactions, time."""
    from sqlalchemy import create_engine, text

    from bench.celery_baseline import document
    from dormant.engine_core.triggers import JobCompleted
    from dormant.persistence.routing import Router
    from dormant.persistence.store import NewInstance
    from dormant.tasks.wire import redelivery

    eng = create_engine(base_url)
    floor = SqlCounter(eng)

    def jsonb(i: int) -> None:
        import json

        with eng.begin() as conn:
            conn.execute(
                text("SELECT doc FROM bench_rows WHERE id = :id FOR UPDATE"), {"id": i}
            ).first()
            conn.execute(
                text("UPDATE bench_rows SET doc = CAST(:doc AS jsonb) WHERE id = :id"),
                {"id": i, "doc": json.dumps(document(i))},
            )

    k = 200
    common.line("  (b) locked JSONB update", floor.measure(jsonb, k))
    eng.dispose()
    counter = SqlCounter(store.engine)
    common.line(
        "  start, message wait",
        counter.measure(
            lambda i: store.start(
                NewInstance("bench_message", f"p-{i}", {"orderId": f"p-{i}"}), now=now
            ),
            k,
        ),
    )
    router = Router(store, redelivery)
    common.line(
        "  (c) message -> Router.message",
        counter.measure(
            lambda i: router.message(
                "bench-go", f"p-{i}", {}, message_id=f"pm-{i}", ttl_seconds=None, now=now
            ),
            k,
        ),
    )
    common.line(
        "  start, service task",
        counter.measure(
            lambda i: store.start(NewInstance("bench_service", f"q-{i}", {"i": i}), now=now), k
        ),
    )

    def job_done(i: int) -> None:
        wait_id = _waits(store, f"q-{i}")[0]
        store.apply(
            f"q-{i}",
            JobCompleted(wait_id=wait_id, variables={"done": True}),
            now,
            trigger_id=f"q-{i}:done",
        )

    common.line("  job result -> Store.apply (+1 read here)", counter.measure(job_done, k))


def _waits(store: Any, instance_id: str) -> list[str]:
    from sqlalchemy import select

    from dormant.persistence.tables import instances

    with store.engine.connect() as conn:
        doc = conn.execute(
            select(instances.c.checkpoint).where(instances.c.id == instance_id)
        ).scalar_one()
    return list(doc.get("waits", {}))


def producer_cost(database_url: str, broker_url: str, k: int = 500) -> dict[str, float]:
    """Milliseconds per call of the producer's side, side by side: the floor (one inbox
    INSERT commit + one publish on a pooled producer), Client.send_message and
    Client.start, and per trigger of the batch calls. Nothing drains the queue here."""
    import uuid

    from sqlalchemy import insert

    from dormant.persistence.tables import inbox
    from dormant.tasks import app as tasks_app
    from dormant.tasks.client import Client

    client = Client(database_url=database_url, broker_url=broker_url)
    engine = client._store.engine

    def floor(i: int) -> None:
        row_id = uuid.uuid4().hex
        kwargs = {"name": "bench-producer", "correlation_key": f"f-{i}", "inbox_id": row_id}
        with engine.begin() as conn:
            conn.execute(
                insert(inbox).values(
                    id=row_id,
                    kind="dormant.message",
                    payload={"routing_key": "message.bench-producer", "kwargs": kwargs},
                    created_at=datetime.now(UTC),
                )
            )
        with tasks_app.pooled_producer(broker_url) as producer:
            tasks_app.publish(
                "dormant.message", "message.bench-producer", kwargs, producer=producer
            )

    calls = {
        "floor": floor,
        "send_message": lambda i: client.send_message("bench-producer", correlation_key=f"c-{i}"),
        "start": lambda i: client.start("bench_message", {"orderId": f"p-{i}"}),
    }
    for fn in calls.values():
        for i in range(20):  # warm: connections open, statements cached
            fn(i)
    # Interleaved rounds, so a neighbour's load falls on all three alike.
    spent = dict.fromkeys(calls, 0.0)
    rounds = 10
    for r in range(rounds):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            for i in range(r * k // rounds, (r + 1) * k // rounds):
                fn(i)
            spent[name] += time.perf_counter() - t0
    ms = {name: secs / k * 1000 for name, secs in spent.items()}
    from bench.sqlcount import TxCounter

    counter = TxCounter(engine)
    for i in range(20):
        client.send_message("bench-producer", correlation_key=f"w-{i}")
    ms["send_message write transactions"] = counter.snapshot().write_transactions / 20
    before = counter.snapshot()
    for i in range(20):
        client.start("bench_message", {"orderId": f"w-{i}"})
    ms["start write transactions"] = (counter.snapshot() - before).write_transactions / 20
    counter.close()
    t0 = time.perf_counter()
    client.send_messages(
        [{"name": "bench-producer", "correlation_key": f"b-{i}"} for i in range(k)]
    )
    ms["send_messages"] = (time.perf_counter() - t0) / k * 1000
    t0 = time.perf_counter()
    client.start_many("bench_message", [{"orderId": f"q-{i}"} for i in range(k)])
    ms["start_many"] = (time.perf_counter() - t0) / k * 1000
    client._store.close()
    return ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2,000 tasks per figure instead of 20,000")
    ap.add_argument(
        "-n", type=int, default=None, help="tasks per baseline figure (default 20,000; quick 2,000)"
    )
    ap.add_argument(
        "--dormant-n",
        type=int,
        default=None,
        help="instances per dormant figure (default 5,000; quick 1,000)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds of (b) beside (c) and (d), the order swapped each round (default 3)",
    )
    ap.add_argument(
        "--dbos",
        action="store_true",
        help="also run bench_dbos's DBOS side by side (needs .[bench])",
    )
    ap.add_argument(
        "--latency-seconds",
        type=float,
        default=None,
        help="the latency load at half capacity, s (default 20; quick 5; 0 skips it)",
    )
    ap.add_argument(
        "--backlog",
        type=int,
        default=BACKLOG,
        help=f"message triggers queued at once for (f) (default {BACKLOG:,})",
    )
    ap.add_argument(
        "--no-unbatched",
        action="store_true",
        help="skip (c) with batches off (DORMANT_TRIGGER_BATCH_MAX=1) beside (c) each round",
    )
    from bench import bench_latency

    bench_latency.add_vacuum_option(ap)
    args = ap.parse_args()
    unbatched = not args.no_unbatched
    latency_seconds = (
        args.latency_seconds if args.latency_seconds is not None else (5.0 if args.quick else 20.0)
    )
    n_base = args.n or (2000 if args.quick else 20000)
    n_dormant = n_service = args.dormant_n or (1000 if args.quick else 5000)
    n = n_dormant
    rounds = args.rounds or 3
    n_floor = max(n_base // rounds, 1)

    common.header(
        f"bench_triggers: {n_base} tasks per baseline, {n} instances per dormant figure, "
        "one worker (prefork x2, acks late, prefetch 1)"
    )
    logdir = Path(tempfile.mkdtemp(prefix="dormant-bench-"))
    common.line("worker logs", str(logdir))

    import redis

    with common.scratch_redis_db() as broker_url, common.scratch_database() as database_url:
        common.line("broker", broker_url)
        common.line(
            "database", database_url.rsplit("/", 1)[1] + " (fresh, migrated; dropped at exit)"
        )
        r = redis.Redis.from_url(broker_url)

        # -- (a) and (b): the plain-Celery floor ----------------------------------------
        os.environ["BENCH_BROKER_URL"] = broker_url
        os.environ["BENCH_DATABASE_URL"] = database_url
        from bench import celery_baseline as base

        base.app.conf.broker_url = broker_url
        base.create_rows(database_url)

        rates: dict[str, float] = {}

        def celery_floor(label: str, task: str, queue: str, make: Any, count: int) -> float:
            publish_many(base.app, task, queue, queue, [make(i) for i in range(count)])
            secs, worker = harness.drain(
                r,
                queue,
                lambda q=queue: harness.baseline_worker(q, broker_url, database_url, logdir),
            )
            worker.stop()
            common.line(
                f"(a/b) {label:<26}", f"{count / secs:8.0f} tasks/s  ({count} in {secs:.2f} s)"
            )
            return count / secs

        rates["no-op Celery task"] = celery_floor(
            "no-op Celery task", "bench.noop", base.NOOP_QUEUE, lambda i: {}, n_base
        )

        # -- dormant ----------------------------------------------------------------------
        from dormant.persistence.settings import Settings
        from dormant.persistence.store import Store
        from dormant.tasks import app as tasks_app

        tasks_app.configure(Settings.from_env(database_url=database_url, broker_url=broker_url))
        from bench.sqlcount import ENV_LOG

        sql_log = logdir / "sql-commits.log"
        os.environ[ENV_LOG] = str(sql_log)  # the workers below inherit it (bench.jobs)
        store = Store(settings=tasks_app.settings)
        now = datetime.now(UTC)
        store.deployments.deploy(MESSAGE, now)
        store.deployments.deploy(SERVICE, now)
        store.deployments.deploy(SERVICE_EAGER, now)
        from bench.sqlcount import TxCounter
        from dormant.tasks.client import Client

        client = Client(database_url=database_url, broker_url=broker_url)

        def message_round(
            tag: str,
            batch_max: str | None = None,
            count: int | None = None,
            delivery_log: Path | None = None,
        ) -> tuple[float, Any, Any, float]:
            """(c) N instances waiting on the message catch (started by a worker: setup,
            printed for the record), then N messages sent through the Client and
            drained by a fresh worker: the rate, the Client's and the worker's counts.
            ``count``: another N (the backlog); ``delivery_log``: where the draining
            worker writes each delivery of a trigger (tests/faults/delivery_log.py)."""
            n = count or n_dormant
            publish_many(
                tasks_app.app,
                "dormant.start",
                tasks_app.QUEUE,
                "trigger.start",
                [
                    {
                        "key": "bench_message",
                        "instance_id": f"m{tag}-{i}",
                        "variables": {"orderId": f"k{tag}-{i}"},
                    }
                    for i in range(n)
                ],
                exchange=tasks_app.EXCHANGE.name,
            )
            parked = count_status(store, "bench_message", "completed") + n
            secs, worker = harness.drain(
                r,
                tasks_app.QUEUE.name,
                lambda: harness.dormant_worker(broker_url, database_url, logdir, "dormant-setup"),
                done=lambda: count_status(store, "bench_message", "active") >= n,
            )
            worker.stop()
            common.line(
                "    (setup) dormant.start -> instance waits on message",
                f"{n / secs:8.0f} triggers/s ({n} in {secs:.2f} s)",
            )
            producer_counter = TxCounter(client._store.engine)
            client.send_messages(
                [
                    {
                        "name": "bench-go",
                        "correlation_key": f"k{tag}-{i}",
                        "message_id": f"msg{tag}-{i}",
                    }
                    for i in range(n)
                ]
            )
            sent = producer_counter.snapshot()
            producer_counter.close()

            def drain_messages() -> float:
                if batch_max is not None:  # the worker inherits it (harness.env_with)
                    os.environ["DORMANT_TRIGGER_BATCH_MAX"] = batch_max
                try:
                    return drain_messages_now()
                finally:
                    os.environ.pop("DORMANT_TRIGGER_BATCH_MAX", None)

            def drain_messages_now() -> float:
                logged = {"DORMANT_TEST_DELIVERY_LOG": str(delivery_log)} if delivery_log else None
                secs, worker = harness.drain(
                    r,
                    tasks_app.QUEUE.name,
                    lambda: harness.dormant_worker(
                        broker_url,
                        database_url,
                        logdir,
                        include="bench.jobs,tests.faults.delivery_log",
                        env=logged,
                    ),
                    done=lambda: count_status(store, "bench_message", "completed") >= parked,
                )
                worker.stop()
                return secs

            secs, msg_worker, msg_xacts = counted_drain(store, sql_log, drain_messages, n)
            common.line(
                "(c)   dormant message trigger through the Client"
                + ("" if batch_max is None else f", batches off (at most {batch_max})"),
                f"{n / secs:8.0f} triggers/s ({n} in {secs:.2f} s)",
            )
            return n / secs, sent, msg_worker, msg_xacts

        def service_instances(key: str, prefix: str, worker_name: str) -> tuple[float, Any, float]:
            """N instances of ``key`` queued, then drained by a fresh worker: the rate,
            the worker's statements and transactions, the xact_commit delta."""
            publish_many(
                tasks_app.app,
                "dormant.start",
                tasks_app.QUEUE,
                "trigger.start",
                [
                    {"key": key, "instance_id": f"{prefix}-{i}", "variables": {"i": i}}
                    for i in range(n_service)
                ],
                exchange=tasks_app.EXCHANGE.name,
            )

            target = count_status(store, key, "completed") + n_service

            def drain_service() -> float:
                secs, worker = harness.drain(
                    r,
                    tasks_app.QUEUE.name,
                    lambda: harness.dormant_worker(broker_url, database_url, logdir, worker_name),
                    done=lambda: count_status(store, key, "completed") >= target,
                )
                worker.stop()
                return secs

            secs, counted, xacts = counted_drain(store, sql_log, drain_service, n_service)
            return n_service / secs, counted, xacts

        # (b), (c) and (d) in rounds, the order swapped every round, so a neighbour's load
        # that comes and goes (or PostgreSQL's checkpoint) falls on all; the targets are
        # judged on the medians of the rounds.
        round_ratios: list[float] = []
        message_rates: list[float] = []
        batch_gains: list[float] = []
        service_rates: list[float] = []
        counted_round: tuple[Any, Any, float] | None = None
        counted_service: tuple[Any, float] | None = None
        for k in range(rounds):
            common.line(f"  round {k + 1}", "the floor first" if k % 2 == 0 else "dormant first")

            def jsonb_floor() -> float:
                return celery_floor(
                    "locked 2 KB JSONB update",
                    "bench.jsonb",
                    base.JSONB_QUEUE,
                    lambda i: {"i": i},
                    n_floor,
                )

            if k % 2 == 0:
                floor_rate = jsonb_floor()
                message_rate, *counts = message_round(str(k))
            else:
                message_rate, *counts = message_round(str(k))
                floor_rate = jsonb_floor()
            message_rates.append(message_rate)
            round_ratios.append(message_rate / floor_rate)
            common.line("    round ratio (c)/(b)", f"{round_ratios[-1]:.2f}")
            if unbatched:
                single_rate, *_ = message_round(f"{k}u", batch_max="1")
                batch_gains.append(message_rate / single_rate)
                common.line("    round ratio (c) / (c) with batches off", f"{batch_gains[-1]:.2f}")
            # (d) one-service-task process: start -> job (through the broker) -> result.
            service_rate, job_counted, job_xacts_k = service_instances(
                "bench_service", f"s{k}", "dormant-worker-2"
            )
            service_rates.append(service_rate)
            common.line(
                "(d)   dormant one-service-task instances, the job through the broker",
                f"{service_rate:8.0f} completed/s ({n_service} in {n_service / service_rate:.2f} "
                f"s; {3 * service_rate:.0f} triggers/s, 2 Celery tasks + 1 job result each)",
            )
            if counted_service is None:
                counted_service = (job_counted, job_xacts_k)
            rates.setdefault("locked 2 KB JSONB update", floor_rate)
            if counted_round is None:
                counted_round = (counts[0], counts[1], counts[2])
        assert counted_round is not None
        sent, msg_worker, msg_xacts = counted_round

        assert counted_service is not None
        job_worker, job_xacts = counted_service
        completed_rate = common.median(service_rates)
        # (d') the same with an eager job: run in place by the worker whose start
        # dispatched it, one Celery task per instance (tasks/jobs.py, "Eager jobs").
        eager_rate, eager_worker, eager_xacts = service_instances(
            "bench_service_eager", "e", "dormant-worker-eager"
        )
        common.line(
            "(d')  dormant one-service-task instances, eager job",
            f"{eager_rate:8.0f} completed/s ({n_service} in {n_service / eager_rate:.2f} s; "
            "1 Celery task each: the start, then its job run in place)",
        )
        # (f) a backlog: BACKLOG messages queued at once, drained as (c) is; each delivery
        # written by the worker. Its steady state is (c) drained right before and right
        # after it: the rounds' (c) ran minutes earlier, and their rates alone spread by
        # half on a shared machine, more than the margin the target leaves.
        common.line("  (f) the steady state right before the backlog", "")
        steady_before, *_ = message_round("fb")
        delivery_log = logdir / "backlog-deliveries.log"
        backlog_rate, *_ = message_round("b", count=args.backlog, delivery_log=delivery_log)
        common.line("  (f) the steady state right after the backlog", "")
        steady_after, *_ = message_round("fa")
        steady_beside = (steady_before + steady_after) / 2
        from tests.faults.delivery_log import deliveries

        delivered = deliveries(delivery_log)
        # Every message the Client sent has its inbox row, by whose id the log counts.
        backlog_deliveries = sum(delivered.values()) / args.backlog
        # (e) the producer's side: what one Client call costs beside its floor.
        producer = producer_cost(database_url, broker_url)
        for label, key in (
            ("one inbox INSERT commit + one pooled publish (floor)", "floor"),
            ("Client.send_message", "send_message"),
            ("Client.start", "start"),
            ("Client.send_messages, per message (batch of 500)", "send_messages"),
            ("Client.start_many, per start (batch of 500)", "start_many"),
        ):
            common.line(f"(e)   {label}", f"{producer[key]:8.2f} ms")
        common.line("where a trigger's time goes (SQL per trigger, in-process, no broker)", "")
        profile_paths(store, database_url, now)
        store.close()

        print()
        common.ratio_line(
            "ratio message triggers through the Client, drained by `dormant worker -c 2` / "
            f"locked-JSONB floor (median of {rounds} rounds: "
            + ", ".join(f"{x:.2f}" for x in round_ratios)
            + ")",
            common.median(round_ratios),
            ">=",
            MESSAGE_FLOOR_TARGET,
        )
        common.ratio_line(
            f"message triggers under a {args.backlog:,}-trigger backlog / (c) drained right "
            f"before and after it, the steady state ({backlog_rate:.0f} against "
            f"{steady_before:.0f} and {steady_after:.0f} per s; the rounds' (c) median "
            f"{common.median(message_rates):.0f}: "
            f"{backlog_rate / common.median(message_rates):.2f})",
            backlog_rate / steady_beside,
            ">=",
            BACKLOG_THROUGHPUT_TARGET,
        )
        common.ratio_line(
            f"deliveries per trigger under the {args.backlog:,}-trigger backlog "
            "(tests/faults/delivery_log.py in the worker)",
            backlog_deliveries,
            "<=",
            BACKLOG_DELIVERIES_TARGET,
            "{:.3f}",
        )
        if batch_gains:
            common.line(
                "ratio message triggers, batched / batches off (DORMANT_TRIGGER_BATCH_MAX=1), "
                f"same rounds (median of {rounds}: "
                + ", ".join(f"{x:.2f}" for x in batch_gains)
                + ")",
                f"{common.median(batch_gains):.2f}",
            )
        common.line(
            "ratio locked-JSONB / no-op (for reference; plain Celery on an idle host: 0.48)",
            f"{rates['locked 2 KB JSONB update'] / rates['no-op Celery task']:.2f}",
        )
        common.ratio_line(
            "completed one-service-task instances/s, the job through the broker (median of "
            f"{rounds} rounds: " + ", ".join(f"{x:.0f}" for x in service_rates) + ")",
            completed_rate,
            ">=",
            SERVICE_TARGET,
            "{:.0f}",
        )
        if latency_seconds > 0:
            latency_beside(
                client,
                store,
                broker_url,
                database_url,
                logdir,
                completed_rate,
                latency_seconds,
                rounds,
                not args.no_vacuum_first,
            )
        common.line(
            "(c) per message trigger: the Client",
            f"{sent.write_transactions / n:.2f} write transactions ({sent.statements / n:.2f} "
            f"statements; one batch of {n}: {sent.write_transactions} commit)",
        )
        common.line("(c) per message trigger: the worker", msg_worker.per(n))
        common.line(
            "(c) per message trigger: pg_stat_database xact_commit delta (reads included)",
            f"{msg_xacts:.2f}",
        )
        common.ratio_line(
            "write transactions per message trigger through the Client (Client.send_message's "
            "+ the worker's)",
            producer["send_message write transactions"] + msg_worker.write_transactions / n,
            "<=",
            2.0,
        )
        common.line("(d) per instance start -> job -> end: the worker", job_worker.per(n_service))
        common.line(
            "(d) per instance: pg_stat_database xact_commit delta (reads included)",
            f"{job_xacts:.2f}",
        )
        common.line(
            "(d') per instance start -> eager job -> end: the worker",
            eager_worker.per(n_service),
        )
        common.line(
            "(d') per instance: pg_stat_database xact_commit delta (reads included)",
            f"{eager_xacts:.2f}",
        )
        common.line(
            "completed one-service-task instances/s, eager job (the in-place path, beside)",
            f"{eager_rate:.0f}",
        )
        common.ratio_line(
            "write transactions per instance start -> job -> end (from dormant.start)",
            job_worker.write_transactions / n_service,
            "<=",
            3.0,
        )
        common.ratio_line(
            "write transactions per instance start -> job -> end through the Client "
            "(Client.start's + the worker's)",
            producer["start write transactions"] + job_worker.write_transactions / n_service,
            "<=",
            3.0,
        )
        for key in ("send_message", "start"):
            common.ratio_line(
                f"ratio Client.{key} / (one inbox INSERT commit + one pooled publish)",
                producer[key] / producer["floor"],
                "<=",
                1.5,
            )
    if args.dbos:
        from bench import bench_dbos

        # At most 1,000 per figure: DBOS parks one thread per waiting recv workflow.
        bench_dbos.section(min(n, 1000))
    return common.summary()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Triggers per second, end to end, beside the plain-Celery floor, in ONE run.

On one Redis database (a free number 15..1, locked like the integration tests do) and
a fresh, migrated PostgreSQL database (created here, dropped at the end):

(a) a no-op Celery task;
(b) a Celery task that locks one row, rewrites a 2 KB JSONB column and commits;
(c) dormant: instances waiting on a message catch; N ``dormant.message`` tasks (one
    per instance, correlation key = the instance's key) → correlated → instance
    advanced to its end → checkpoint saved; drained by the real ``dormant worker``;
(d) dormant: completed instances of a one-service-task process (``dormant.start`` →
    the job ``bench-noop-job`` → its result), drained by the same kind of worker.

Each is queued first, then drained by ONE worker process (prefork x2, acks late,
prefetch 1), timed from its first take to the last task done (bench/harness.py); for
(c) and (d) the end is also confirmed in the database. Ratios: (c)/(b) against
>= 0.7, (d) against >= 100 completed instances/s.

    .venv/bin/python bench/bench_triggers.py [--quick] [-n N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common, harness  # noqa: E402
from bench.models import MESSAGE, SERVICE  # noqa: E402


def publish_many(app: Any, name: str, queue: Any, routing_key: str, kwargs_list: list[dict[str, Any]],
                 exchange: str | None = None) -> float:
    """Publish on one connection; returns tasks/s (for the record)."""
    t0 = time.perf_counter()
    with app.producer_or_acquire() as producer:
        for kwargs in kwargs_list:
            app.send_task(name, kwargs=kwargs, queue=queue, routing_key=routing_key, exchange=exchange,
                          producer=producer)
    return len(kwargs_list) / (time.perf_counter() - t0)


def count_status(store: Any, key: str, status: str) -> int:
    from sqlalchemy import func, select

    from persistence.tables import instances

    with store.engine.connect() as conn:
        return int(conn.execute(
            select(func.count()).select_from(instances).where(instances.c.key == key, instances.c.status == status)
        ).scalar_one())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2,000 tasks per figure instead of 20,000")
    ap.add_argument("-n", type=int, default=None, help="tasks per figure")
    args = ap.parse_args()
    n = args.n or (2000 if args.quick else 20000)
    n_service = n // 2 if not args.n else n

    common.header(f"bench_triggers: {n} tasks per figure, one worker (prefork x2, acks late, prefetch 1)")
    logdir = Path(tempfile.mkdtemp(prefix="dormant-bench-"))
    common.line("worker logs", str(logdir))

    import redis

    with common.scratch_redis_db() as broker_url, common.scratch_database() as database_url:
        common.line("broker", broker_url)
        common.line("database", database_url.rsplit("/", 1)[1] + " (fresh, migrated; dropped at exit)")
        r = redis.Redis.from_url(broker_url)

        # -- (a) and (b): the plain-Celery floor ----------------------------------------
        import os

        os.environ["BENCH_BROKER_URL"] = broker_url
        os.environ["BENCH_DATABASE_URL"] = database_url
        from bench import celery_baseline as base

        base.app.conf.broker_url = broker_url
        base.create_rows(database_url)

        rates: dict[str, float] = {}
        for label, task, queue, make in (
            ("no-op Celery task", "bench.noop", base.NOOP_QUEUE, lambda i: {}),
            ("locked 2 KB JSONB update", "bench.jsonb", base.JSONB_QUEUE, lambda i: {"i": i}),
        ):
            publish_many(base.app, task, queue, queue, [make(i) for i in range(n)])
            secs, worker = harness.drain(
                r, queue, lambda q=queue: harness.baseline_worker(q, broker_url, database_url, logdir)
            )
            worker.stop()
            rates[label] = n / secs
            common.line(f"(a/b) {label:<26}", f"{rates[label]:8.0f} tasks/s  ({n} in {secs:.2f} s)")

        # -- dormant ----------------------------------------------------------------------
        from persistence.settings import Settings
        from persistence.store import Store
        from tasks import app as tasks_app

        tasks_app.configure(Settings.from_env(database_url=database_url, broker_url=broker_url))
        store = Store(settings=tasks_app.settings)
        now = datetime.now(UTC)
        store.deploy(MESSAGE, now)
        store.deploy(SERVICE, now)

        # (c) N instances waiting on the message catch (made directly through the Store:
        # not measured), then N messages queued and drained.
        t0 = time.perf_counter()
        for i in range(n):
            store.start("bench_message", f"m-{i}", {"orderId": f"k-{i}"}, now=now)
        common.line("    (setup) waiting instances created", f"{n} in {time.perf_counter() - t0:.1f} s")
        publish_many(
            tasks_app.app, "dormant.message", tasks_app.QUEUE, "message.bench-go",
            [{"name": "bench-go", "correlation_key": f"k-{i}", "message_id": f"msg-{i}"} for i in range(n)],
            exchange=tasks_app.EXCHANGE.name,
        )
        secs, worker = harness.drain(
            r, tasks_app.QUEUE.name, lambda: harness.dormant_worker(broker_url, database_url, logdir),
            done=lambda: count_status(store, "bench_message", "completed") >= n,
        )
        worker.stop()
        rates["dormant message trigger"] = n / secs
        common.line("(c)   dormant message trigger", f"{rates['dormant message trigger']:8.0f} triggers/s ({n} in {secs:.2f} s)")

        # (d) one-service-task process: start -> job -> job result, N instances.
        publish_many(
            tasks_app.app, "dormant.start", tasks_app.QUEUE, "trigger.start",
            [{"key": "bench_service", "instance_id": f"s-{i}", "variables": {"i": i}} for i in range(n_service)],
            exchange=tasks_app.EXCHANGE.name,
        )
        secs, worker = harness.drain(
            r, tasks_app.QUEUE.name, lambda: harness.dormant_worker(broker_url, database_url, logdir, "dormant-worker-2"),
            done=lambda: count_status(store, "bench_service", "completed") >= n_service,
        )
        worker.stop()
        completed_rate = n_service / secs
        common.line(
            "(d)   dormant one-service-task instances",
            f"{completed_rate:8.0f} completed/s ({n_service} in {secs:.2f} s; "
            f"{3 * n_service / secs:.0f} triggers/s, 2 Celery tasks + 1 job result each)",
        )
        store.close()

        print()
        common.ratio_line(
            "ratio end-to-end / locked-JSONB baseline", rates["dormant message trigger"] / rates["locked 2 KB JSONB update"],
            ">=", 0.70,
        )
        common.line(
            "ratio locked-JSONB / no-op (for reference; CELERY-NOTES: 747/1561 = 0.48)",
            f"{rates['locked 2 KB JSONB update'] / rates['no-op Celery task']:.2f}",
        )
        common.ratio_line("completed one-service-task instances/s", completed_rate, ">=", 100.0, "{:.0f}")
    return common.summary()


if __name__ == "__main__":
    sys.exit(main())

"""Flow control's cost and its dispatch lag (docs/flow-control.md).

    .venv/bin/python bench/bench_flow.py [--jobs N] [--quick]

One ``dormant worker -c 2`` (the real CLI) on a scratch PostgreSQL database and a
scratch Redis db. Two lines:

* throughput of one-job instances whose job type has a concurrency limit of 1,000 (not
  binding: the worker runs two at a time) ÷ the same model with no limit, batches sent
  by ``Client.start_many`` alternately, the medians of each side, in the same run
  (target ≥ 0.9): what taking and giving back a slot costs a job;
* dispatch lag when a slot frees: a type limited to one job at a time, 5 ms jobs, each
  recording when it began and ended (in its result); the lag is the next job's start
  minus the previous job's end — its result applied, the slot freed and granted in that
  transaction, the granted job published and picked up. p50 and p99 printed;
* fairness at issue 27's scale: ``--burst`` (10,000) jobs of one key, then 10 of another,
  behind a limit of one job at a time; the jobs wait for a gate until every one is
  running or waiting, then record their turns: the 10 must all finish before the
  burst's first 1,000 (round-robin grants across keys).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common, harness
from bench.models import SERVICE

FLOW = SERVICE.replace('id="bench_service" name="Bench service"', 'id="bench_flow"').replace(
    "bench-noop-job", "bench-flow-job"
)
ONE = SERVICE.replace('id="bench_service" name="Bench service"', 'id="bench_one"').replace(
    "bench-noop-job", "bench-flow-one"
)
FAIR = SERVICE.replace('id="bench_service" name="Bench service"', 'id="bench_fair"').replace(
    "bench-noop-job", "bench-flow-fair"
)
JOB_TYPES = json.dumps(
    {
        "bench-flow-job": {"concurrency": 1000},
        "bench-flow-one": {"concurrency": 1},
        "bench-flow-fair": {"concurrency": 1, "key": "=customerId"},
    }
)
FEW = 10


def count(engine: Any, key: str) -> int:
    from sqlalchemy import text

    with engine.connect() as c:
        return int(
            c.execute(
                text("SELECT count(*) FROM instances WHERE key = :k AND status = 'completed'"),
                {"k": key},
            ).scalar_one()
        )


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_flow: timed out waiting for {what}")
        time.sleep(0.02)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=None, help="instances per batch (default 1000)")
    ap.add_argument("--quick", action="store_true", help="300-instance batches")
    ap.add_argument(
        "--burst", type=int, default=10_000, help="the fairness line's burst of one key (10,000)"
    )
    args = ap.parse_args()
    batch = args.jobs or (300 if args.quick else 1000)
    common.header(f"bench_flow: {batch} one-job instances per batch, one worker (prefork x2)")
    logdir = Path(tempfile.mkdtemp(prefix="dormant-bench-flow-"))
    common.line("worker logs", str(logdir))
    with common.scratch_redis_db() as broker_url, common.scratch_database() as database_url:
        from sqlalchemy import create_engine

        from dormant import Client

        engine = create_engine(database_url)
        client = Client(database_url=database_url, broker_url=broker_url)
        for xml in (SERVICE, FLOW, ONE, FAIR):
            client.deploy(xml)
        worker = harness.dormant_worker(broker_url, database_url, logdir, job_types=JOB_TYPES)
        try:

            def rate(key: str, n: int) -> float:
                before = count(engine, key)
                began = time.perf_counter()
                client.start_many(key, [{"i": i} for i in range(n)])
                wait_until(lambda: count(engine, key) >= before + n, 600, f"{key} batch")
                return n / (time.perf_counter() - began)

            rate("bench_service", 50)  # warm-up: the pool is up, connections made
            rate("bench_flow", 50)
            plain, limited = [], []
            for _ in range(3):
                plain.append(rate("bench_service", batch))
                limited.append(rate("bench_flow", batch))
            p, f = common.median(plain), common.median(limited)
            common.line("no limit", f"{p:8.0f} completed/s (median of {len(plain)} batches)")
            common.line("concurrency limit 1,000", f"{f:8.0f} completed/s")
            common.ratio_line("throughput with a limit of 1,000 / without", f / p, ">=", 0.9)

            n = min(batch, 300)
            before = count(engine, "bench_one")
            ids = client.start_many("bench_one", [{"i": i} for i in range(n)])
            wait_until(lambda: count(engine, "bench_one") >= before + n, 600, "bench_one")
            times = [client.instance(i).variables for i in ids]
            runs = sorted((float(v["began"]), float(v["ended"])) for v in times)
            lags = sorted(max(0.0, b[0] - a[1]) * 1000 for a, b in itertools.pairwise(runs))
            common.line(
                "dispatch lag when a slot frees (limit 1, 5 ms jobs)",
                f"p50 {lags[len(lags) // 2]:.1f} ms  p99 {lags[int(len(lags) * 0.99)]:.1f} ms "
                f"over {len(lags)} hand-overs",
            )
            fairness(client, broker_url, args.burst)
        finally:
            worker.stop()
            client._store.close()
            engine.dispose()
    return common.summary()


def fairness(client: Any, broker_url: str, burst: int) -> None:
    """``burst`` jobs of key "big", then FEW of key "small", all waiting behind a limit
    of one; the gate opens; where the last small job's turn falls among the big ones."""
    import redis

    r = redis.Redis.from_url(broker_url)
    gate = f"bench-fair-{time.monotonic_ns()}"
    began = time.perf_counter()
    for start in range(0, burst, 1000):
        client.start_many(
            "bench_fair", [{"customerId": "big", "gate": gate}] * min(1000, burst - start)
        )
    client.start_many("bench_fair", [{"customerId": "small", "gate": gate}] * FEW)

    def all_out() -> bool:
        rows = {(row.job_type, row.key): row for row in client.job_types()}
        head = rows.get(("bench-flow-fair", None))
        return head is not None and head.running + head.waiting == burst + FEW

    wait_until(all_out, 1800, "every fair job running or waiting")
    common.line(
        "fairness: jobs queued behind a limit of one",
        f"{burst} of one key + {FEW} of another in {time.perf_counter() - began:.0f} s",
    )
    r.set(gate, 1)
    order_key = f"{gate}:order"
    wait_until(
        lambda: [x.decode() for x in r.lrange(order_key, 0, -1)].count("small") == FEW,
        600,
        "the small key's jobs",
    )
    order = [x.decode() for x in r.lrange(order_key, 0, -1)]
    last_small = max(i for i, c in enumerate(order) if c == "small")
    big_before = order[:last_small].count("big")
    common.ratio_line(
        f"fairness: the burst's jobs done before the other key's {FEW} all finished",
        float(big_before),
        "<=",
        999.0,
        fmt="{:.0f}",
    )


if __name__ == "__main__":
    sys.exit(main())

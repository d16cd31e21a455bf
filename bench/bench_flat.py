#!/usr/bin/env python
"""Things that must stay flat: step time and checkpoint size over a loop, the deadline
scan as waiting timers pile up, and worker memory as waiting instances pile up.

1. The loop model (bench/models.py): 1,000 iterations of decode → apply (complete the
   user task, loop back) → encode; the first and last 100 iterations' mean step time
   and checkpoint size, and their ratio. SpiffWorkflow 3.2 runs the same XML beside it
   for reference (its step time grows about 30x over 330 iterations).
2. ``scheduler.deadlines.claim_due`` on PostgreSQL with 1,000 vs 100,000 (and, without
   --quick, 1,000,000) waiting timers, of which the same 10 are due; rows bulk-inserted.
3. RSS of a real ``dormant worker`` (prefork x2) after triggers for a few instances vs
   after triggers for many (each instance left waiting on a 30-day timer).

    .venv/bin/python bench/bench_flat.py [--quick] [--skip-memory]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.bench_step import T0, Spiff, dormant_start, dormant_step, only_wait
from bench.models import LOOP, TIMER
from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.triggers import TaskCompleted


def first_last(xs: list[float], k: int) -> tuple[float, float]:
    return statistics.fmean(xs[:k]), statistics.fmean(xs[-k:])


def loop_flatness(iterations: int, spiff_iterations: int) -> None:
    common.line(f"1. loop model, {iterations} iterations (decode -> apply -> encode)", "")
    defn = read_bpmn(LOOP)[0]
    stored = dormant_start(defn, {"again": True, "orderId": "o-1", "amount": 42})
    times: list[float] = []
    sizes: list[int] = []
    for _ in range(iterations):
        tr = TaskCompleted(wait_id=only_wait(stored).id, variables={"again": True})
        t0 = time.perf_counter()
        stored = dormant_step(defn, stored, tr, T0)
        times.append(time.perf_counter() - t0)
        sizes.append(len(stored))
    k = max(1, min(100, iterations // 10))
    t_first, t_last = first_last(times, k)
    s_first, s_last = first_last([float(s) for s in sizes], k)
    common.line(
        f"   dormant step, first/last {k}", f"{t_first * 1e6:.0f} us / {t_last * 1e6:.0f} us"
    )
    common.line(f"   dormant checkpoint, first/last {k}", f"{s_first:.0f} B / {s_last:.0f} B")

    sp = Spiff()
    spec = sp.spec(LOOP, "bench_loop")
    sstored = sp.start(spec, {"again": True, "orderId": "o-1", "amount": 42})
    stimes: list[float] = []
    ssizes: list[int] = []
    for _ in range(spiff_iterations):
        t0 = time.perf_counter()
        sstored = sp.complete_user_task(sstored, {"again": True})
        stimes.append(time.perf_counter() - t0)
        ssizes.append(len(sstored))
    sk = max(1, min(100, spiff_iterations // 10))
    st_first, st_last = first_last(stimes, sk)
    ss_first, ss_last = first_last([float(s) for s in ssizes], sk)
    common.line(
        f"   (reference) spiff over {spiff_iterations}, first/last {sk}",
        f"step {st_first * 1e6:.0f} us / {st_last * 1e6:.0f} us ({st_last / st_first:.1f}x), "
        f"size {ss_first:.0f} B / {ss_last:.0f} B ({ss_last / ss_first:.1f}x)",
    )
    common.ratio_line(f"step time last/first {k} iterations (dormant)", t_last / t_first, "<=", 1.2)
    common.ratio_line(
        f"checkpoint size last/first {k} iterations (dormant)", s_last / s_first, "<=", 1.05
    )


def scan_flatness(sizes: list[int], due: int, rounds: int) -> None:
    from sqlalchemy import text

    from dormant.persistence.store import Store
    from dormant.scheduler.deadlines import claim_due

    common.line(f"2. deadline scan (claim_due on PostgreSQL), {due} due among N waiting timers", "")
    with common.scratch_database() as url:
        store = Store(url)
        now = datetime.now(UTC)
        have = 0
        results: dict[int, tuple[float, float]] = {}
        for n in sizes:
            t0 = time.perf_counter()
            with store.engine.begin() as conn:
                if have == 0:
                    conn.execute(
                        text(
                            "INSERT INTO deadlines (instance_id, wait_id, due_at, attempts) "
                            "SELECT 'due-' || g, 'w1', :due, 0 FROM generate_series(1, CAST(:k AS integer)) g"
                        ),
                        {"due": now - timedelta(seconds=5), "k": due},
                    )
                    have = due
                # The rest wait: due between one hour and thirty days from now.
                conn.execute(
                    text(
                        "INSERT INTO deadlines (instance_id, wait_id, due_at, attempts) "
                        "SELECT 'wait-' || g, 'w1', CAST(:base AS timestamptz) + (g % 2592000) * interval '1 second', 0 "
                        "FROM generate_series(CAST(:a AS integer), CAST(:b AS integer)) g"
                    ),
                    {"base": now + timedelta(hours=1), "a": have - due + 1, "b": n - due},
                )
                have = n
            with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE deadlines"))
            setup = time.perf_counter() - t0

            def reset() -> None:
                with store.engine.begin() as conn:
                    conn.execute(
                        text(
                            "UPDATE deadlines SET claimed_until = NULL, claim_token = NULL "
                            "WHERE instance_id LIKE 'due-%'"
                        )
                    )

            claim_ms: list[float] = []
            idle_ms: list[float] = []
            reset()
            claim_due(store, now, 500)  # warm-up: connection, statement and plan caches
            for _ in range(rounds):
                reset()
                t0 = time.perf_counter()
                got = claim_due(store, now, 500)
                claim_ms.append((time.perf_counter() - t0) * 1e3)
                assert len(got) == due, f"claimed {len(got)} of {due}"
                t0 = time.perf_counter()
                again = claim_due(store, now, 500)  # all claimed: the usual idle tick
                idle_ms.append((time.perf_counter() - t0) * 1e3)
                assert not again
            results[n] = (statistics.median(claim_ms), statistics.median(idle_ms))
            common.line(
                f"   {n:>9,} waiting timers",
                f"claim {due} due: {results[n][0]:.2f} ms, idle scan: {results[n][1]:.2f} ms (median of {rounds}; "
                f"setup {setup:.1f} s)",
            )
        store.close()
    small = sizes[0]
    for n in sizes[1:]:
        common.ratio_line(
            f"scan cost {n:,} / {small:,} waiting timers (claim)",
            results[n][0] / results[small][0],
            "<=",
            1.5,
        )
        common.ratio_line(
            f"scan cost {n:,} / {small:,} waiting timers (idle)",
            results[n][1] / results[small][1],
            "<=",
            1.5,
        )


def memory_flatness(few: int, many: int) -> None:
    import redis

    from bench import harness

    common.line(
        f"3. worker memory: RSS after triggers for {few} vs {few + many} instances (left waiting)",
        "",
    )
    logdir = Path(tempfile.mkdtemp(prefix="dormant-bench-"))
    with common.scratch_redis_db() as broker_url, common.scratch_database() as database_url:
        from bench.bench_triggers import count_status, publish_many
        from dormant.persistence.settings import Settings
        from dormant.persistence.store import Store
        from dormant.tasks import app as tasks_app

        tasks_app.configure(Settings.from_env(database_url=database_url, broker_url=broker_url))
        store = Store(settings=tasks_app.settings)
        store.deployments.deploy(TIMER, datetime.now(UTC))
        r = redis.Redis.from_url(broker_url)

        def starts(lo: int, hi: int) -> None:
            publish_many(
                tasks_app.app,
                "dormant.start",
                tasks_app.QUEUE,
                "trigger.start",
                [{"key": "bench_timer", "instance_id": f"t-{i}"} for i in range(lo, hi)],
                exchange=tasks_app.EXCHANGE.name,
            )

        def waiting(k: int) -> Any:
            return lambda: count_status(store, "bench_timer", "active") >= k

        starts(0, few)
        worker = None
        try:
            _, worker = harness.drain(
                r,
                tasks_app.QUEUE.name,
                lambda: harness.dormant_worker(broker_url, database_url, logdir),
                done=waiting(few),
            )
            time.sleep(0.5)
            before = worker.rss_kib()
            starts(few, few + many)
            t0 = time.perf_counter()
            while not waiting(few + many)():
                if not worker.alive():
                    raise SystemExit(f"worker died:\n{worker.tail()}")
                time.sleep(0.1)
            secs = time.perf_counter() - t0
            time.sleep(0.5)
            after = worker.rss_kib()
        finally:
            if worker is not None:
                worker.stop()
            store.close()
    common.line("   RSS before (KiB)", json.dumps(before))
    common.line(f"   RSS after {many} more start triggers in {secs:.1f} s (KiB)", json.dumps(after))
    pool = [k for k in before if k.startswith("child") and k in after]
    b = sum(before[k] for k in pool) or before["main"]
    a = sum(after[k] for k in pool) or after["main"]
    common.ratio_line(f"pool RSS {few + many} / {few} waiting instances", a / b, "<=", 1.10)
    common.ratio_line(
        f"main RSS {few + many} / {few} waiting instances",
        after["main"] / before["main"],
        "<=",
        1.10,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs")
    ap.add_argument("--skip-memory", action="store_true", help="no worker / broker part")
    ap.add_argument(
        "--million", action="store_true", help="also scan with 1,000,000 waiting timers"
    )
    args = ap.parse_args()
    common.header("bench_flat: flat step, checkpoint size, deadline scan and worker memory")
    loop_flatness(1000, 200 if args.quick else 330)
    sizes = [1_000, 100_000] if args.quick else [1_000, 100_000, 1_000_000]
    if args.million and args.quick:
        sizes.append(1_000_000)
    scan_flatness(sizes, due=10, rounds=10 if args.quick else 30)
    if not args.skip_memory:
        memory_flatness(200, 2_000 if args.quick else 20_000)
    return common.summary()


if __name__ == "__main__":
    sys.exit(main())

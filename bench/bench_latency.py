"""Latency beside throughput: start → completed for one-job instances (the job through
the broker) at 25 %, 50 % and 90 % of the capacity measured in the same run, and send →
completed for message triggers at 50 % of theirs.

    .venv/bin/python bench/bench_latency.py [--seconds S] [--quick] [--rounds R]
        [--no-vacuum-first]

One ``dormant worker -c 2`` (the real CLI, as bench_triggers starts it) runs on a
scratch PostgreSQL database and a scratch Redis db. Capacity is the drain rate of a
batch sent through ``Client.start_many`` (or ``Client.send_messages``) to the warm
worker. Each load is then an open loop: ``Client.start`` (``Client.send_message``)
called on a fixed schedule for ``--seconds``, whether or not earlier ones finished, so
queueing shows in the figures as it would for a producer. A unit's latency is its
instance row's last write (``updated_at``, the worker's clock on this machine) minus
the moment the Client call began; beside it, where that went: the call to the start
applied (the row's ``created_at``) and the start applied to the completion.

``--rounds`` rounds (3), each measuring the capacity again and offering the three loads
at its fractions, as bench_triggers judges its figures: on a shared machine one
neighbour's burst moves one round, not the verdict. Targets (issue 25), on the medians
of the rounds at half of capacity: p50 ≤ 50 ms and p99 ≤ 250 ms; the other loads and
every round are printed beside them. Each load starts from a vacuumed database with no
autovacuum running (``quiet``; ``--no-vacuum-first`` offers it right after the phase
before it) and prints the autovacuum runs it met.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common, harness
from bench.models import MESSAGE, SERVICE

LOADS = (0.25, 0.50, 0.90)
JUDGED_LOAD = 0.50
P50_TARGET_MS = 50.0
P99_TARGET_MS = 250.0


def percentile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank percentile of already sorted values."""
    rank = max(1, min(len(sorted_values), round(q * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def completed_times(engine: Any, key: str, by: str = "id") -> dict[str, tuple[datetime, datetime]]:
    """Each completed instance of ``key``, named by ``by`` (its id or business key), with
    its row's first and last write (``created_at``: its start applied; ``updated_at``)."""
    from sqlalchemy import text

    named = {"id": "id", "business_key": "business_key"}[by]
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                f"SELECT {named} AS name, created_at, updated_at FROM instances "
                "WHERE key = :k AND status = 'completed'"
            ),
            {"k": key},
        ).all()
    return {row.name: (row.created_at, row.updated_at) for row in rows}


def completed_at(engine: Any, key: str, by: str = "id") -> dict[str, datetime]:
    """Each completed instance of ``key``, named by ``by``, with its row's last write."""
    return {name: last for name, (_, last) in completed_times(engine, key, by).items()}


def legs(engine: Any, key: str, sent: dict[str, float]) -> tuple[list[float], list[float]]:
    """Where each completed instance's latency went, sorted, in ms: the Client call to
    its start applied (the start trigger's hop and queue), and its start applied to its
    completion (the job's hop, its run and its result's apply)."""
    times = completed_times(engine, key)
    done = [(at, times[i]) for i, at in sent.items() if i in times]
    started = sorted((first.timestamp() - at) * 1000.0 for at, (first, _) in done)
    finished = sorted((last - first).total_seconds() * 1000.0 for _, (first, last) in done)
    return started, finished


def report_legs(label: str, started: list[float], finished: list[float]) -> None:
    """One line beside a load's figures: the p50 and p99 of each leg (``legs``)."""
    if not started:
        return
    common.line(
        f"{label}: of which",
        f"call -> start applied p50 {percentile(started, 0.50):6.1f} / p99 "
        f"{percentile(started, 0.99):6.1f} ms; start applied -> completed p50 "
        f"{percentile(finished, 0.50):6.1f} / p99 {percentile(finished, 0.99):6.1f} ms",
    )


def quiet(label: str, database_url: str, vacuum_first: bool) -> int:
    """Before a load: the database vacuumed and no autovacuum running
    (bench/common.py ``quiet_database``), printed, unless ``vacuum_first`` is off
    (``--no-vacuum-first``: the load right after the phase before it); returns the
    autovacuum runs so far."""
    if vacuum_first:
        seconds = common.quiet_database(database_url)
        common.line(f"{label}: VACUUM (ANALYZE) first, then no autovacuum", f"{seconds:.1f} s")
    else:
        common.line(f"{label}: offered right after the phase before it", "--no-vacuum-first")
    return common.autovacuum_runs(database_url)


def add_vacuum_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--no-vacuum-first",
        action="store_true",
        help="offer each latency load right after the bulk phase before it, without "
        "VACUUM (ANALYZE) and without waiting for autovacuum to finish (for comparison)",
    )


def met_vacuums(label: str, database_url: str, before: int) -> None:
    """After a load: how many autovacuum runs it met (its own dead rows)."""
    runs = common.autovacuum_runs(database_url) - before
    common.line(f"{label}: autovacuum runs during the load", f"{runs}")


def wait_until(done: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not done in {timeout:.0f} s")
        time.sleep(0.05)


def count(engine: Any, key: str, status: str) -> int:
    from sqlalchemy import text

    with engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM instances WHERE key = :k AND status = :s"),
                {"k": key, "s": status},
            ).scalar_one()
        )


def paced(rate: float, seconds: float, send: Callable[[int], str]) -> dict[str, float]:
    """Call ``send(i)`` at ``rate`` per second for ``seconds``: an open loop (a late call
    is made at once, never skipped). Each returned id with the wall time its call began."""
    sent: dict[str, float] = {}
    total = max(1, int(rate * seconds))
    began = time.perf_counter()
    for i in range(total):
        due = began + i / rate
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        at = time.time()
        sent[send(i)] = at
    return sent


def latencies_ms(sent: dict[str, float], done: dict[str, datetime]) -> list[float]:
    return sorted((done[i].timestamp() - at) * 1000.0 for i, at in sent.items() if i in done)


def report(label: str, values: list[float], expected: int) -> tuple[float, float] | None:
    """Print one load's percentiles; its (p50, p99), or None when nothing completed."""
    if not values:
        common.line(label, "nothing completed")
        return None
    p50, p90, p99 = (percentile(values, q) for q in (0.50, 0.90, 0.99))
    common.line(
        label,
        f"p50 {p50:6.1f} ms  p90 {p90:6.1f} ms  p99 {p99:6.1f} ms  "
        f"({len(values)} of {expected} completed)",
    )
    return p50, p99


def judge(label: str, rounds: list[tuple[float, float] | None]) -> None:
    """The verdict on the rounds' medians (a round where nothing completed fails)."""
    done = [r for r in rounds if r is not None]
    if len(done) < len(rounds) or not done:
        common.ratio_line(f"{label}: p50 ms", float("inf"), "<=", P50_TARGET_MS, "{:.1f}")
        return
    p50s = ", ".join(f"{p50:.1f}" for p50, _ in done)
    p99s = ", ".join(f"{p99:.1f}" for _, p99 in done)
    common.ratio_line(
        f"{label}: p50 ms, median of {len(done)} rounds ({p50s})",
        common.median([p50 for p50, _ in done]),
        "<=",
        P50_TARGET_MS,
        "{:.1f}",
    )
    common.ratio_line(
        f"{label}: p99 ms, median of {len(done)} rounds ({p99s})",
        common.median([p99 for _, p99 in done]),
        "<=",
        P99_TARGET_MS,
        "{:.1f}",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=None, help="each load's length (default 20)")
    ap.add_argument("--quick", action="store_true", help="5 s loads, 500-unit capacity batches")
    ap.add_argument("--rounds", type=int, default=3, help="rounds judged on their medians (3)")
    add_vacuum_option(ap)
    args = ap.parse_args()
    seconds = args.seconds or (5.0 if args.quick else 20.0)
    batch = 500 if args.quick else 2000
    rounds = max(1, args.rounds)
    common.header(
        f"bench_latency: {rounds} rounds, {seconds:.0f} s per load, one worker (prefork x2)"
    )
    logdir = Path(tempfile.mkdtemp(prefix="dormant-bench-latency-"))
    common.line("worker logs", str(logdir))

    with common.scratch_redis_db() as broker_url, common.scratch_database() as database_url:
        from sqlalchemy import create_engine

        from dormant import Client

        engine = create_engine(database_url)
        client = Client(database_url=database_url, broker_url=broker_url)
        client.deploy(SERVICE)
        client.deploy(MESSAGE)
        worker = harness.dormant_worker(broker_url, database_url, logdir)
        try:
            # warm-up: the worker's pool is up and its first connections are made
            client.start_many("bench_service", [{"i": i} for i in range(50)])
            wait_until(lambda: count(engine, "bench_service", "completed") >= 50, 120, "warm-up")

            def capacity() -> float:
                before = count(engine, "bench_service", "completed")
                began = time.perf_counter()
                client.start_many("bench_service", [{"i": i} for i in range(batch)])
                wait_until(
                    lambda: count(engine, "bench_service", "completed") >= before + batch,
                    600,
                    "capacity batch",
                )
                return batch / (time.perf_counter() - began)

            judged: list[tuple[float, float] | None] = []
            for round_number in range(1, rounds + 1):
                rate = capacity()
                common.line(
                    f"round {round_number}: capacity, one-job instances through the Client, "
                    "the job through the broker",
                    f"{rate:8.0f} completed/s ({batch} sent by Client.start_many)",
                )
                for load in LOADS:
                    label = (
                        f"round {round_number}: start -> completed at {load:.0%} of capacity "
                        f"({rate * load:.0f}/s)"
                    )
                    vacuums = quiet(label, database_url, not args.no_vacuum_first)
                    before = count(engine, "bench_service", "completed")
                    sent = paced(
                        rate * load, seconds, lambda i: client.start("bench_service", {"i": i})
                    )
                    wait_until(
                        lambda: count(engine, "bench_service", "completed") >= before + len(sent),  # noqa: B023
                        600,
                        f"load {load:.0%}",
                    )
                    met_vacuums(label, database_url, vacuums)
                    figures = report(
                        label,
                        latencies_ms(sent, completed_at(engine, "bench_service")),
                        len(sent),
                    )
                    report_legs(label, *legs(engine, "bench_service", sent))
                    if load == JUDGED_LOAD:
                        judged.append(figures)
            judge(f"start -> completed at {JUDGED_LOAD:.0%} of capacity", judged)

            # message triggers: instances parked on the catch first (their business key
            # names them), then woken
            def park(tag: str, n: int) -> None:
                before = count(engine, "bench_message", "active")
                client.start_many(
                    "bench_message",
                    [{"orderId": f"{tag}-{i}"} for i in range(n)],
                    business_keys=[f"{tag}-{i}" for i in range(n)],
                )
                wait_until(
                    lambda: count(engine, "bench_message", "active") >= before + n,
                    600,
                    "parking",
                )

            park("cap", batch)
            began = time.perf_counter()
            client.send_messages(
                [{"name": "bench-go", "correlation_key": f"cap-{i}"} for i in range(batch)]
            )
            wait_until(
                lambda: count(engine, "bench_message", "completed") >= batch, 600, "messages"
            )
            message_rate = batch / (time.perf_counter() - began)
            common.line(
                "capacity: message triggers through the Client",
                f"{message_rate:8.0f} triggers/s ({batch} sent by Client.send_messages)",
            )
            wake_rate = message_rate * JUDGED_LOAD
            n = max(1, int(wake_rate * seconds))
            park("lat", n)

            def wake(i: int) -> str:
                client.send_message("bench-go", f"lat-{i}")
                return f"lat-{i}"

            sent = paced(wake_rate, seconds, wake)
            wait_until(
                lambda: count(engine, "bench_message", "completed") >= batch + len(sent),
                600,
                "message load",
            )
            report(
                f"send_message -> completed at {JUDGED_LOAD:.0%} of capacity ({wake_rate:.0f}/s)",
                latencies_ms(sent, completed_at(engine, "bench_message", by="business_key")),
                len(sent),
            )
        finally:
            worker.stop()
            engine.dispose()
    return common.summary()


if __name__ == "__main__":
    sys.exit(main())

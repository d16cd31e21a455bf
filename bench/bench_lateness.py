#!/usr/bin/env python
"""Timer lateness under load: many timers come due while triggers flow through the workers.

On a fresh database and Redis db: K instances parked on a timer catch whose due times
(``timeDate``) are spread over the load window, half uniformly and half in bursts of
``--burst`` at the same instant; then ONE real ``dormant worker -c 2`` (its default
queues: ``dormant.timers`` first, then ``dormant``) and ONE real ``dormant beat``, while
this process publishes one-job instances (start → job → result: three triggers each) at
``--rate`` triggers/s for ``--seconds``. With ``--timer-worker``, a second worker of its
own beside it: ``dormant worker --queues dormant.timers -c 1``, the punctual option.

Measured by the database clock, from two bench-only triggers on ``deadlines``: the
claim (the scan's UPDATE that sets a claim token: ``clock_timestamp()``) and the fire (a
deferred constraint trigger on the row's DELETE, which only the transaction that applied
the fire does: ``clock_timestamp()`` at its commit). Prints the lateness (fired - due;
never early) and the claim-to-fire lag as p50/p90/p99/max and a histogram, the load
that actually flowed, and p99 lateness against the target (≤ 1 s). Bounded: the load
runs ``--seconds`` (default 60), then at most 120 s of drain.

    .venv/bin/python bench/bench_lateness.py [--rate 200] [--seconds 60] [--timers 2000]
        [--scan-every S] [--timer-worker]
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common, harness
from bench.models import _HEAD, SERVICE

# start -> timer catch at an absolute date (the variable dueAt) -> end
TIMER_AT = (
    _HEAD
    + """  <bpmn:process id="bench_timer_at" name="Bench timer at" isExecutable="true">
    <bpmn:startEvent id="start"><bpmn:outgoing>f1</bpmn:outgoing></bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait" />
    <bpmn:intermediateCatchEvent id="wait">
      <bpmn:incoming>f1</bpmn:incoming><bpmn:outgoing>f2</bpmn:outgoing>
      <bpmn:timerEventDefinition id="wait-timer">
        <bpmn:timeDate xsi:type="bpmn:tFormalExpression">=dueAt</bpmn:timeDate>
      </bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end" />
    <bpmn:endEvent id="end"><bpmn:incoming>f2</bpmn:incoming></bpmn:endEvent>
  </bpmn:process>
</bpmn:definitions>
"""
)

# Bench-only: when each deadline row was claimed and when the fire that deleted it
# committed, by the database clock. Not part of dormant's schema.
PROBES = """
CREATE TABLE bench_claims (instance_id text, wait_id text, claimed_at timestamptz);
CREATE TABLE bench_fires (instance_id text, wait_id text, due_at timestamptz, fired_at timestamptz);
CREATE FUNCTION bench_claimed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.claim_token IS NOT NULL AND NEW.claim_token IS DISTINCT FROM OLD.claim_token THEN
    INSERT INTO bench_claims VALUES (NEW.instance_id, NEW.wait_id, clock_timestamp());
  END IF;
  RETURN NULL;
END $$;
CREATE FUNCTION bench_fired() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO bench_fires VALUES (OLD.instance_id, OLD.wait_id, OLD.due_at, clock_timestamp());
  RETURN NULL;
END $$;
CREATE TRIGGER bench_claimed AFTER UPDATE ON deadlines
  FOR EACH ROW EXECUTE FUNCTION bench_claimed();
CREATE CONSTRAINT TRIGGER bench_fired AFTER DELETE ON deadlines
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bench_fired();
"""

BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0)


def percentile(xs: list[float], p: float) -> float:
    """Nearest rank: the smallest value with at least p % of the values at or below it."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


def histogram(xs: list[float]) -> str:
    edges = (0.0, *BUCKETS)
    parts = []
    for lo, hi in zip(edges, (*BUCKETS, float("inf")), strict=True):
        k = sum(1 for x in xs if lo <= x < hi)
        parts.append(f"[{lo:g},{hi:g}) s: {k}")
    return "; ".join(parts)


def beat(
    broker_url: str, database_url: str, logdir: Path, every: float | None
) -> subprocess.Popen[bytes]:
    """The real ``dormant beat`` (its schedule file in the log directory, not the repo);
    with ``every``, through bench/beat_every.py with that scan interval."""
    out = open(logdir / "beat.log", "ab")
    argv = (
        [harness.PY, "-m", "dormant.tasks.cli", "beat", "--loglevel", "WARNING"]
        if every is None
        else [harness.PY, "-m", "bench.beat_every"]
    )
    extra = {} if every is None else {"BENCH_SCAN_EVERY": str(every)}
    proc = subprocess.Popen(
        argv,
        env=harness.env_with(
            DORMANT_BROKER_URL=broker_url, DORMANT_DATABASE_URL=database_url, **extra
        ),
        cwd=str(logdir),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    out.close()
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def load(rate: float, seconds: float, stop_at: threading.Event, sent: list[int]) -> None:
    """Publish one-job instance starts, paced so that rate/3 start per second."""
    from dormant.tasks import app as tasks_app

    per_second = rate / 3
    t0 = time.perf_counter()
    i = 0
    with tasks_app.app.producer_or_acquire() as producer:
        while not stop_at.is_set():
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                break
            while i < int(elapsed * per_second):
                tasks_app.app.send_task(
                    "dormant.start",
                    kwargs={"key": "bench_service", "instance_id": f"s-{i}", "variables": {}},
                    queue=tasks_app.QUEUE,
                    routing_key="trigger.start",
                    exchange=tasks_app.EXCHANGE.name,
                    producer=producer,
                )
                i += 1
            time.sleep(0.01)
    sent.append(i)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=200.0, help="offered triggers/s (default 200)")
    ap.add_argument("--seconds", type=float, default=60.0, help="load duration (default 60)")
    ap.add_argument("--timers", type=int, default=2000, help="timers due in the window")
    ap.add_argument("--burst", type=int, default=100, help="timers due at the same instant")
    ap.add_argument(
        "--scan-every",
        type=float,
        default=None,
        help="beat's deadline scan interval, s (default: dormant's)",
    )
    ap.add_argument(
        "--timer-worker",
        action="store_true",
        help="also a worker of its own on the timer queue (--queues dormant.timers -c 1)",
    )
    args = ap.parse_args()

    workers = "one worker (prefork x2" + (
        ") beside a timer worker (dormant.timers, x1)" if args.timer_worker else ", both queues)"
    )
    common.header(
        f"bench_lateness: {args.timers} timers due while {args.rate:.0f} triggers/s are "
        f"offered for {args.seconds:.0f} s; {workers} and one beat"
    )
    logdir = Path(tempfile.mkdtemp(prefix="dormant-bench-late-"))
    common.line("logs", str(logdir))

    import redis
    from sqlalchemy import text

    from dormant.persistence.settings import Settings
    from dormant.persistence.store import NewInstance, Store
    from dormant.tasks import app as tasks_app
    from dormant.tasks import triggers

    common.line(
        "scheduler settings",
        f"scan every {args.scan_every or tasks_app.SCAN_DEADLINES_EVERY} s, batch {triggers.SCAN_BATCH}",
    )
    with common.scratch_redis_db() as broker_url, common.scratch_database() as database_url:
        tasks_app.configure(Settings.from_env(database_url=database_url, broker_url=broker_url))
        store = Store(settings=tasks_app.settings)
        now = datetime.now(UTC)
        store.deployments.deploy(TIMER_AT, now)
        store.deployments.deploy(SERVICE, now)
        with store.engine.begin() as conn:
            conn.execute(text(PROBES))

        # Park the timers in-process (setup, no broker): due from +40 s over the window.
        t_setup = time.perf_counter()
        first_due = now + timedelta(seconds=40)
        window = args.seconds - 10
        k_uniform = args.timers // 2
        dues = [first_due + timedelta(seconds=window * j / k_uniform) for j in range(k_uniform)]
        bursts = max(1, (args.timers - k_uniform) // args.burst)
        for b in range(bursts):
            at = first_due + timedelta(seconds=window * (b + 0.5) / bursts)
            dues += [at] * args.burst
        for j, due in enumerate(dues):
            store.start(
                NewInstance(
                    "bench_timer_at", f"t-{j}", {"dueAt": due.isoformat().replace("+00:00", "Z")}
                ),
                now=datetime.now(UTC),
            )
        common.line(
            "    (setup) timers parked",
            f"{len(dues)} in {time.perf_counter() - t_setup:.1f} s "
            f"({k_uniform} uniform, {bursts} bursts of {args.burst})",
        )
        if datetime.now(UTC) > first_due - timedelta(seconds=10):
            raise SystemExit("bench_lateness: setup took too long; fewer --timers")

        worker = harness.dormant_worker(broker_url, database_url, logdir, "late-worker")
        timer_worker = (
            harness.dormant_worker(
                broker_url,
                database_url,
                logdir,
                "late-timer-worker",
                concurrency=1,
                queues=tasks_app.TIMER_QUEUE.name,
            )
            if args.timer_worker
            else None
        )
        beater = beat(broker_url, database_url, logdir, args.scan_every)
        stop_at = threading.Event()
        sent: list[int] = []
        try:
            # Load starts ~5 s before the first timer is due and runs the window.
            time.sleep(max(0.0, (first_due - datetime.now(UTC)).total_seconds() - 5))
            t_load = time.perf_counter()
            loader = threading.Thread(target=load, args=(args.rate, args.seconds, stop_at, sent))
            loader.start()
            loader.join()
            load_secs = time.perf_counter() - t_load
            with store.engine.connect() as conn:
                done_in_window = conn.execute(
                    text(
                        "SELECT count(*) FROM instances WHERE key = 'bench_service' "
                        "AND status = 'completed'"
                    )
                ).scalar_one()
            r = redis.Redis.from_url(broker_url)
            backlog = harness.queue_depth(r, tasks_app.QUEUE.name)
            timer_backlog = harness.queue_depth(r, tasks_app.TIMER_QUEUE.name)
            # Drain: every timer fired, bounded.
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                with store.engine.connect() as conn:
                    fired = conn.execute(
                        text("SELECT count(*) FROM bench_fires WHERE instance_id LIKE 't-%'")
                    ).scalar_one()
                if fired >= len(dues):
                    break
                time.sleep(0.5)
        finally:
            stop_at.set()
            stop(beater)
            worker.stop()
            if timer_worker is not None:
                timer_worker.stop()

        with store.engine.connect() as conn:
            rows: list[Any] = conn.execute(
                text(
                    "SELECT EXTRACT(EPOCH FROM f.fired_at - f.due_at), "
                    "EXTRACT(EPOCH FROM f.fired_at - c.claimed_at), "
                    "EXTRACT(EPOCH FROM c.claimed_at - f.due_at) "
                    "FROM bench_fires f JOIN LATERAL (SELECT max(claimed_at) AS claimed_at "
                    "FROM bench_claims c WHERE c.instance_id = f.instance_id "
                    "AND c.wait_id = f.wait_id) c ON true WHERE f.instance_id LIKE 't-%'"
                )
            ).all()
            claims = conn.execute(
                text("SELECT count(*) FROM bench_claims WHERE instance_id LIKE 't-%'")
            ).scalar_one()
        store.close()

    offered = sent[0] * 3 / load_secs if sent else 0.0
    flowed = done_in_window * 3 / load_secs
    common.line(
        "load offered",
        f"{offered:.0f} triggers/s ({sent[0] if sent else 0} one-job instances in {load_secs:.1f} s)",
    )
    common.line(
        "load that flowed",
        f"{flowed:.0f} triggers/s ({done_in_window} instances completed in the window; "
        f"{backlog} tasks still queued in {tasks_app.QUEUE.name} at its end, "
        f"{timer_backlog} in {tasks_app.TIMER_QUEUE.name})",
    )
    lateness = [float(r[0]) for r in rows]
    lag = [float(r[1]) for r in rows if r[1] is not None]
    to_claim = [float(r[2]) for r in rows if r[2] is not None]
    common.line("timers fired", f"{len(lateness)} of {len(dues)} ({claims} claims)")
    if not lateness:
        common.line("lateness", "no timer fired")
        return common.summary()
    early = sum(1 for x in lateness if x < 0)
    for label, xs in (
        ("lateness (fired - due)", lateness),
        ("due -> claimed (the scan's wait)", to_claim),
        ("claimed -> fired (claim-to-fire lag)", lag),
    ):
        common.line(
            label,
            f"p50 {percentile(xs, 50):.3f} s, p90 {percentile(xs, 90):.3f} s, "
            f"p99 {percentile(xs, 99):.3f} s, max {max(xs):.3f} s",
        )
    common.line("lateness histogram", histogram(lateness))
    common.line("fired early (fired < due)", f"{early}")
    common.ratio_line("timer lateness p99, s", percentile(lateness, 99), "<=", 1.0, "{:.3f}")
    common.ratio_line("timers fired early", float(early), "<=", 0.0, "{:.0f}")
    common.ratio_line(
        "load that flowed / offered", flowed / offered if offered else 0.0, ">=", 0.95
    )
    return common.summary()


if __name__ == "__main__":
    sys.exit(main())

"""The soak: a realistic mix of instances under a random fault every minute.

    .venv/bin/python bench/soak.py [--minutes 30] [--fault-every 60] [--rate 4]
                                   [--service-faults] [--seed N]

Mix (started at ``--rate`` instances per second, by weight): a timer (PT5S), a message
wait (the soak sends its message 2-20 s later), a user task (completed 2-20 s later,
except one in ten left open: *waiting as expected*), a job, a flaky job (fails its
first run: an incident, retried by the engine's policy). Faults, one per
``--fault-every`` seconds, touching only the soak's own processes and database: worker
SIGKILL (restarted as a process manager would), worker SIGSTOP for 15 s, beat SIGKILL,
every connection to the soak's database terminated. ``--service-faults`` adds a
PostgreSQL restart and a Redis restart — they cut everyone using those services: only
on a machine of your own.

At the end it stops starting, drains (up to 3 min) and prints a table per kind:
started, completed, waiting as expected, stuck (= started - completed - expected
waiting); the faults injected; worker RSS at the first and the last minute. Exit
status 0 when stuck = 0, 1 otherwise. Not a test, not in CI.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import children_of, rss_kib, scratch_database, scratch_redis_db
from tests.faults.kit import included_worker, revive
from tests.faults.test_connection_kill import kill_connections
from tests.integration.conftest import Proc, Stack
from tests.integration.waitkit import (
    end,
    message_catch,
    model,
    start,
    timer_catch,
    user_task,
)

KINDS = {"timer": 2, "message": 3, "user_task": 2, "job": 3, "incident": 1}
ENV = {
    "DORMANT_DEADLINE_CLAIM_SECONDS": "5",
    "DORMANT_OUTBOX_SWEEP_AFTER_SECONDS": "3",
    "DORMANT_REDIS_VISIBILITY_TIMEOUT": "10",
    "DORMANT_INCIDENT_RETRY_ATTEMPTS": "3",
    "DORMANT_INCIDENT_RETRY_BACKOFF_SECONDS": "2",
}


def _service(job_type: str) -> str:
    return (
        '<bpmn:serviceTask id="job"><bpmn:extensionElements>'
        f'<zeebe:taskDefinition type="{job_type}" retries="1"/>'
        "</bpmn:extensionElements></bpmn:serviceTask>"
    )


def models(tag: str) -> dict[str, str]:
    def line(kind: str, node: str, node_id: str, **kw: Any) -> str:
        return model(
            f"soak_{kind}_{tag}",
            start() + node + end(),
            [("start", node_id), (node_id, "end")],
            **kw,
        )

    return {
        "timer": line("timer", timer_catch("tm", "PT5S"), "tm"),
        "message": line(
            "message", message_catch("mc", f"go-{tag}"), "mc", messages={f"go-{tag}": "=id"}
        ),
        "user_task": line("user_task", user_task("ut"), "ut"),
        "job": line("job", _service("fault-record"), "job"),
        "incident": line("incident", _service("fault-flaky"), "job"),
    }


def group_rss(proc: Proc) -> int:
    if proc.popen is None or proc.popen.poll() is not None:
        return 0
    pids = [proc.popen.pid, *children_of(proc.popen.pid)]
    total = 0
    for pid in pids:
        try:
            total += rss_kib(pid)
        except OSError:
            pass
    return total


class Soak:
    def __init__(self, stack: Stack, args: argparse.Namespace) -> None:
        self.s = stack
        self.args = args
        self.rng = random.Random(args.seed)
        self.tag = uuid.uuid4().hex[:6]
        self.started: dict[str, list[str]] = {k: [] for k in KINDS}
        self.expected_open: set[str] = set()
        self.todo: list[tuple[float, str, str]] = []  # (at, kind, instance id)
        self.faults: dict[str, int] = {}
        self.rss: list[tuple[float, int]] = []
        self.workers: list[Proc] = []
        self.beat: Proc | None = None

    def processes(self) -> None:
        self.workers = [included_worker(self.s), included_worker(self.s)]
        self.beat = self.s.beat()

    def revive_all(self) -> None:
        self.workers = [revive(self.s, w) for w in self.workers]
        assert self.beat is not None
        self.beat = revive(self.s, self.beat)

    def start_one(self, now: float) -> None:
        kind = self.rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
        iid = self.s.client.start(f"soak_{kind}_{self.tag}", {"id": uuid.uuid4().hex})
        self.started[kind].append(iid)
        if kind == "user_task" and self.rng.random() < 0.1:
            self.expected_open.add(iid)
        elif kind in ("message", "user_task"):
            self.todo.append((now + self.rng.uniform(2, 20), kind, iid))

    def drive(self, now: float) -> None:
        later = []
        for at, kind, iid in self.todo:
            if at > now or not self._act(kind, iid):
                later.append((at if at > now else now + 2, kind, iid))
        self.todo = later

    def _act(self, kind: str, iid: str) -> bool:
        try:
            if kind == "message":
                view = self.s.client.instance(iid)
                if "id" not in view.variables:
                    return False
                self.s.client.send_message(
                    f"go-{self.tag}", view.variables["id"], message_id=f"m-{iid}", ttl=600
                )
                return True
            tasks = self.s.client.user_tasks(iid)
            if not tasks:
                return False
            self.s.client.complete_task(tasks[0].id, {})
            return True
        except Exception:
            return False  # the database is being cut: try again in 2 s

    def fault(self) -> None:
        choices = ["worker_sigkill", "worker_sigstop", "beat_sigkill", "connection_kill"]
        if self.args.service_faults:
            choices += ["postgresql_restart", "redis_restart"]
        what = self.rng.choice(choices)
        self.faults[what] = self.faults.get(what, 0) + 1
        print(f"  t+{time.monotonic() - self.t0:5.0f}s fault: {what}", flush=True)
        if what == "worker_sigkill":
            self.rng.choice(self.workers).stop(sig=signal.SIGKILL)
        elif what == "worker_sigstop":
            w = self.rng.choice(self.workers)
            assert w.popen is not None
            os.killpg(w.popen.pid, signal.SIGSTOP)
            time.sleep(15)
            os.killpg(w.popen.pid, signal.SIGCONT)
        elif what == "beat_sigkill":
            assert self.beat is not None
            self.beat.stop(sig=signal.SIGKILL)
        elif what == "connection_kill":
            kill_connections(self.s.database_url.rsplit("/", 1)[1])
        elif what == "postgresql_restart":
            from tests.faults.conftest import restart_postgresql

            restart_postgresql()
        else:
            from tests.faults.conftest import restart_redis

            restart_redis(3.0)
        time.sleep(1.0)
        self.revive_all()

    def run(self) -> int:
        self.t0 = time.monotonic()
        for kind, xml in models(self.tag).items():
            self.s.client.deploy(xml)
            del kind
        self.processes()
        until = self.t0 + self.args.minutes * 60
        next_fault = self.t0 + self.args.fault_every
        next_rss = self.t0 + 30
        credit = 0.0
        last = time.monotonic()
        while (now := time.monotonic()) < until:
            credit += (now - last) * self.args.rate
            last = now
            while credit >= 1:
                credit -= 1
                try:
                    self.start_one(now)
                except Exception:
                    pass  # the Client refused while the database is cut: not started
            self.drive(now)
            if now >= next_fault:
                self.fault()
                next_fault = time.monotonic() + self.args.fault_every
            if now >= next_rss:
                self.rss.append((now - self.t0, sum(group_rss(w) for w in self.workers)))
                next_rss = now + 30
            time.sleep(0.2)
        self.revive_all()
        drain_until = time.monotonic() + 180
        while time.monotonic() < drain_until and self.stuck_ids():
            self.drive(time.monotonic())
            time.sleep(1)
        return self.report()

    def status(self, iid: str) -> str:
        try:
            return str(self.s.client.instance(iid).status)
        except Exception:
            return "unknown"

    def stuck_ids(self) -> list[str]:
        return [
            iid
            for ids in self.started.values()
            for iid in ids
            if iid not in self.expected_open and self.status(iid) != "completed"
        ]

    def report(self) -> int:
        print(f"\nsoak: {self.args.minutes:g} min, fault every {self.args.fault_every:g} s")
        print("| kind | started | completed | waiting as expected | stuck |")
        print("|---|---:|---:|---:|---:|")
        total_stuck = 0
        for kind, ids in self.started.items():
            st = [self.status(i) for i in ids]
            done = st.count("completed")
            expected = sum(
                1 for i, x in zip(ids, st, strict=True) if i in self.expected_open and x == "active"
            )
            stuck = len(ids) - done - expected
            total_stuck += stuck
            print(f"| {kind} | {len(ids)} | {done} | {expected} | {stuck} |")
        print("\n| fault | times |\n|---|---:|")
        for what, n in sorted(self.faults.items()):
            print(f"| {what} | {n} |")
        if self.rss:
            first, last = self.rss[0][1], self.rss[-1][1]
            print(
                f"\nworkers' RSS (both workers, all processes): {first / 1024:.0f} MiB at "
                f"t+{self.rss[0][0]:.0f}s, {last / 1024:.0f} MiB at t+{self.rss[-1][0]:.0f}s "
                "(a process restarted by a fault starts small again)"
            )
        print(f"\nstuck: {total_stuck}")
        return 0 if total_stuck == 0 else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--fault-every", type=float, default=60.0)
    p.add_argument("--rate", type=float, default=4.0, help="instances started per second")
    p.add_argument("--service-faults", action="store_true")
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="dormant-soak-") as tmp:
        tmpdir = Path(tmp)
        with scratch_database("dormant_soak") as db, scratch_redis_db() as broker:
            stack = Stack("pg_redis", db, broker, tmpdir)
            stack.env.update(ENV, DORMANT_TEST_JOB_LOG=str(tmpdir / "jobs.log"))
            print(f"soak: logs in {tmpdir}", flush=True)
            try:
                return Soak(stack, args).run()
            finally:
                stack.close()


if __name__ == "__main__":
    raise SystemExit(main())

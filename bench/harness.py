"""Worker subprocesses and queue-drain timing for the broker benchmarks.

Every throughput figure is measured the same way:
the tasks are queued first, then ONE worker process (prefork x2, acks late,
prefetch 1) is started and drains them. The clock starts when the queue first
shrinks (worker start-up is not counted) and stops when the queue and Redis' unacked
set are both empty and the caller's ``done()`` (e.g. a database count) holds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import REPO, children_of, rss_kib

PY = (
    str(REPO / ".venv" / "bin" / "python")
    if (REPO / ".venv" / "bin" / "python").exists()
    else sys.executable
)


class Worker:
    """One worker process group that this benchmark started (and only it stops)."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        logdir: Path,
        *,
        profiled: bool = False,
    ) -> None:
        self.name = name
        # Under py-spy the group leader is the profiler: the worker is its child.
        self.profiled = profiled
        self.log = logdir / f"{name}.log"
        out = open(self.log, "ab")
        self.popen = subprocess.Popen(
            argv,
            env=env,
            cwd=str(REPO),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def rss_kib(self) -> dict[str, int]:
        """RSS of the main process and of each pool child."""
        out = {"main": rss_kib(self.popen.pid)}
        for i, child in enumerate(sorted(children_of(self.popen.pid))):
            try:
                out[f"child{i}"] = rss_kib(child)
            except OSError:
                pass
        return out

    def stop(self) -> None:
        if self.popen.poll() is not None:
            return
        if self.profiled:
            # Stop the worker, not the profiler: py-spy writes its stacks when the
            # process it records exits (a SIGTERM to py-spy itself writes nothing).
            for child in children_of(self.popen.pid):
                try:
                    os.kill(child, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            try:
                self.popen.wait(timeout=60)
                return
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
            self.popen.wait(timeout=20)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(timeout=10)


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def baseline_worker(queue: str, broker_url: str, database_url: str, logdir: Path) -> Worker:
    return Worker(
        f"baseline-{queue}",
        [
            PY,
            "-m",
            "celery",
            "-A",
            "bench.celery_baseline",
            "worker",
            "-P",
            "prefork",
            "-c",
            "2",
            "-Q",
            queue,
            "--without-mingle",
            "--without-gossip",
            "--loglevel",
            "WARNING",
        ],
        env_with(BENCH_BROKER_URL=broker_url, BENCH_DATABASE_URL=database_url),
        logdir,
    )


# The bench's workers run ``bench-eager-job`` in place (tasks/jobs.py, "Eager jobs");
# ``bench-noop-job`` goes through the broker.
EAGER_JOB_TYPES = '{"bench-eager-job": {"eager": true}}'


def dormant_worker(
    broker_url: str,
    database_url: str,
    logdir: Path,
    name: str = "dormant-worker",
    *,
    concurrency: int = 2,
    queues: str | None = None,
    job_types: str = EAGER_JOB_TYPES,
    include: str = "bench.jobs",
    env: dict[str, str] | None = None,
) -> Worker:
    """The real ``dormant worker`` CLI: prefork x2, the dormant app's own settings
    (``bench-eager-job`` marked eager); ``queues``: its ``--queues`` (default: the CLI's);
    ``include``: the modules it loads; ``env``: more of its environment.

    With ``BENCH_PROFILE_DIR`` set, the worker and its pool children run under
    ``py-spy record`` (the bench extra), which writes their sampled stacks to
    ``<dir>/<name>.txt`` in collapsed form when the worker stops: where a trigger's
    time goes, Celery's share beside dormant's (``bench/profile_stacks.py`` sums it)."""
    profile_dir = os.environ.get("BENCH_PROFILE_DIR")
    profiler = (
        [
            str(Path(PY).parent / "py-spy"),
            "record",
            "--subprocesses",
            "--format",
            "raw",
            "--rate",
            "250",
            "--output",
            str(Path(profile_dir) / f"{name}.txt"),
            "--",
        ]
        if profile_dir
        else []
    )
    return Worker(
        name,
        [
            *profiler,
            PY,
            "-m",
            "dormant.tasks.cli",
            "worker",
            "--include",
            include,
            "--concurrency",
            str(concurrency),
            "--loglevel",
            "WARNING",
            *(["--queues", queues] if queues else []),
        ],
        env_with(
            DORMANT_BROKER_URL=broker_url,
            DORMANT_DATABASE_URL=database_url,
            DORMANT_JOB_TYPES=job_types,
            **(env or {}),
        ),
        logdir,
        profiled=bool(profiler),
    )


def queue_depth(redis_client: Any, queue: str) -> int:
    return int(redis_client.llen(queue))


def in_flight(redis_client: Any) -> int:
    return int(redis_client.hlen("unacked"))


def drain(
    redis_client: Any,
    queue: str,
    start_worker: Callable[[], Worker],
    *,
    done: Callable[[], bool] | None = None,
    timeout: float = 600.0,
) -> tuple[float, Worker]:
    """Start the worker on a filled queue; seconds from its first take to the end."""
    initial = queue_depth(redis_client, queue)
    worker = start_worker()
    deadline = time.monotonic() + timeout
    t0 = None
    while t0 is None:
        if queue_depth(redis_client, queue) < initial:
            t0 = time.perf_counter()
            break
        if not worker.alive():
            raise SystemExit(f"{worker.name} exited before taking a task:\n{worker.tail()}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{worker.name} took no task in {timeout}s:\n{worker.tail()}")
        time.sleep(0.002)
    last_check = 0.0
    while True:
        if queue_depth(redis_client, queue) == 0 and in_flight(redis_client) == 0:
            now = time.perf_counter()
            if done is None:
                return now - t0, worker
            if now - last_check > 0.02:
                last_check = now
                if done():
                    return time.perf_counter() - t0, worker
        if not worker.alive():
            raise SystemExit(f"{worker.name} died:\n{worker.tail()}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{worker.name} did not drain {queue} in {timeout}s:\n{worker.tail()}")
        time.sleep(0.005)

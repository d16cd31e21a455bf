#!/usr/bin/env python
"""One-job instances per second: the job run by Camunda's Python SDK job worker over
``dormant api`` (docs/camunda-api.md) beside the same job run through Celery, same run.

A scratch PostgreSQL database and a scratch Redis db; one real ``dormant worker``
(prefork x2) applies every trigger of both. Two models of one service task each:
``bench-noop-job`` is a Celery task (bench/jobs.py); ``bench-api-job`` is marked
``{"api": true}`` in ``DORMANT_JOB_TYPES``, so the worker's dispatch keeps it in
``api_jobs`` and the SDK's own worker loop (``create_job_worker``: activation by long
polling, then completion) takes it from a real ``dormant api`` process. Each side
starts N instances with ``Client.start_many`` and is timed until all N are completed:
the figure is completed instances (= jobs activated and completed) per second.

    .venv/bin/python bench/bench_api.py [--quick] [-n N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common, harness
from bench.models import SERVICE

API_SERVICE = SERVICE.replace(
    'id="bench_service" name="Bench service"', 'id="bench_api" name="Bench API job"'
).replace("bench-noop-job", "bench-api-job")
JOB_TYPES = json.dumps({"bench-eager-job": {"eager": True}, "bench-api-job": {"api": True}})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _completed(engine: Any, key: str) -> int:
    from sqlalchemy import text

    with engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM instances WHERE key = :k AND status = 'completed'"),
                {"k": key},
            ).scalar_one()
        )


def _wait(done: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not done in {timeout:.0f} s")
        time.sleep(0.05)


def _rate(client: Any, engine: Any, key: str, n: int) -> float:
    before = _completed(engine, key)
    began = time.perf_counter()
    client.start_many(key, [{"i": i} for i in range(n)])
    _wait(lambda: _completed(engine, key) >= before + n, 900, f"{n} {key} instances")
    return n / (time.perf_counter() - began)


class SdkWorkers:
    """The SDK's job worker for ``bench-api-job`` on an event loop of its own thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.loop = asyncio.new_event_loop()
        self.workers: list[Any] = []
        self.started = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._main(),))

    async def _main(self) -> None:
        from camunda_orchestration_sdk import CamundaAsyncClient, WorkerConfig

        configuration = {
            "CAMUNDA_REST_ADDRESS": self.url,
            "CAMUNDA_AUTH_STRATEGY": "NONE",
            "CAMUNDA_SDK_LOG_LEVEL": "error",  # not a line per job
        }
        async with CamundaAsyncClient(configuration=configuration) as camunda:
            config = WorkerConfig(
                job_type="bench-api-job", job_timeout_milliseconds=60000, max_concurrent_jobs=32
            )
            self.workers.append(camunda.create_job_worker(config, lambda job: {"done": True}))
            self.started.set()
            await camunda.run_workers()

    def __enter__(self) -> SdkWorkers:
        self.thread.start()
        if not self.started.wait(60):
            raise SystemExit("the SDK's worker did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        for worker in self.workers:
            self.loop.call_soon_threadsafe(worker.stop)
        self.thread.join(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200 instances per side")
    ap.add_argument("-n", type=int, default=None, help="instances per side (default 1000)")
    args = ap.parse_args()
    n = args.n or (200 if args.quick else 1000)
    common.header(f"bench_api: {n} one-job instances per side, one worker (prefork x2)")
    logdir = Path(tempfile.mkdtemp(prefix="dormant-bench-api-"))
    common.line("logs", str(logdir))

    with common.scratch_redis_db() as broker_url, common.scratch_database() as database_url:
        import httpx
        from sqlalchemy import create_engine

        from dormant import Client

        engine = create_engine(database_url)
        client = Client(database_url=database_url, broker_url=broker_url)
        client.deploy(SERVICE)
        client.deploy(API_SERVICE)
        worker = harness.dormant_worker(broker_url, database_url, logdir, job_types=JOB_TYPES)
        port = _free_port()
        api_log = open(logdir / "api.log", "ab")
        api = subprocess.Popen(
            [harness.PY, "-m", "dormant.tasks.cli", "api", "--port", str(port)],
            env=harness.env_with(
                DORMANT_DATABASE_URL=database_url,
                DORMANT_BROKER_URL=broker_url,
                DORMANT_JOB_TYPES=JOB_TYPES,
            ),
            cwd=str(harness.REPO),
            stdout=api_log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:

            def answers() -> bool:
                try:
                    return httpx.get(f"{url}/v2/topology", timeout=2).status_code == 200
                except httpx.HTTPError:
                    return False

            _wait(answers, 60, "dormant api")
            with SdkWorkers(url):
                # warm-up on both sides: pools up, first connections made
                _rate(client, engine, "bench_service", 50)
                _rate(client, engine, "bench_api", 50)
                celery = _rate(client, engine, "bench_service", n)
                sdk = _rate(client, engine, "bench_api", n)
            common.line(
                "one-job instances, the job a Celery task (bench-noop-job)",
                f"{celery:8.0f} completed/s",
            )
            common.line(
                "one-job instances, the job activated + completed by the SDK's worker over the API",
                f"{sdk:8.0f} completed/s ({sdk / celery:.2f}x the Celery path)",
            )
        finally:
            api.terminate()
            api.wait(timeout=30)
            api_log.close()
            worker.stop()
            engine.dispose()
    return common.summary()


if __name__ == "__main__":
    raise SystemExit(main())

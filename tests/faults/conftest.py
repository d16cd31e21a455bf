"""The fault suite's fixtures: a PostgreSQL + Redis stack with no processes running
(each test starts, kills and restarts its own), and helpers that restart the machine's
PostgreSQL and Redis — always leaving them RUNNING afterwards, because the rest of the
suite runs after this one.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Stack, _urls, wait_for

# Claims expire fast here, so a claim whose fire was lost is taken again within seconds.
FAULT_ENV = {"DORMANT_DEADLINE_CLAIM_SECONDS": "4", "DORMANT_OUTBOX_SWEEP_AFTER_SECONDS": "3"}


@pytest.fixture
def fstack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    with _urls("pg_redis", tmp_path, request) as urls:
        s = Stack(*urls, tmp_path)
        s.env.update(FAULT_ENV)
        try:
            yield s
        finally:
            s.close()


def _pg_ready() -> bool:
    import psycopg

    try:
        with psycopg.connect(
            "postgresql://postgres@127.0.0.1:5432/postgres", connect_timeout=2
        ) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def _pg_cluster() -> list[str]:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    return ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main"]


def restart_postgresql() -> float:
    """Restart the machine's PostgreSQL (every connection is cut); returns seconds down."""
    t0 = time.monotonic()
    try:
        subprocess.run([*_pg_cluster(), "restart"], check=True, timeout=120, capture_output=True)
    finally:
        if not _pg_ready():
            subprocess.run([*_pg_cluster(), "start"], timeout=120, capture_output=True)
        wait_for(_pg_ready, 60, 0.2, "PostgreSQL back up")
    return time.monotonic() - t0


def stop_postgresql_for(down_seconds: float) -> float:
    """Stop the machine's PostgreSQL, keep it down ``down_seconds``, start it again
    (always: a failover's stand-in); returns the seconds it was unreachable."""
    t0 = time.monotonic()
    try:
        subprocess.run([*_pg_cluster(), "stop"], check=True, timeout=120, capture_output=True)
        wait_for(lambda: not _pg_ready(), 30, 0.2, "PostgreSQL down")
        time.sleep(down_seconds)
    finally:
        if not _pg_ready():
            subprocess.run([*_pg_cluster(), "start"], timeout=120, capture_output=True)
        wait_for(_pg_ready, 60, 0.2, "PostgreSQL back up")
    return time.monotonic() - t0


REDIS_START = [
    "redis-server",
    "--daemonize",
    "yes",
    "--bind",
    "127.0.0.1",
    "-::1",
    "--port",
    "6379",
    "--save",
    "",
    "--appendonly",
    "no",
    "--dir",
    "/var/lib/redis",
    "--logfile",
    "/var/log/redis/ci.log",
]


def _redis_ready() -> bool:
    done = subprocess.run(["redis-cli", "-p", "6379", "ping"], capture_output=True, text=True)
    return done.stdout.strip() == "PONG"


def restart_redis(down_seconds: float = 2.0, lock_url: str | None = None) -> None:
    """Stop Redis losing everything (it keeps nothing on disk here), wait, start it."""
    try:
        subprocess.run(["redis-cli", "-p", "6379", "shutdown", "nosave"], capture_output=True)
        wait_for(lambda: not _redis_ready(), 20, 0.1, "Redis down")
        time.sleep(down_seconds)
    finally:
        if not _redis_ready():
            subprocess.run(REDIS_START, check=True, capture_output=True)
        wait_for(_redis_ready, 30, 0.1, "Redis back up")
    if lock_url is not None:  # the test harness's db lock went with the data: take it again
        import redis

        r = redis.Redis.from_url(lock_url)
        r.set("dormant-test-lock", "faults", ex=600)
        r.close()

"""Helpers shared by the benchmarks: machine line, timing, result lines, scratch resources.

Every benchmark prints ratios of figures measured side by side in the same run; the
absolute figures are printed too, but only the ratios are compared with the targets
(the machine is shared and noisy). Nothing here asserts a timing.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PG_ADMIN_URL = os.environ.get(
    "BENCH_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379")

_results: list[tuple[str, bool | None]] = []


def header(title: str) -> None:
    print(f"== {title}")
    print(
        f"   date {datetime.now(UTC).isoformat(timespec='seconds')}  host {platform.node()}  "
        f"cpus {os.cpu_count()}  python {platform.python_version()}  {platform.machine()}"
    )
    sys.stdout.flush()


def line(label: str, value: str) -> None:
    print(f"{label}: {value}")
    sys.stdout.flush()


def ratio_line(label: str, value: float, op: str, target: float, fmt: str = "{:.2f}") -> bool:
    """Print ``label: value (target op target)`` with MET / NOT MET; remember the verdict."""
    ok = {">=": value >= target, "<=": value <= target}[op]
    print(
        f"{label}: {fmt.format(value)} (target {op} {fmt.format(target)}) {'MET' if ok else 'NOT MET'}"
    )
    sys.stdout.flush()
    _results.append((label, ok))
    return ok


def summary() -> int:
    """Print the verdicts; the exit code is 0 whenever the benchmark ran to the end."""
    met = sum(1 for _, ok in _results if ok)
    print(f"-- {met}/{len(_results)} targets met in this run")
    return 0


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for row in f:
            if row.startswith("VmRSS:"):
                return int(row.split()[1])
    return 0


def children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(entry))
            except OSError:
                continue
    return out


@contextmanager
def scratch_database(prefix: str = "dormant_bench", *, migrated: bool = True) -> Iterator[str]:
    """A fresh PostgreSQL database, migrated to head unless ``migrated`` is False (a
    side that brings its own schema, e.g. DBOS); dropped afterwards."""
    from sqlalchemy import create_engine, text

    from dormant.persistence import migrate

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    try:
        if migrated:
            migrate.upgrade(url)
        yield url
    finally:
        with admin.connect() as c:
            c.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :n AND pid <> pg_backend_pid()"
                ),
                {"n": name},
            )
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


# What the latency loads start from (bench_latency.py, bench_triggers.py).
QUIET_TIMEOUT_SECONDS = 120.0

_AUTOVACUUMS = (
    "SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0) FROM pg_stat_user_tables"
)
_AUTOVACUUM_RUNNING = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE backend_type = 'autovacuum worker' AND datname = current_database()"
)


def quiet_database(database_url: str) -> float:
    """Vacuum and analyze ``database_url``, then wait until no autovacuum worker runs on
    it; returns the seconds it took.

    A latency load offered right after a bulk phase (a capacity drain, a backlog) met
    PostgreSQL's autovacuum of that phase's dead rows, which took a share of the two
    cores while it ran and made the first rounds the slow ones (bench/README.md, "Jobs
    right behind their triggers"). pgbench vacuums its tables before each run for the
    same reason. The load's own dead rows are still vacuumed while it runs, as in a
    steady state; ``autovacuum_runs`` says how many such runs a load met."""
    from sqlalchemy import create_engine, text

    began = time.perf_counter()
    engine = create_engine(database_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as c:
            c.execute(text("VACUUM (ANALYZE)"))
            deadline = time.monotonic() + QUIET_TIMEOUT_SECONDS
            while c.execute(text(_AUTOVACUUM_RUNNING)).scalar_one() and (
                time.monotonic() < deadline
            ):
                time.sleep(0.2)
    finally:
        engine.dispose()
    return time.perf_counter() - began


def autovacuum_runs(database_url: str) -> int:
    """Autovacuum and autoanalyze runs completed on ``database_url`` so far (the
    cumulative statistics, which lag a running backend by up to a second)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(database_url)
    try:
        with engine.connect() as c:
            return int(c.execute(text(_AUTOVACUUMS)).scalar_one())
    finally:
        engine.dispose()


@contextmanager
def scratch_redis_db() -> Iterator[str]:
    """An empty Redis database number nobody else holds (tests/redis_lock.py: the same
    lock the tests take; scans from 15 down, the tests from 1 up)."""
    from tests.redis_lock import borrow_redis_db

    try:
        with borrow_redis_db(REDIS_URL, prefix="bench", descending=True) as borrowed:
            yield borrowed.url
    except LookupError as exc:
        raise SystemExit(f"bench: {exc}") from None

#!/usr/bin/env python
"""The console with 1,000,000 instances: its pages against the plain indexed queries.

A scratch PostgreSQL database gets one real instance (started through the Store: a
real checkpoint and facts) and 1,000,000 generated ones (``generate_series`` in SQL,
their checkpoints the real one's with its id and token node changed): 80% at node
'charge', 20% at 'paid'; 1% with an open incident (and its projection row), 20%
completed; business keys repeat every 100,000. A real ``dormant console`` process
(uvicorn, read-only) serves the pages over HTTP on loopback with keep-alive.

Three figures per page, measured interleaved (page, console reads, plain query, again;
medians) so the shared machine's noise falls on all three alike:

* page: the HTTP response time (request to last byte);
* console reads: the database calls that page makes, in-process (SQLAlchemy, row
  objects, checkpoint decoding);
* plain query: the same SQL run bare by psycopg on an autocommit connection (the list:
  the console's own SELECT, compiled with its values (the filter's process keys are
  cached for 10 s); the instance page: the four
  indexed lookups it needs — checkpoint by id, facts by instance, children by parent,
  the definition).

Targets: console reads <= 3x the plain query (what the console adds to the database
work), and each page at N rows <= 1.5x the same page on a 1,000-row database (the page
does not grow with the table). page / query is printed too: it is mostly the fixed
cost of HTTP and templating (a few ms), which a sub-millisecond query cannot amortise.

    .venv/bin/python bench/bench_console.py [--quick] [-n ROWS] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common

MODEL = common.REPO / "tests" / "integration" / "console" / "payment.bpmn"
TARGET = 3.0
BASE = datetime(2026, 1, 1, tzinfo=UTC)

GENERATE = """
INSERT INTO instances (id, key, version, status, business_key, revision, checkpoint,
                       created_at, updated_at, waiting_nodes)
SELECT s.id, 'payment', 1,
       CASE WHEN g %% 100 = 0 THEN 'active_incidents' WHEN g %% 5 = 0 THEN 'completed'
            ELSE 'active' END,
       'bk-' || (g %% 100000), 2, s.cp,
       %(base)s::timestamptz + g * interval '1 second',
       %(base)s::timestamptz + g * interval '1 second',
       (SELECT COALESCE(jsonb_agg(DISTINCT n), '[]'::jsonb)
        FROM jsonb_path_query(s.cp, '$.tokens.*.node_id') AS n)
FROM (
  SELECT g, 'b' || lpad(g::text, 8, '0') AS id,
         jsonb_set(
           jsonb_set(%(tpl)s::jsonb, '{instance_id}', to_jsonb('b' || lpad(g::text, 8, '0'))),
           '{tokens}',
           CASE WHEN g %% 5 = 0 AND g %% 100 <> 0 THEN '{}'::jsonb
                WHEN g %% 5 = 1 THEN jsonb_build_object(
                  %(token)s::text, (%(tpl)s::jsonb #> ARRAY['tokens', %(token)s::text]) || '{"node_id": "paid"}')
                ELSE %(tpl)s::jsonb -> 'tokens' END) AS cp
  FROM generate_series(%(lo)s::int, %(hi)s::int) AS g
) AS s
"""

INCIDENTS = """
INSERT INTO incidents (id, instance_id, process_key, node_id, state, cause_class, attempts,
                       first_at, last_at)
SELECT id || '.i3', id, 'payment', 'charge', 'open', 'RuntimeError', 1, created_at, created_at
FROM instances WHERE status = 'active_incidents' AND id LIKE 'b%'
"""


# The console's instance indexes (migrations 0007 and 0015), to measure what they cost
# every trigger's UPDATE.
CONSOLE_INDEXES = {
    "ix_instances_waiting_nodes": "USING gin (waiting_nodes)",
    "ix_instances_created_at_id": "(created_at, id)",
    "ix_instances_key_version_created_at_id": "(key, version, created_at, id)",
    "ix_instances_status_created_at_id": "(status, created_at, id)",
    "ix_instances_business_key_created_at_id": "(business_key, created_at, id)",
}
UPDATE = (
    "UPDATE instances SET checkpoint = jsonb_set(checkpoint, '{revision}', to_jsonb(revision + 1)), "
    "revision = revision + 1, updated_at = now() WHERE id = %s"
)


def write_cost(url: str, rows: int, n: int = 1500) -> None:
    """What the console's indexes cost a trigger: the checkpoint UPDATE (one commit each,
    like a trigger's), with and without them, alternated twice; and the share of HOT
    updates (an index over the checkpoint would make every checkpoint write a non-HOT
    one, so every index of the table took a new entry: migration 0015 moved the GIN
    index to ``waiting_nodes``, which this UPDATE, moving no token, leaves as it is)."""
    import psycopg

    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    rates: dict[bool, list[float]] = {True: [], False: []}
    hot: dict[bool, float] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for with_indexes in (True, False, True, False):
            for name, spec in CONSOLE_INDEXES.items():
                conn.execute(
                    f"CREATE INDEX IF NOT EXISTS {name} ON instances {spec}"
                    if with_indexes
                    else f"DROP INDEX IF EXISTS {name}"
                )
            before = conn.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'instances'"
            ).fetchone()
            t0 = time.perf_counter()
            for i in range(n):
                conn.execute(UPDATE, ("b" + str(1 + (i * 7919) % rows).zfill(8),))
            rates[with_indexes].append(n / (time.perf_counter() - t0))
            time.sleep(1.0)  # the statistics collector reports asynchronously
            after = conn.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'instances'"
            ).fetchone()
            assert before is not None and after is not None
            hot[with_indexes] = (after[1] - before[1]) / max(1, after[0] - before[0])
        for name, spec in CONSOLE_INDEXES.items():
            conn.execute(f"CREATE INDEX IF NOT EXISTS {name} ON instances {spec}")
    on, off = common.median(rates[True]), common.median(rates[False])
    common.line(
        "checkpoint UPDATE commits/s",
        f"with the console indexes {on:.0f} (HOT {hot[True]:.0%}), without {off:.0f} "
        f"(HOT {hot[False]:.0%})",
    )
    common.ratio_line(
        "checkpoint UPDATE rate with / without the console indexes", on / off, ">=", 0.9
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def populate(url: str, rows: int) -> str:
    """The real instance and the generated ones; returns the real one's id."""
    import psycopg

    from dormant.persistence.store import NewInstance, Store

    store = Store(url)
    now = datetime.now(UTC)
    store.deployments.deploy(MODEL.read_bytes(), now)
    store.start(
        NewInstance("payment", "real-instance", {"flag": "/nope", "card": "x" * 40}), now=now
    )
    tpl = store.queries.checkpoint("real-instance")
    token = next(iter(tpl.tokens))
    from dormant.engine_core.checkpoint import encode

    template = json.dumps(encode(tpl))
    store.close()
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    t0 = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        step = min(100_000, rows)
        for lo in range(1, rows + 1, step):
            hi = min(lo + step - 1, rows)
            conn.execute(
                GENERATE,
                {"tpl": template, "token": token, "base": BASE, "lo": lo, "hi": hi},
            )
            print(f"   inserted {hi:,} rows ({time.perf_counter() - t0:.0f} s)", flush=True)
        conn.execute(INCIDENTS)
        conn.execute("VACUUM ANALYZE instances")
        conn.execute("VACUUM ANALYZE incidents")
    common.line("setup", f"{rows:,} generated instances in {time.perf_counter() - t0:.0f} s")
    return "real-instance"


def interleaved(fns: list[Any], repeat: int) -> list[float]:
    """Median milliseconds of each callable, run in turn ``repeat`` times."""
    for fn in fns:
        for _ in range(3):
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            times[i].append(common.timed(fn))
    return [common.median(t) * 1000 for t in times]


class Console:
    """A real ``dormant console`` (read-only) on a database, and a keep-alive client."""

    def __init__(self, url: str) -> None:
        import httpx

        port = free_port()
        self.log = Path(tempfile.mkdtemp(prefix="dormant-bench-console-")) / "console.log"
        env = dict(os.environ, DORMANT_DATABASE_URL=url, DORMANT_BROKER_URL="memory://")
        env.pop("DORMANT_CONSOLE_AUTH", None)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dormant.tasks.cli",
                    "console",
                    "--port",
                    str(port),
                    "--read-only",
                ],
                env=env,
                cwd=common.REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        for _ in range(300):
            if "Uvicorn running" in self.log.read_text(errors="replace"):
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"bench: the console did not start; see {self.log}")
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)

    def get(self, path: str) -> None:
        self.http.get(path).raise_for_status()

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100,000 rows instead of 1,000,000")
    ap.add_argument("-n", type=int, default=None, help="generated instances")
    ap.add_argument("--repeat", type=int, default=30)
    args = ap.parse_args()
    rows = args.n or (100_000 if args.quick else 1_000_000)

    common.header(f"console pages vs their indexed queries, {rows:,} instances")
    with common.scratch_database("dormant_bench_console") as small_url:
        populate(small_url, 1_000)
        small = Console(small_url)
        try:
            baseline = {
                "list": interleaved([lambda: small.get("/instances")], args.repeat)[0],
                "page": interleaved([lambda: small.get("/instances/real-instance")], args.repeat)[
                    0
                ],
            }
        finally:
            small.close()
        write_cost(small_url, 1_000)
    common.line(
        "on 1,000 rows",
        f"instance list {baseline['list']:.1f} ms, instance page {baseline['page']:.1f} ms",
    )
    with common.scratch_database("dormant_bench_console") as url:
        real = populate(url, rows)
        console = Console(url)
        try:
            measure(url, rows, real, console, baseline, args.repeat)
        finally:
            console.close()
    return common.summary()


def measure(
    url: str, rows: int, real: str, console: Console, baseline: dict[str, float], repeat: int
) -> None:
    import psycopg
    from sqlalchemy import create_engine

    from dormant.persistence.console_queries import ConsoleQueries, InstanceFilter, encode_cursor
    from dormant.persistence.store import Store
    from dormant.tasks.console.app import instance_reads

    engine = create_engine(url)
    store = Store(url)
    q = ConsoleQueries(store.engine)
    middle = BASE + timedelta(seconds=rows // 2)
    cursor = encode_cursor(middle, "b" + str(rows // 2).zfill(8))
    cases: list[tuple[str, str, InstanceFilter, str | None]] = [
        ("first page", "", InstanceFilter(), None),
        ("status=active_incidents", "status=active_incidents",
         InstanceFilter(status="active_incidents"), None),
        ("has open incident", "has_incident=1", InstanceFilter(has_open_incident=True), None),
        ("business key", "business_key=bk-4242", InstanceFilter(business_key="bk-4242"), None),
        ("token waits at node", "node=paid", InstanceFilter(waiting_at="paid"), None),
        ("token waits at a node nobody waits at", "node=done", InstanceFilter(waiting_at="done"), None),
        ("process + version", "process=payment&version=1",
         InstanceFilter(key="payment", version=1), None),
        ("page in the middle (keyset)", f"after={cursor}", InstanceFilter(), cursor),
    ]  # fmt: skip
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        for label, qs, f, after in cases:
            sql = str(
                q.instance_query(f, after).compile(
                    dialect=engine.dialect, compile_kwargs={"literal_binds": True}
                )
            )
            page, reads, plain = interleaved(
                [
                    lambda qs=qs: console.get("/instances?" + qs),
                    lambda f=f, after=after: (q.process_keys(), q.instance_page(f, after)),
                    lambda sql=sql: conn.execute(sql).fetchall(),
                ],
                repeat,
            )
            common.line(
                f"instance list, {label}",
                f"page {page:.1f} ms, console reads {reads:.2f} ms, query {plain:.2f} ms "
                f"(page / query {page / plain:.0f}x)",
            )
            common.ratio_line(f"instance list, {label}: reads / query", reads / plain, "<=", TARGET)
            if label == "first page":
                common.ratio_line(
                    f"instance list, first page: page at {rows:,} / at 1,000 rows",
                    page / baseline["list"],
                    "<=",
                    1.5,
                )

        def lookups() -> None:
            conn.execute("SELECT checkpoint FROM instances WHERE id = %s", (real,)).fetchall()
            conn.execute(
                "SELECT * FROM facts WHERE instance_id = %s ORDER BY id", (real,)
            ).fetchall()
            conn.execute(
                "SELECT id, key, version, status, business_key, created_at, updated_at, parent_id "
                "FROM instances WHERE parent_id = %s ORDER BY created_at, id LIMIT 500",
                (real,),
            ).fetchall()
            conn.execute(
                "SELECT source FROM definitions WHERE key = 'payment' AND version = 1"
            ).fetchall()

        page, state, reads, plain = interleaved(
            [
                lambda: console.get(f"/instances/{real}"),
                lambda: console.get(f"/api/instances/{real}"),
                lambda: instance_reads(q, real),
                lookups,
            ],
            repeat,
        )
        common.line(
            "instance page",
            f"page {page:.1f} ms, its JSON poll {state:.1f} ms, console reads {reads:.2f} ms, "
            f"the four lookups {plain:.2f} ms (page / lookups {page / plain:.0f}x)",
        )
        common.ratio_line("instance page: reads / lookups", reads / plain, "<=", TARGET)
        common.ratio_line(
            f"instance page: page at {rows:,} / at 1,000 rows", page / baseline["page"], "<=", 1.5
        )
        [processes] = interleaved([lambda: console.get("/processes")], max(5, repeat // 5))
        common.line(
            "processes page (counts by status: an index-only scan of every row)",
            f"{processes:.0f} ms (no target)",
        )
    store.close()
    engine.dispose()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""What one trigger costs PostgreSQL: statements, transactions, WAL bytes, row-lock hold.

In this process (no broker, no worker), on a fresh migrated database, for k triggers of
each path: the floor (lock a row + rewrite 2 KB JSONB + commit), a start that parks on a
message, a variable set on that waiting instance (its token stays: the path whose
instance UPDATE can be HOT), a message trigger through ``Router.message`` (one holder),
a start that dispatches a job, and that job's result through ``Store.apply``.

- statements and transactions: SQLAlchemy's cursor and commit events;
- WAL bytes: ``pg_walinspect`` over the path's LSN range, keeping only the records of
  THIS database (its OID in the block references, plus the commit records of those
  transactions), so a neighbour's writes on the shared server are not counted; the
  full-page-image part is printed apart (it depends on when the last checkpoint was);
- PostgreSQL CPU: user + system time of this database's backends (Linux /proc);
- row-lock hold: from the instance row's ``SELECT … FOR UPDATE`` returning to its
  transaction's COMMIT returning (the time another trigger for the same instance waits).

The WAL of the run is kept by a TEMPORARY physical replication slot (dropped when this
process's session ends), because the shared server checkpoints often.

    .venv/bin/python bench/pg_cost.py [-k 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.models import MESSAGE, SERVICE


class Probe:
    """Statement, commit and row-lock-hold counters on one SQLAlchemy engine."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy import event

        self.statements = 0
        self.commits = 0
        self.holds: list[float] = []
        self._locked_at: float | None = None
        event.listen(engine, "before_cursor_execute", self._stmt)
        event.listen(engine, "after_cursor_execute", self._after)
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "rollback", self._rollback)
        dialect = engine.dialect
        inner = dialect.do_commit

        def do_commit(dbapi_connection: Any) -> None:
            inner(dbapi_connection)
            if self._locked_at is not None:
                self.holds.append(time.perf_counter() - self._locked_at)
                self._locked_at = None

        dialect.do_commit = do_commit

    def _stmt(self, *_: Any) -> None:
        self.statements += 1

    def _after(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "FOR UPDATE" in statement and (
            "FROM instances" in statement or "bench_rows" in statement
        ):
            self._locked_at = time.perf_counter()

    def _commit(self, *_: Any) -> None:
        self.commits += 1

    def _rollback(self, *_: Any) -> None:
        self._locked_at = None


def server_cpu_seconds(admin: Any) -> float:
    """CPU time (user + system) of every backend of this database: PostgreSQL's own cost
    of the work, apart from this Python process's (Linux /proc; 10 ms resolution)."""
    from sqlalchemy import text

    pids = admin.execute(
        text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
    ).scalars()
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        except OSError:
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


# Heap WAL records that write a row (what pg_stat_database's tup_inserted, tup_updated
# and tup_deleted count): a row-lock record (``SELECT … FOR UPDATE``) writes none.
_ROW_WRITES = {"INSERT": "ins", "UPDATE": "upd", "HOT_UPDATE": "hot", "DELETE": "del"}


class WalShare:
    """One database's part of a WAL range: bytes, full-page-image bytes, records, and
    the rows written per kind and per table (read from the heap records themselves, so
    no statistics-collector delay and no neighbour's rows)."""

    def __init__(self) -> None:
        self.bytes = 0
        self.fpi = 0
        self.records = 0
        self.rows: dict[str, int] = {"ins": 0, "upd": 0, "hot": 0, "del": 0}
        self.by_table: dict[str, int] = {}
        self.wal_by_relation: dict[str, int] = {}


def wal_of_database(admin: Any, dboid: int, start: str, end: str) -> WalShare:
    from sqlalchemy import text

    rows = admin.execute(
        text(
            "SELECT xid, resource_manager, record_type, record_length, fpi_length, "
            "description, block_ref "
            "FROM pg_get_wal_records_info(CAST(:s AS pg_lsn), CAST(:e AS pg_lsn))"
        ),
        {"s": start, "e": end},
    ).all()
    tag = f"/{dboid}/"
    ours = {r.xid for r in rows if r.block_ref and tag in r.block_ref and r.xid}
    share = WalShare()
    names: dict[str, str] = {}

    def relation(node: str) -> str:
        if node not in names:
            names[node] = (
                admin.execute(
                    text("SELECT pg_filenode_relation(0, CAST(:n AS oid))::text"),
                    {"n": node},
                ).scalar_one()
                or f"filenode {node}"
            )
        return names[node]

    for r in rows:
        if not (
            (r.block_ref and tag in r.block_ref)
            or (r.resource_manager == "Transaction" and r.xid in ours)
        ):
            continue
        share.bytes += int(r.record_length)
        share.fpi += int(r.fpi_length)
        share.records += 1
        where = (
            relation(str(r.block_ref).split(tag, 1)[1].split()[0])
            if r.block_ref and tag in r.block_ref
            else "(commit records)"
        )
        share.wal_by_relation[where] = share.wal_by_relation.get(where, 0) + int(r.record_length)
        kind = str(r.record_type).removesuffix("+INIT")
        if r.resource_manager == "Heap" and kind in _ROW_WRITES:
            count = 1
        elif r.resource_manager == "Heap2" and kind == "MULTI_INSERT":
            kind, count = "INSERT", int(str(r.description).split("ntuples: ")[1].split(",")[0])
        else:
            continue
        share.rows[_ROW_WRITES[kind]] += count
        table = relation(str(r.block_ref).split(tag, 1)[1].split()[0])
        share.by_table[table] = share.by_table.get(table, 0) + count
    return share


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", type=int, default=200, help="triggers per path (default 200)")
    args = ap.parse_args()
    k = args.k
    common.header(f"pg_cost: what one trigger costs PostgreSQL, {k} per path, in-process")

    from sqlalchemy import create_engine, text

    from bench.celery_baseline import document
    from dormant.engine_core.triggers import JobCompleted, SetVariables
    from dormant.persistence.routing import Router
    from dormant.persistence.settings import Settings
    from dormant.persistence.store import NewInstance, Store
    from dormant.tasks.wire import redelivery

    results: dict[str, dict[str, float]] = {}
    where_rows: dict[str, str] = {}
    where_wal: dict[str, str] = {}
    with common.scratch_database() as url:
        store = Store(settings=Settings.from_env(database_url=url, broker_url="memory://"))
        now = datetime.now(UTC)
        store.deployments.deploy(MESSAGE, now)
        store.deployments.deploy(SERVICE, now)
        floor_engine = create_engine(url)
        with floor_engine.begin() as c:
            c.execute(text("CREATE EXTENSION IF NOT EXISTS pg_walinspect"))
            c.execute(text("CREATE TABLE bench_rows (id int PRIMARY KEY, doc jsonb)"))
            c.execute(
                text("INSERT INTO bench_rows SELECT g, '{}'::jsonb FROM generate_series(0, :n) g"),
                {"n": k},
            )
            dboid = int(
                c.execute(
                    text("SELECT oid FROM pg_database WHERE datname = current_database()")
                ).scalar_one()
            )
        admin = create_engine(url, isolation_level="AUTOCOMMIT").connect()
        # A temporary physical slot keeps the WAL from here on until this session ends
        # (the shared server checkpoints often: every DROP DATABASE forces one).
        admin.execute(
            text("SELECT pg_create_physical_replication_slot(:n, true, true)"),
            {"n": f"bench_pg_cost_{dboid}"},
        )
        probes = {id(store.engine): Probe(store.engine), id(floor_engine): Probe(floor_engine)}
        router = Router(store, redelivery)

        def floor(i: int) -> None:
            with floor_engine.begin() as conn:
                conn.execute(
                    text("SELECT doc FROM bench_rows WHERE id = :id FOR UPDATE"),
                    {"id": i},
                ).first()
                conn.execute(
                    text("UPDATE bench_rows SET doc = CAST(:doc AS jsonb) WHERE id = :id"),
                    {"id": i, "doc": json.dumps(document(i))},
                )

        waits: dict[int, str] = {}

        def job_done(i: int) -> None:
            store.apply(
                f"q-{i}",
                JobCompleted(wait_id=waits[i], variables={"done": True}),
                now,
                trigger_id=f"q-{i}:done",
            )

        def read_waits() -> None:
            with store.engine.connect() as conn:
                for i in range(k):
                    doc = conn.execute(
                        text("SELECT checkpoint FROM instances WHERE id = :id"), {"id": f"q-{i}"}
                    ).scalar_one()
                    waits[i] = next(iter(doc.get("waits", {})))

        paths: list[tuple[str, Any, Callable[[int], None], Callable[[], None] | None]] = [
            ("floor: lock + 2 KB JSONB + commit", floor_engine, floor, None),
            (
                "start, parks on a message",
                store.engine,
                lambda i: store.start(
                    NewInstance("bench_message", f"p-{i}", {"orderId": f"p-{i}"}), now=now
                ),
                None,
            ),
            (
                "variable set, the token stays (Store.apply)",
                store.engine,
                lambda i: store.apply(
                    f"p-{i}", SetVariables(variables={"note": i}), now, trigger_id=f"pv-{i}"
                ),
                None,
            ),
            (
                "message trigger, Router.message (one holder)",
                store.engine,
                lambda i: router.message(
                    "bench-go", f"p-{i}", {}, message_id=f"pm-{i}", ttl_seconds=None, now=now
                ),
                None,
            ),
            (
                "start, dispatches a job",
                store.engine,
                lambda i: store.start(NewInstance("bench_service", f"q-{i}", {"i": i}), now=now),
                read_waits,
            ),
            ("job result, Store.apply", store.engine, job_done, None),
        ]
        for label, engine, fn, after in paths:
            probe = probes[id(engine)]
            s0, c0, h0 = probe.statements, probe.commits, len(probe.holds)
            lsn0 = admin.execute(text("SELECT pg_current_wal_lsn()")).scalar_one()
            cpu0 = server_cpu_seconds(admin)
            t0 = time.perf_counter()
            for i in range(k):
                fn(i)
            secs = time.perf_counter() - t0
            cpu = server_cpu_seconds(admin) - cpu0
            lsn1 = admin.execute(text("SELECT pg_current_wal_lsn()")).scalar_one()
            share = wal_of_database(admin, dboid, str(lsn0), str(lsn1))
            holds = probe.holds[h0:]
            where_rows[label] = ", ".join(
                f"{table} {n / k:.1f}" for table, n in sorted(share.by_table.items())
            )
            where_wal[label] = ", ".join(
                f"{rel} {n / k:,.0f}"
                for rel, n in sorted(share.wal_by_relation.items(), key=lambda kv: -kv[1])
            )
            results[label] = {
                "statements": (probe.statements - s0) / k,
                "commits": (probe.commits - c0) / k,
                "ms": secs / k * 1000,
                "server_ms": cpu / k * 1000,
                "wal": share.bytes / k,
                "fpi": share.fpi / k,
                "records": share.records / k,
                **{f"rows_{kind}": n / k for kind, n in share.rows.items()},
                "hold_p50": statistics.median(holds) * 1000 if holds else float("nan"),
                "hold_max": max(holds) * 1000 if holds else float("nan"),
            }
            if after is not None:
                after()
        admin.close()
        floor_engine.dispose()
        store.close()

    print(
        "| path | statements | transactions | rows written (ins + upd (HOT) + del) "
        "| WAL bytes (of which FPI) | WAL records | row lock held p50 / max "
        "| PostgreSQL CPU | time |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, r in results.items():
        written = r["rows_ins"] + r["rows_upd"] + r["rows_hot"] + r["rows_del"]
        print(
            f"| {label} | {r['statements']:.1f} | {r['commits']:.1f} | "
            f"{written:.1f} ({r['rows_ins']:.1f} + {r['rows_upd'] + r['rows_hot']:.1f} "
            f"({r['rows_hot']:.1f}) + {r['rows_del']:.1f}) | "
            f"{r['wal']:,.0f} ({r['fpi']:,.0f}) | {r['records']:.1f} | "
            f"{r['hold_p50']:.2f} / {r['hold_max']:.2f} ms | {r['server_ms']:.2f} ms | {r['ms']:.2f} ms |"
        )
    print()
    print("rows written per trigger, by table:")
    for label, tables in where_rows.items():
        print(f"  {label}: {tables}")
    print()
    print("WAL bytes per trigger, by relation (tables and their indexes), largest first:")
    for label, relations in where_wal.items():
        print(f"  {label}: {relations}")
    return common.summary()


if __name__ == "__main__":
    sys.exit(main())

"""The floor dormant is measured against: plain Celery tasks on the same broker and database.

Configured like dormant's app (tasks/app.py): JSON, acks late,
reject on worker lost, prefetch 1. Started by bench_triggers.py as
``celery -A bench.celery_baseline worker -P prefork -c 2 -Q <queue>``; reads
``BENCH_BROKER_URL`` and ``BENCH_DATABASE_URL``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from celery import Celery
from celery.signals import worker_process_init

BROKER_URL = os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/15")
DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "")
NOOP_QUEUE = "bench.noop"
JSONB_QUEUE = "bench.jsonb"
ROWS = 1000

app = Celery("bench_baseline", broker=BROKER_URL)
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    broker_transport_options={
        "visibility_timeout": 60,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
)

_engine: Any = None


def _db() -> Any:
    global _engine
    if _engine is None:
        from sqlalchemy import create_engine

        _engine = create_engine(DATABASE_URL, pool_pre_ping=True)
    return _engine


@worker_process_init.connect
def _after_fork(**_: Any) -> None:
    global _engine
    _engine = None


def document(i: int) -> dict[str, Any]:
    """A ~2 KB JSON document, different for every write."""
    return {
        "seq": i,
        "items": [{"sku": f"sku-{k:04d}", "qty": k % 7, "note": "x" * 20} for k in range(32)],
    }


@app.task(name="bench.noop")
def noop() -> None:
    return None


@app.task(name="bench.jsonb")
def jsonb(i: int) -> None:
    """Lock one row, rewrite its 2 KB JSONB column, commit (one transaction)."""
    from sqlalchemy import text

    with _db().begin() as conn:
        conn.execute(
            text("SELECT doc FROM bench_rows WHERE id = :id FOR UPDATE"), {"id": i % ROWS}
        ).first()
        conn.execute(
            text("UPDATE bench_rows SET doc = CAST(:doc AS jsonb) WHERE id = :id"),
            {"id": i % ROWS, "doc": json.dumps(document(i))},
        )


def create_rows(database_url: str) -> None:
    from sqlalchemy import create_engine, text

    eng = create_engine(database_url)
    with eng.begin() as conn:
        conn.execute(text("CREATE TABLE bench_rows (id integer PRIMARY KEY, doc jsonb NOT NULL)"))
        conn.execute(
            text("INSERT INTO bench_rows (id, doc) VALUES (:id, CAST(:doc AS jsonb))"),
            [{"id": i, "doc": json.dumps(document(i))} for i in range(ROWS)],
        )
    eng.dispose()

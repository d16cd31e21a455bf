"""The jobs the one-service-task benchmarks run: no-ops, loaded with ``--include bench.jobs``;
``bench-eager-job`` is the one the bench's workers mark eager (bench/harness.py).

Importing it also starts the SQL commit log when the worker's environment names one
(``DORMANT_BENCH_SQL_LOG``, bench/sqlcount.py): how the bench counts a real worker's
statements and write transactions per trigger.
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench import sqlcount
from dormant.tasks.app import app

sqlcount.install_log()


@app.task(name="bench-noop-job")
def bench_noop_job(**_: Any) -> dict[str, Any]:
    return {"done": True}


@app.task(name="bench-eager-job")
def bench_eager_job(**_: Any) -> dict[str, Any]:
    return {"done": True}


# bench/bench_flow.py: the same no-op under flow control (a limit of 1,000, not binding),
# and a job of a type limited to one at a time that records when it ran.
@app.task(name="bench-flow-job")
def bench_flow_job(**_: Any) -> dict[str, Any]:
    return {"done": True}


@app.task(name="bench-flow-one")
def bench_flow_one(**_: Any) -> dict[str, Any]:
    began = time.time()
    time.sleep(0.005)
    return {"began": began, "ended": time.time()}


# bench/bench_flow.py's fairness line: a type limited to one job at a time per run, keyed
# by customer. Each job first waits for the bench's gate (so every start is applied and
# every job running or waiting before any finishes), then records its turn in the
# broker's Redis db (the bench's own scratch db).
@app.task(name="bench-flow-fair")
def bench_flow_fair(customerId: str = "", gate: str = "", **_: Any) -> dict[str, Any]:
    import redis

    r = redis.Redis.from_url(os.environ["DORMANT_BROKER_URL"])
    give_up = time.monotonic() + 600
    while not r.exists(gate) and time.monotonic() < give_up:
        time.sleep(0.02)
    r.rpush(f"{gate}:order", customerId)
    return {}

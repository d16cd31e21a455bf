"""The jobs the one-service-task benchmarks run: no-ops, loaded with ``--include bench.jobs``;
``bench-eager-job`` is the one the bench's workers mark eager (bench/harness.py).

Importing it also starts the SQL commit log when the worker's environment names one
(``DORMANT_BENCH_SQL_LOG``, bench/sqlcount.py): how the bench counts a real worker's
statements and write transactions per trigger.
"""

from __future__ import annotations

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

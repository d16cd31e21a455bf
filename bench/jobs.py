"""The job the one-service-task benchmark runs: a no-op, loaded with ``--include bench.jobs``.

Importing it also starts the SQL commit log when the worker's environment names one
(``DORMANT_BENCH_SQL_LOG``, bench/sqlcount.py): how the bench counts a real worker's
statements and write transactions per trigger.
"""

from __future__ import annotations

from typing import Any

from bench import sqlcount
from tasks.app import app

sqlcount.install_log()


@app.task(name="bench-noop-job")
def bench_noop_job(**_: Any) -> dict[str, Any]:
    return {"done": True}

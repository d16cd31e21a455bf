"""The job the one-service-task benchmark runs: a no-op, loaded with ``--include bench.jobs``."""

from __future__ import annotations

from typing import Any

from tasks.app import app


@app.task(name="bench-noop-job")
def bench_noop_job(**_: Any) -> dict[str, Any]:
    return {"done": True}

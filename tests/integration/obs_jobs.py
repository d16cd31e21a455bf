# mypy: disable-error-code="untyped-decorator"
"""Job tasks for the metrics and trace tests (tests/integration/test_metrics.py)."""

from __future__ import annotations

import time
from typing import Any

from celery import Task

from dormant.tasks.app import app
from dormant.tasks.job_headers import HEADER_ATTEMPT, read_header


@app.task(name="obs-slow", bind=True)
def slow_job(self: Task, **_: Any) -> dict[str, Any]:
    """Outlives a short job timeout on its first attempt, answers at once on the next."""
    if int(read_header(self.request, HEADER_ATTEMPT) or 1) == 1:
        time.sleep(6)
    return {"slow": "done"}


@app.task(name="obs-charge")
def charge_job(**_: Any) -> dict[str, Any]:
    return {"charged": True}

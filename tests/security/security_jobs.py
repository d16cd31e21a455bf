"""Job tasks for the trust-boundary tests (loaded with ``--include``)."""

# mypy: disable-error-code="untyped-decorator"
from __future__ import annotations

from typing import Any

from celery import Task

from dormant.tasks.app import app
from dormant.tasks.jobs import task_headers


@app.task(name="sec-echo-headers", bind=True)
def echo_headers(self: Task, **_: Any) -> dict[str, Any]:
    """Return the model's task headers as the job sees them."""
    return {"seen_headers": task_headers(self)}

# mypy: disable-error-code="untyped-decorator"
"""Flow control from the workers' side (docs/flow-control.md): a job that raised
``RateLimited`` goes back to waiting, and beat's sweep grants the waiting jobs that no
finished job will (a pause over, a token bucket refilled, a limit raised). The slots
themselves are taken and given back in the Store's own transactions
(persistence/job_flow.py)."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task

from dormant.engine_core.effects import DispatchJob, encode_effect
from dormant.engine_core.job_flow import RateLimited
from dormant.persistence import clock
from dormant.persistence.outbox_queue import OutboxRow
from dormant.tasks import metrics, wire
from dormant.tasks.app import app, store
from dormant.tasks.job_headers import HEADER_TASK_HEADERS, read_header
from dormant.tasks.outbox import publish_rows

__all__ = ["flow_sweep", "rate_limited"]

log = logging.getLogger("dormant.flow")


def rate_limited(task: Any, exc: RateLimited, instance_id: str, wait_id: str, attempt: int) -> None:
    """The job asked to wait: it goes back to waiting with the same attempt (no retry
    consumed), and its key (or type) is paused until ``retry_after`` has passed. If the
    database refuses, the job's timeout in the engine sends it again: late, not lost."""
    request = getattr(task, "request", None)
    job_type = str(getattr(task, "name", ""))
    headers = read_header(request, HEADER_TASK_HEADERS) if request is not None else None
    job = DispatchJob(
        instance_id=instance_id,
        wait_id=wait_id,
        node_id="",
        job_type=job_type,
        attempt=attempt,
        variables=dict(getattr(request, "kwargs", None) or {}),
        headers={str(k): str(v) for k, v in (headers or {}).items()},
    )
    _, payload = encode_effect(job)
    try:
        until = store().flow.rate_limited(
            instance_id,
            wait_id,
            attempt,
            payload,
            exc.retry_after,
            exc.whole_type,
            clock.now(),
        )
    except Exception:  # the job's timeout dispatches it again
        log.exception("rate-limited job of %s not put back; its timeout will", job_type)
        return
    metrics.job_rate_limited(job_type)
    log.info(
        "job rate limited instance=%s wait=%s type=%s attempt=%s paused until %s%s",
        instance_id,
        wait_id,
        job_type,
        attempt,
        until.isoformat(),
        " (whole type)" if exc.whole_type else "",
    )


@app.task(name=wire.FLOW_SWEEP, bind=True, ignore_result=True)
def flow_sweep(self: Task) -> int:
    """Grant the waiting jobs that may go now, and publish them (their outbox rows were
    written with the grant: a publish lost here is the outbox sweep's)."""
    now = clock.now()
    written = store().flow.sweep(now)
    if written:
        log.info("flow sweep: %s waiting job(s) granted", len(written))
    return publish_rows(OutboxRow(i, DispatchJob.__name__, p, now) for i, p in written)

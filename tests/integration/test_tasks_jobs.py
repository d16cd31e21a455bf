# mypy: disable-error-code="untyped-decorator"
"""Job tasks the integration workers load (``--include tests.integration.test_tasks_jobs``).

Ordinary Celery tasks named like the job types of the test models. No tests here.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from celery import Task

from dormant.engine_core.errors import BpmnError
from dormant.tasks.app import app
from dormant.tasks.jobs import idempotency_key, job_tenant, task_headers


@app.task(name="test-double", bind=True)
def double(self: Task, n: int = 0, **_: Any) -> dict[str, Any]:
    return {"doubled": n * 2, "job_key": idempotency_key(self)}


@app.task(name="test-tenant", bind=True)
def tenant_of(self: Task, **_: Any) -> dict[str, Any]:
    """Reports the tenant its job came with, and the queue it was read from."""
    queue = (self.request.delivery_info or {}).get("routing_key")
    return {"served_tenant": job_tenant(self), "served_key": queue}


@app.task(name="test-fail")
def fail(**_: Any) -> None:
    raise ValueError("the card was declined")


@app.task(name="test-bpmn-error")
def bpmn_error(**_: Any) -> None:
    raise BpmnError("declined", "card declined", {"reason": "limit"})


@app.task(name="test-bpmn-error-code")
def bpmn_error_code(code: str = "declined", **_: Any) -> None:
    """Throw the BPMN error named by the instance's ``code`` variable."""
    raise BpmnError(code)


@app.task(name="test-undo")
def undo(doubled: Any = None, **_: Any) -> dict[str, Any]:
    """A compensation handler's job: reports what it undid."""
    return {"undone": doubled}


@app.task(name="test-review-gate", bind=True)
def review_gate(self: Task, approved: Any = None, **_: Any) -> dict[str, Any]:
    """A complete listener: denies a completion that is not approved."""
    if approved is True:
        return {}
    headers = task_headers(self)
    return {"denied": True, "deniedReason": f"{headers.get('userTaskEvent')}: not approved"}


@app.task(name="test-task-corrector")
def task_corrector(**_: Any) -> dict[str, Any]:
    """A create listener: assigns the task and raises its priority."""
    return {"corrections": {"assignee": "corrected", "priority": 99}}


@app.task(name="test-listener-set-n")
def listener_set_n(**_: Any) -> dict[str, Any]:
    """A start listener: sets the ``n`` its element's job reads."""
    return {"n": 7}


@app.task(name="test-listener-audit")
def listener_audit(doubled: Any = None, **_: Any) -> dict[str, Any]:
    """An end listener: sees the element's result and records it."""
    return {"audited": doubled}


@app.task(name="test-retry-once", bind=True)
def retry_once(self: Task, **_: Any) -> dict[str, Any]:
    """Asks Celery for one retry, then succeeds: the retry travels with the job's headers."""
    if self.request.retries == 0:
        raise self.retry(countdown=0.1)
    return {"retried": self.request.retries, "job_key": idempotency_key(self)}


@app.task(name="test-batch-fast")
def batch_fast(n: int = 0, kill_at: Any = None, **_: Any) -> dict[str, Any]:
    """A job of a millisecond: taken ahead once proven fast (tasks/job_batches.py).
    With ``DORMANT_TEST_JOB_KILL`` naming a file that exists, the job whose ``n`` is
    ``kill_at`` deletes the file and SIGKILLs its own pool process (the OOM killer's
    stand-in): once, mid-batch."""
    marker = os.environ.get("DORMANT_TEST_JOB_KILL")
    if kill_at is not None and n == kill_at and marker and os.path.exists(marker):
        os.unlink(marker)
        os.kill(os.getpid(), signal.SIGKILL)
    return {"ran": n}


@app.task(name="test-batch-slow")
def batch_slow(n: int = 0, **_: Any) -> dict[str, Any]:
    """A job that calls a slow service: never taken ahead, each one its own task."""
    time.sleep(0.03)
    return {"ran": n}

"""The headers that tie a job's message to its wait, and reading them back from a
running task's request: the one vocabulary the dispatch (tasks/job_dispatch.py), the
outcome handlers (tasks/job_results.py), the job author's helpers (tasks/jobs.py) and
the job's trace span (tasks/tracing.py) share. See tasks/jobs.py for why the model's
task headers travel as data in one header of their own."""

from __future__ import annotations

from typing import Any

from dormant.engine_core.effects import job_idempotency_key

__all__ = [
    "HEADER_ATTEMPT",
    "HEADER_IDEMPOTENCY_KEY",
    "HEADER_INSTANCE",
    "HEADER_TASK_HEADERS",
    "HEADER_TENANT",
    "HEADER_WAIT",
    "job_context",
    "read_header",
]

HEADER_INSTANCE = "dormant_instance_id"
HEADER_WAIT = "dormant_wait_id"
HEADER_ATTEMPT = "dormant_attempt"
HEADER_IDEMPOTENCY_KEY = "dormant_idempotency_key"
# The model's zeebe:taskHeaders, as one JSON object (never as message headers).
HEADER_TASK_HEADERS = "dormant_task_headers"
# The tenant of the instance the job serves (docs/tenants.md).
HEADER_TENANT = "dormant_tenant_id"


def read_header(request: Any, name: str) -> Any:
    """Custom headers surface both as ``request.<name>`` and in ``request.headers``."""
    value = getattr(request, name, None)
    if value is None:
        value = (getattr(request, "headers", None) or {}).get(name)
    return value


def job_context(task: Any) -> tuple[str, str, int, str] | None:
    request = getattr(task, "request", None)
    if request is None:
        return None
    instance_id = read_header(request, HEADER_INSTANCE)
    wait_id = read_header(request, HEADER_WAIT)
    if not instance_id or not wait_id:
        return None  # not a dormant job: an ordinary task of the user's
    attempt = int(read_header(request, HEADER_ATTEMPT) or 1)
    key = read_header(request, HEADER_IDEMPOTENCY_KEY) or job_idempotency_key(
        instance_id, wait_id, attempt
    )
    return str(instance_id), str(wait_id), attempt, str(key)

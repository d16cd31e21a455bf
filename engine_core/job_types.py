"""Per-job-type timeout and retry backoff, and the heartbeat of a long job.

A job type may need its own timeout (a report that runs for an hour) or backoff (an
API that rate-limits): ``Services.job_types`` maps a job type to a ``JobTypeSettings``
(the shell reads it from ``DORMANT_JOB_TYPES``); a type not named uses the engine-wide
``job_timeout_seconds`` and ``job_retry_backoff_seconds``.

A job that runs longer than its timeout without a word is dispatched again (the engine
takes it for lost). A long job instead calls the heartbeat (``tasks.jobs.heartbeat``),
a ``JobHeartbeat`` trigger that moves its wait's deadline to ``now + extend`` (default:
the type's timeout). A heartbeat for an attempt that is no longer running is stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from engine_core.checkpoint import WaitKind
from engine_core.triggers import JobHeartbeat

if TYPE_CHECKING:
    from engine_core.engine import Services
    from engine_core.runtime import Runtime

__all__ = ["JobTypeSettings", "heartbeat", "retry_backoff", "timeout"]


@dataclass(frozen=True, slots=True)
class JobTypeSettings:
    timeout_seconds: float | None = None
    retry_backoff_seconds: float | None = None


def timeout(services: Services, job_type: str | None) -> float:
    own = services.job_types.get(job_type or "")
    if own is not None and own.timeout_seconds is not None:
        return own.timeout_seconds
    return services.job_timeout_seconds


def retry_backoff(services: Services, job_type: str | None, attempt: int) -> float:
    """The wait before ``attempt`` (2, 3, ...): the base doubled per earlier retry."""
    own = services.job_types.get(job_type or "")
    base = (
        own.retry_backoff_seconds
        if own is not None and own.retry_backoff_seconds is not None
        else services.job_retry_backoff_seconds
    )
    return float(base * (2 ** (attempt - 2)))


def heartbeat(rt: Runtime, trigger: JobHeartbeat) -> str | None:
    wait = rt.cp.waits.get(trigger.wait_id)
    if (
        wait is None
        or wait.kind is not WaitKind.JOB
        or not wait.job_running
        or wait.attempt != trigger.attempt
        or wait.token_id not in rt.cp.tokens
    ):
        return None
    extend = trigger.extend_seconds or timeout(rt.services, wait.job_type)
    wait.due_at = rt.now + timedelta(seconds=extend)
    return wait.token_id

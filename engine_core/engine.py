"""The step function. (Being written; the signature is fixed.)"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from engine_core.checkpoint import Checkpoint
from engine_core.effects import Step
from engine_core.model import ProcessDefinition, RetryPolicy
from engine_core.triggers import Trigger

__all__ = ["Services", "apply", "new_checkpoint"]


@dataclass(frozen=True, slots=True)
class Services:
    """What the shell lends the pure core: settings only, never I/O."""

    default_job_retries: int = 3
    job_retry_backoff_seconds: float = 1.0
    incident_retry_policy: RetryPolicy | None = None


def new_checkpoint(
    definition: ProcessDefinition, instance_id: str, version: int, now: datetime
) -> Checkpoint:
    raise NotImplementedError


def apply(
    definition: ProcessDefinition,
    checkpoint: Checkpoint,
    trigger: Trigger,
    *,
    now: datetime,
    services: Services | None = None,
) -> Step:
    raise NotImplementedError

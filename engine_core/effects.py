"""What ``apply`` returns: the new checkpoint, the effects the shell carries out after
commit (through the outbox), and the facts it records.

Effects are data, not callbacks: the shell writes them into the outbox table in the
same transaction as the checkpoint, so a crash between commit and publish loses
nothing (the outbox relay publishes what is left).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine_core.checkpoint import Checkpoint

__all__ = [
    "CancelChild",
    "ContinueInstance",
    "DispatchJob",
    "Effect",
    "Fact",
    "NotifyParent",
    "StartChild",
    "Step",
    "ThrowMessage",
    "ThrowSignal",
]


@dataclass(frozen=True, slots=True)
class DispatchJob:
    """Send a job: the Celery task named ``job_type`` on routing key ``job.<type>``."""

    instance_id: str
    wait_id: str
    node_id: str
    job_type: str
    attempt: int
    variables: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def idempotency_key(self) -> str:
        return f"{self.instance_id}:{self.wait_id}:{self.attempt}"


@dataclass(frozen=True, slots=True)
class ThrowMessage:
    """A message thrown by the model; correlated exactly as a producer's message."""

    name: str
    correlation_key: str | None
    variables: dict[str, Any]
    message_id: str
    ttl_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class ThrowSignal:
    name: str
    variables: dict[str, Any]
    signal_id: str


@dataclass(frozen=True, slots=True)
class StartChild:
    """Start a call activity's child instance (id fixed here, so a redelivery is idempotent)."""

    child_instance_id: str
    process_key: str
    variables: dict[str, Any]
    parent_instance_id: str
    parent_wait_id: str
    root_instance_id: str
    # None: the latest deployed version; else the newest version with this zeebe:versionTag.
    version_tag: str | None = None


@dataclass(frozen=True, slots=True)
class CancelChild:
    child_instance_id: str


@dataclass(frozen=True, slots=True)
class NotifyParent:
    """A child instance ended: tell the call activity that waits for it."""

    parent_instance_id: str
    wait_id: str
    completed: bool
    variables: dict[str, Any]
    error: str | None = None
    error_class: str | None = None
    error_code: str | None = None


@dataclass(frozen=True, slots=True)
class ContinueInstance:
    """The step stopped at its step budget with tokens still active: send the instance
    a ``Continue`` trigger, after this commit, to run them on."""

    instance_id: str


Effect = (
    DispatchJob
    | ThrowMessage
    | ThrowSignal
    | StartChild
    | CancelChild
    | NotifyParent
    | ContinueInstance
)


@dataclass(frozen=True, slots=True)
class Fact:
    """One entry of an instance's history: names and counts, never payload values."""

    kind: str
    details: dict[str, str | int | float | bool | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Step:
    checkpoint: Checkpoint
    effects: tuple[Effect, ...] = ()
    facts: tuple[Fact, ...] = ()
    # False when the trigger was stale or a duplicate: nothing changed, nothing to save.
    changed: bool = True

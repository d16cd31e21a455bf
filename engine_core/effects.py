"""What ``apply`` returns: the new checkpoint, the effects the shell carries out after
commit (through the outbox), and the facts it records.

Effects are data, not callbacks: the shell writes them into the outbox table in the
same transaction as the checkpoint, so a crash between commit and publish loses
nothing (the outbox relay publishes what is left).

``Effect`` is a union discriminated by the class name, which is the outbox row's
``kind``: ``encode_effect`` gives the row (kind, JSON payload), ``parse_effect`` reads
one back into its type, so the shell dispatches on types and never reads payload keys
by hand. A kind this version does not know is ``UnknownEffect`` (a newer dormant
wrote it): the row is left for that version.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from dormant.engine_core.checkpoint import Checkpoint, HoldState
from dormant.engine_core.errors import CorruptEffect, UnknownEffect
from dormant.engine_core.triggers import MessageReceived

__all__ = [
    "EFFECT_KINDS",
    "CancelChild",
    "ContinueInstance",
    "DeliverBuffered",
    "DispatchJob",
    "Effect",
    "Fact",
    "NotifyParent",
    "StartChild",
    "Step",
    "ThrowMessage",
    "ThrowSignal",
    "encode_effect",
    "job_idempotency_key",
    "parse_effect",
]


def job_idempotency_key(instance_id: str, wait_id: str, attempt: int) -> str:
    """The one key of a job attempt: the same for a redelivered dispatch, new for the
    next attempt (a retry after a failure or a timeout)."""
    return f"{instance_id}:{wait_id}:{attempt}"


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
        return job_idempotency_key(self.instance_id, self.wait_id, self.attempt)


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
    # The version the call activity bound (engine_core/bindings.py). None (a step lent
    # no catalog, or a row written before bindings): the latest deployed version, or
    # with ``version_tag`` the newest version with that zeebe:versionTag.
    version_tag: str | None = None
    version: int | None = None


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


@dataclass(frozen=True, slots=True)
class DeliverBuffered:
    """A buffered message a new subscription consumed: written by the Store (never by
    ``apply``) in the transaction that armed the subscription, delivered after it."""

    instance_id: str
    trigger: MessageReceived


Effect = (
    DispatchJob
    | ThrowMessage
    | ThrowSignal
    | StartChild
    | CancelChild
    | NotifyParent
    | DeliverBuffered
    | ContinueInstance
)

EFFECT_KINDS: dict[str, type[Effect]] = {
    cls.__name__: cls
    for cls in (
        DispatchJob,
        ThrowMessage,
        ThrowSignal,
        StartChild,
        CancelChild,
        NotifyParent,
        DeliverBuffered,
        ContinueInstance,
    )
}
_ADAPTERS: dict[str, TypeAdapter[Any]] = {k: TypeAdapter(c) for k, c in EFFECT_KINDS.items()}
# The keys an outbox payload carries beside the effect's own fields: the trigger id,
# and the instance's tenant when it is not the default one (docs/tenants.md).
_ENVELOPE = frozenset({"trigger_id", "tenant"})


def encode_effect(effect: Effect) -> tuple[str, dict[str, Any]]:
    """The outbox row of ``effect``: its kind and its payload as JSON data."""
    if isinstance(effect, DeliverBuffered):
        # Flat, as the rows written before this codec: the trigger's fields beside the
        # instance id.
        fields = {"instance_id": effect.instance_id} | effect.trigger.model_dump(
            mode="json", exclude={"kind"}
        )
        return DeliverBuffered.__name__, fields
    data = dataclasses.asdict(effect)
    return type(effect).__name__, json.loads(json.dumps(data, default=str))


def parse_effect(kind: str, payload: Mapping[str, Any]) -> Effect:
    """An outbox row back into its effect (envelope keys such as ``trigger_id`` aside)."""
    adapter = _ADAPTERS.get(kind)
    if adapter is None:
        raise UnknownEffect(f"outbox kind {kind!r} is not one this version of dormant knows")
    fields = {k: v for k, v in payload.items() if k not in _ENVELOPE}
    if kind == DeliverBuffered.__name__ and "trigger" not in fields:
        instance_id = fields.pop("instance_id", None)
        fields = {"instance_id": instance_id, "trigger": fields}
    try:
        effect: Effect = adapter.validate_python(fields)
    except ValidationError as exc:
        raise CorruptEffect(
            f"outbox {kind} payload does not match its type: "
            f"{exc.errors(include_url=False)[0]['msg']}"
        ) from exc
    return effect


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
    # The waits, incidents and suspension before the step (``apply(keep_holds=True)``):
    # what the Store diffs the new checkpoint's hold and incident rows against.
    holds_before: HoldState | None = None

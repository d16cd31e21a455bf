"""Read-only views of an instance, projected from its checkpoint.

The Client, the CLI and Flower-facing tasks all show these, so they are plain frozen
dataclasses with JSON-ready fields; building them needs nothing but the checkpoint.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from dormant.engine_core.checkpoint import (
    ROOT_SCOPE,
    Checkpoint,
    IncidentState,
    TokenState,
    WaitKind,
)

__all__ = [
    "FactView",
    "FailedTriggerView",
    "IncidentView",
    "InstanceView",
    "ScopeView",
    "TokenView",
    "UserTaskView",
    "WaitView",
    "instance_view",
    "to_dict",
]


@dataclass(frozen=True, slots=True)
class TokenView:
    id: str
    node_id: str
    state: str
    # What the token waits for: "timer 2026-12-01T09:00:00+00:00", "message paid[o-1]", ...
    waiting_for: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class IncidentView:
    id: str
    instance_id: str
    node_id: str
    node_name: str | None
    state: str
    attempts: int
    cause: str
    cause_class: str
    retry_at: datetime | None
    first_at: datetime
    last_at: datetime
    data: dict[str, Any]
    # Where it happened: the parked token, its scope and fork lineage; for a job that
    # ran out of retries, the job type (the cause names attempts and the last error).
    token_id: str | None = None
    scope_id: str | None = None
    lineage: list[str] = field(default_factory=list)
    job_type: str | None = None


@dataclass(frozen=True, slots=True)
class WaitView:
    id: str
    kind: str
    node_id: str
    token_id: str | None
    due_at: datetime | None = None
    message_name: str | None = None
    correlation_key: str | None = None
    signal_name: str | None = None
    # What a person reading `instances show` needs to know about the wait.
    role: str = "node"
    job_type: str | None = None
    attempt: int = 1
    job_running: bool = False
    task_name: str | None = None
    child_instance_id: str | None = None
    incident_id: str | None = None


@dataclass(frozen=True, slots=True)
class ScopeView:
    """A variable scope: what ``set-variables --scope`` names (its id or its node)."""

    id: str
    node_id: str | None
    parent_id: str | None
    loop_index: int | None
    variable_names: list[str]


@dataclass(frozen=True, slots=True)
class InstanceView:
    id: str
    key: str
    version: int
    status: str
    business_key: str | None
    variables: dict[str, Any]
    tokens: list[TokenView]
    incidents: list[IncidentView]
    waits: list[WaitView]
    revision: int
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None
    parent_instance_id: str | None = None
    # Suspended by an operator; ``held``: the triggers kept for its resume.
    suspended: bool = False
    held: int = 0
    scopes: list[ScopeView] = field(default_factory=list)
    # Triggers kept for an operator because they could not be applied and not overtaken
    # since (the instance is flagged while any is): `dormant triggers list --failed
    # --instance ID` lists them, the overtaken ones marked.
    failed_triggers: int = 0
    # Its process's tenant (docs/tenants.md); the checkpoint does not carry it, the
    # instance row does.
    tenant: str = "<default>"


@dataclass(frozen=True, slots=True)
class FailedTriggerView:
    """A trigger that could not be applied, kept whole so an operator can retry or
    drop it. ``body`` is what the task was called with (``args``, ``kwargs``)."""

    id: str
    task: str
    routing_key: str
    instance_id: str | None
    trigger_id: str | None
    error_class: str
    error: str
    attempts: int
    first_at: datetime
    last_at: datetime
    body: dict[str, Any]
    # The instance moved on after it failed, or its trigger id applied after all: still
    # listed (retry or drop it), but it no longer flags the instance.
    overtaken: bool = False


@dataclass(frozen=True, slots=True)
class UserTaskView:
    id: str
    instance_id: str
    node_id: str
    name: str | None
    assignee: str | None = None
    candidate_users: tuple[str, ...] = ()
    candidate_groups: tuple[str, ...] = ()
    created_at: datetime | None = None
    due_date: datetime | None = None
    follow_up_date: datetime | None = None
    priority: int = 50
    form_key: str | None = None
    form_id: str | None = None
    external_reference: str | None = None
    # "created", or the transition whose task listeners run (creating, assigning, ...).
    state: str = "created"
    # Why a task listener denied the last transition (completion, assignment, update).
    denied_reason: str | None = None
    tenant: str = "<default>"


@dataclass(frozen=True, slots=True)
class FactView:
    at: datetime
    kind: str
    details: dict[str, Any]
    revision: int | None = None


def _describe(wait_kind: WaitKind, due: datetime | None, name: str | None, key: str | None) -> str:
    if wait_kind is WaitKind.MESSAGE:
        return f"message {name}" + (f"[{key}]" if key is not None else "")
    if wait_kind is WaitKind.SIGNAL:
        return f"signal {name}"
    if due is not None:
        return f"{wait_kind.value} {due.isoformat()}"
    return wait_kind.value


def instance_view(checkpoint: Checkpoint) -> InstanceView:
    waits_by_token: dict[str, list[str]] = {}
    for w in checkpoint.waits.values():
        if w.token_id is not None:
            waits_by_token.setdefault(w.token_id, []).append(
                _describe(w.kind, w.due_at, w.message_name or w.signal_name, w.correlation_key)
            )
    tokens = [
        TokenView(
            id=t.id,
            node_id=t.node_id,
            state=(
                TokenState.COMPLETED.value
                if t.state is TokenState.INCIDENT and _incident_closed(checkpoint, t.id)
                else t.state.value
            ),
            waiting_for=waits_by_token.get(t.id, []),
        )
        for t in checkpoint.tokens.values()
    ]
    incidents = [
        IncidentView(
            id=i.id,
            instance_id=checkpoint.instance_id,
            node_id=i.node_id,
            node_name=i.node_name,
            state=i.state.value,
            attempts=i.attempts,
            cause=i.cause,
            cause_class=i.cause_class,
            retry_at=i.retry_at,
            first_at=i.first_at,
            last_at=i.last_at,
            data=i.data,
            token_id=i.token_id,
            scope_id=i.scope_id,
            lineage=list(i.lineage),
            job_type=i.job_type,
        )
        for i in checkpoint.incidents.values()
    ]
    waits = [
        WaitView(
            id=w.id,
            kind=w.kind.value,
            node_id=w.node_id,
            token_id=w.token_id,
            due_at=w.due_at,
            message_name=w.message_name,
            correlation_key=w.correlation_key,
            signal_name=w.signal_name,
            role=w.role.value,
            job_type=w.job_type,
            attempt=w.attempt,
            job_running=w.job_running,
            task_name=w.task_name,
            child_instance_id=w.child_instance_id,
            incident_id=w.incident_id,
        )
        for w in checkpoint.waits.values()
    ]
    root = checkpoint.scopes.get(ROOT_SCOPE)
    return InstanceView(
        id=checkpoint.instance_id,
        key=checkpoint.process_key,
        version=checkpoint.version,
        status=checkpoint.status.value,
        business_key=checkpoint.business_key,
        variables=dict(root.variables) if root else {},
        tokens=tokens,
        incidents=incidents,
        waits=waits,
        revision=checkpoint.revision,
        created_at=checkpoint.created_at,
        updated_at=checkpoint.updated_at,
        ended_at=checkpoint.ended_at,
        parent_instance_id=checkpoint.parent.instance_id if checkpoint.parent else None,
        suspended=checkpoint.suspended,
        held=len(checkpoint.held),
        scopes=[
            ScopeView(s.id, s.node_id, s.parent_id, s.loop_index, sorted(s.variables))
            for s in checkpoint.scopes.values()
        ],
    )


def _incident_closed(checkpoint: Checkpoint, token_id: str) -> bool:
    for i in checkpoint.incidents.values():
        if i.token_id == token_id:
            return i.state.closed and i.state is not IncidentState.OPEN
    return False


def to_dict(view: object) -> dict[str, Any]:
    """A view as a JSON-ready dict (datetimes as ISO strings), for ``--json`` and Flower."""

    def convert(value: Any) -> Any:
        if isinstance(value, datetime):
            return value.isoformat()
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [convert(v) for v in value]
        return value

    return convert(asdict(view))  # type: ignore[call-overload,no-any-return]

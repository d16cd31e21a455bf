"""Triggers: the only things that change an instance, one per locked transaction.

A discriminated union on ``kind``. Every trigger but ``start`` names the wait it is
for (``wait_id``) or the incident it acts on; a trigger naming a wait the checkpoint
no longer has is *stale*: ``apply`` records a fact and changes nothing else, which is
how a lost race (timer vs message) and a redelivered trigger both end harmlessly.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from dormant.engine_core.checkpoint import ROOT_SCOPE

__all__ = [
    "AdHocActivation",
    "AdHocResult",
    "Cancel",
    "ChildCompleted",
    "ChildFailed",
    "Continue",
    "IncidentDrop",
    "IncidentResolve",
    "IncidentRetry",
    "JobCompleted",
    "JobErrorThrown",
    "JobFailed",
    "JobHeartbeat",
    "MessageReceived",
    "MigrateInstance",
    "ModifyInstance",
    "Operated",
    "Resume",
    "SetVariables",
    "SignalReceived",
    "Start",
    "Suspend",
    "TaskAssign",
    "TaskCompleted",
    "TaskUpdate",
    "TimerFired",
    "Trigger",
    "parse_trigger",
]


class _Trigger(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # A repeat of this trigger is stale by the checkpoint alone: the Store keeps no
    # processed id for it (persistence/processed.py).
    repeat_is_stale: ClassVar[bool] = False


class _JobOutcome(_Trigger):
    """A job's outcome names its wait and attempt, and applying it ends that wait or
    moves it to the next attempt; wait ids are never reused in an instance
    (``Checkpoint.next_id``). So a second delivery finds no running attempt of that
    name and is stale (engine_core/jobs.py ``job_wait``), under the same row lock that
    a processed trigger id would have been checked under."""

    repeat_is_stale: ClassVar[bool] = True


class Start(_Trigger):
    kind: Literal["start"] = "start"
    variables: dict[str, Any] = Field(default_factory=dict)
    business_key: str | None = None
    # The start event to take: None = the process's none start event.
    start_node_id: str | None = None
    # For a message start: the correlation key, recorded so later starts join.
    start_key: str | None = None
    parent: dict[str, str] | None = None  # ParentLink fields for a call activity's child


class TimerFired(_Trigger):
    kind: Literal["timer"] = "timer"
    wait_id: str


class MessageReceived(_Trigger):
    kind: Literal["message"] = "message"
    wait_id: str
    name: str
    correlation_key: str | None = None
    variables: dict[str, Any] = Field(default_factory=dict)
    message_id: str | None = None


class SignalReceived(_Trigger):
    kind: Literal["signal"] = "signal"
    wait_id: str
    name: str
    variables: dict[str, Any] = Field(default_factory=dict)


class TaskCompleted(_Trigger):
    kind: Literal["task_completed"] = "task_completed"
    wait_id: str
    variables: dict[str, Any] = Field(default_factory=dict)


class TaskAssign(_Trigger):
    """Assign a user task to ``assignee`` (None: unassign). A claim (``claim``) is
    refused when the task is assigned to someone else already."""

    kind: Literal["task_assign"] = "task_assign"
    wait_id: str
    assignee: str | None = None
    claim: bool = False


class TaskUpdate(_Trigger):
    """Change a user task's candidate users / groups, due / follow-up date or priority
    (Camunda's names as keys: ``candidateUsers``, ``dueDate``, ...)."""

    kind: Literal["task_update"] = "task_update"
    wait_id: str
    changes: dict[str, Any] = Field(default_factory=dict)


class AdHocActivation(BaseModel):
    """One element a job names to activate in its ad-hoc sub-process, with the
    variables it starts with (local to that element)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    element_id: str = Field(min_length=1, max_length=255)
    variables: dict[str, Any] = Field(default_factory=dict)


class AdHocResult(BaseModel):
    """What the job of an ad-hoc sub-process's job-worker implementation decided
    (Camunda 8.8's job result of type ``adHocSubProcess``, engine_core/ad_hoc.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    activate: list[AdHocActivation] = Field(default_factory=list)
    completion_condition_fulfilled: bool = False
    cancel_remaining: bool = False


class JobCompleted(_JobOutcome):
    kind: Literal["job_completed"] = "job_completed"
    wait_id: str
    attempt: int = 1
    variables: dict[str, Any] = Field(default_factory=dict)
    # Only for the job of an ad-hoc sub-process (its job-worker implementation).
    ad_hoc: AdHocResult | None = None


class JobFailed(_JobOutcome):
    kind: Literal["job_failed"] = "job_failed"
    wait_id: str
    attempt: int = 1
    error: str
    error_class: str = "JobFailed"
    # A worker that counts retries itself (the Camunda 8 REST API's job failure,
    # docs/camunda-api.md): the attempts left after this one (0: an incident now) and
    # the backoff before the next. None: the job's retry policy decides, as for Celery.
    retries: int | None = Field(default=None, ge=0)
    backoff_seconds: float | None = Field(default=None, ge=0, le=7 * 24 * 3600)


class JobErrorThrown(_JobOutcome):
    kind: Literal["job_error"] = "job_error"
    wait_id: str
    attempt: int = 1
    code: str
    message: str = ""
    variables: dict[str, Any] = Field(default_factory=dict)


class JobHeartbeat(_Trigger):
    """A long job is alive: its timeout moves to now + ``extend_seconds`` (job_types.py).
    With ``retries`` (the Camunda 8 REST API's ``PATCH /v2/jobs/{key}``,
    docs/camunda-api.md) it also sets the attempts left, this one included."""

    kind: Literal["job_heartbeat"] = "job_heartbeat"
    wait_id: str
    attempt: int = 1
    # None: the job type's timeout, or, with ``retries``, the deadline stays. At most a
    # week per heartbeat.
    extend_seconds: float | None = Field(default=None, gt=0, le=7 * 24 * 3600)
    retries: int | None = Field(default=None, ge=1)


class ChildCompleted(_Trigger):
    kind: Literal["child_completed"] = "child_completed"
    wait_id: str
    variables: dict[str, Any] = Field(default_factory=dict)


class ChildFailed(_Trigger):
    kind: Literal["child_failed"] = "child_failed"
    wait_id: str
    error: str
    error_class: str = "ChildFailed"
    # A BPMN error that escaped the child uncaught: the caller's boundaries may catch it.
    error_code: str | None = None


class Operated(_Trigger):
    """An operator's action: ``actor`` is who asked (the console's signed-in user, the
    CLI's ``--as``, the Client's ``actor=``), stamped on the step's facts so the history
    says who did it (engine_core/history.py; issue 28). None when the engine itself
    sends it (a parent cancelling its child)."""

    actor: str | None = None


class Cancel(Operated):
    kind: Literal["cancel"] = "cancel"
    reason: str = "cancelled by operator"
    # False when the parent itself cancels its child: nobody is left to notify.
    notify_parent: bool = True


class Continue(_Trigger):
    """Run on the tokens a step left active when it reached its step budget.

    The follow-up the shell sends through the outbox (``ContinueInstance``), so a loop
    that never waits runs as a chain of short transactions, each releasing the row
    lock, instead of one that holds a worker forever. Stale when nothing is left to
    run (the loop finished, or the instance was cancelled in between)."""

    kind: Literal["continue"] = "continue"


class IncidentRetry(Operated):
    kind: Literal["incident_retry"] = "incident_retry"
    incident_id: str


class IncidentResolve(Operated):
    kind: Literal["incident_resolve"] = "incident_resolve"
    incident_id: str


class IncidentDrop(Operated):
    kind: Literal["incident_drop"] = "incident_drop"
    incident_id: str


class Suspend(Operated):
    """Hold every later trigger (in arrival order) until ``Resume``; timers wait too."""

    kind: Literal["suspend"] = "suspend"


class Resume(Operated):
    kind: Literal["resume"] = "resume"


class SetVariables(Operated):
    """An operator sets or removes variables in one scope (the root by default)."""

    kind: Literal["set_variables"] = "set_variables"
    # A scope id (``s0`` is the root) or the id of the sub-process node it runs.
    scope: str = ROOT_SCOPE
    variables: dict[str, Any] = Field(default_factory=dict)
    unset: list[str] = Field(default_factory=list)
    # Retry every open incident of the instance in the same step, after the change.
    retry_incidents: bool = False


class MigrateInstance(Operated):
    """Move the instance to another version of its process (engine_core/migration.py)."""

    kind: Literal["migrate"] = "migrate"
    version: int
    # Source node id -> target node id; a node not named keeps its id.
    mapping: dict[str, str] = Field(default_factory=dict)


class ModifyInstance(Operated):
    """Cancel the tokens at some nodes and/or start a token before others."""

    kind: Literal["modify"] = "modify"
    cancel_nodes: list[str] = Field(default_factory=list)
    start_before: list[str] = Field(default_factory=list)


Trigger = Annotated[
    Start
    | TimerFired
    | MessageReceived
    | SignalReceived
    | TaskCompleted
    | TaskAssign
    | TaskUpdate
    | JobCompleted
    | JobFailed
    | JobErrorThrown
    | JobHeartbeat
    | ChildCompleted
    | ChildFailed
    | Cancel
    | Continue
    | IncidentRetry
    | IncidentResolve
    | IncidentDrop
    | Suspend
    | Resume
    | SetVariables
    | MigrateInstance
    | ModifyInstance,
    Field(discriminator="kind"),
]

_ADAPTER: TypeAdapter[Trigger] = TypeAdapter(Trigger)


def parse_trigger(data: dict[str, Any] | str | bytes) -> Trigger:
    """A trigger from its JSON form (as carried in a Celery message or the inbox)."""
    if isinstance(data, dict):
        return _ADAPTER.validate_python(data)
    return _ADAPTER.validate_json(data)

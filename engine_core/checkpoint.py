"""The checkpoint: the whole durable truth of one instance, as one JSON document.

Invariants the rest of dormant relies on:

* The checkpoint is the only state of an instance. Every hold row (deadline,
  subscription, user task) is a projection of ``waits``: a wait exists here iff its
  rows exist in the database, because the Store writes both in one transaction.
* ``revision`` grows by exactly one per applied trigger.
* Ended tokens are dropped, not kept: history lives in the facts table, so the
  document's size depends on what is waiting now, never on how long the instance ran.
* Ids inside the document (tokens, scopes, waits, incidents) come from ``counter``,
  a seeded counter, so ``apply`` needs no clock, uuid or randomness.
* ``schema`` is an upper bound on decode: every schema from 1 to ``CURRENT_SCHEMA``
  is accepted (upgraded in ``_UPGRADES``), a newer one is refused by name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime
from enum import StrEnum
from functools import cache
from itertools import repeat
from operator import attrgetter
from types import UnionType
from typing import (
    Annotated,
    Any,
    ClassVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    overload,
)

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from dormant.engine_core.errors import CheckpointTooNew, CorruptCheckpoint
from dormant.engine_core.states import IncidentState, InstanceStatus, TokenState

__all__ = [
    "CURRENT_SCHEMA",
    "ROOT_SCOPE",
    "ROW_IDENTITY",
    "Checkpoint",
    "CompensationEntry",
    "HeldTrigger",
    "HoldState",
    "Incident",
    "IncidentState",
    "InstanceStatus",
    "ParentLink",
    "Scope",
    "TaskState",
    "Token",
    "TokenState",
    "Wait",
    "WaitKind",
    "WaitRole",
    "copy_checkpoint",
    "decode",
    "decode_holds",
    "encode",
    "encode_json",
    "encode_row_json",
    "with_row_identity",
]

CURRENT_SCHEMA = 3

# The id of the process scope, the first scope of every instance: the core opens it at
# the start and the views read the process variables from it.
ROOT_SCOPE = "s0"


class WaitKind(StrEnum):
    TIMER = "timer"
    MESSAGE = "message"
    SIGNAL = "signal"
    USER_TASK = "user_task"
    JOB = "job"
    CALL = "call"  # a call activity waiting for its child instance
    RETRY = "retry"  # a scheduled incident retry


class TaskState(StrEnum):
    """Where a user task is in its lifecycle (engine_core/user_tasks.py): ``created``
    between transitions; the others while that transition's listeners run, before it
    takes effect."""

    CREATING = "creating"
    CREATED = "created"
    ASSIGNING = "assigning"
    UPDATING = "updating"
    COMPLETING = "completing"


class WaitRole(StrEnum):
    NODE = "node"  # the token's own node waits (catch event, task, receive task)
    BOUNDARY = "boundary"  # a boundary event armed on the token's activity
    ARM = "arm"  # one arm of an event-based gateway
    EVENT_SUB = "event_sub"  # an event sub-process start armed on a scope
    INCIDENT = "incident"  # a scheduled incident retry


# Every class below is a plain, slotted dataclass: the working state ``apply`` mutates.
# Pydantic meets them only at the edge, through ``_document()`` (decode validates the
# stored JSON into these classes, encode dumps them), so the field list written here is
# the one definition of the stored document too. A field added here with a default
# keeps every stored checkpoint readable and leaves documents that do not set it
# unchanged (defaults are not written).
_FORBID: ConfigDict = ConfigDict(extra="forbid")


@dataclass(slots=True, kw_only=True)
class Token:
    __pydantic_config__: ClassVar[ConfigDict] = _FORBID

    id: str
    node_id: str
    state: TokenState
    scope_id: str
    # Fork ancestry (the tokens this one was split from), never the trigger history:
    # a token resumed by a trigger keeps it unchanged, so cycles never grow it.
    lineage: list[str] = field(default_factory=list)
    # The inner scope this token waits on (sub-process, multi-instance body).
    inner_scope: str | None = None
    # Multi-instance: which inner instance of its activity this token runs.
    loop_index: int | None = None
    # The sequence flow the token arrived by (a parallel join counts flows, not tokens).
    flow_id: str | None = None
    # Execution listeners at its node (engine_core/listeners.py): "start" while its start
    # listeners run, "ran" once they all completed (the element's behaviour runs), "end"
    # while its end listeners run, "ended" once they all completed (the token leaves);
    # ``listener_index`` is the next listener of that phase to run.
    listener_phase: str | None = None
    listener_index: int = 0


@dataclass(slots=True, kw_only=True)
class Scope:
    __pydantic_config__: ClassVar[ConfigDict] = _FORBID

    id: str
    # The (event) sub-process node this scope runs; None for the process itself.
    node_id: str | None = None
    parent_id: str | None = None
    # The token in the parent scope that waits for this scope to complete.
    token_id: str | None = None
    variables: dict[str, Any] = field(default_factory=dict)
    # Multi-instance: which inner instance this scope is (its index in the input).
    loop_index: int | None = None
    # Multi-instance body scope: the input items, the collected outputs (by index),
    # the next index to start (sequential) and how many inner instances completed.
    mi_items: list[Any] | None = None
    mi_results: list[Any] | None = None
    mi_next: int = 0
    mi_completed: int = 0
    # An ad-hoc sub-process of the job-worker implementation whose job said its
    # completion condition is fulfilled: it completes once no inner token is left.
    ad_hoc_fulfilled: bool = False


@dataclass(slots=True, kw_only=True)
class Wait:
    """One armed wait. Its hold rows in the database are derived from these fields."""

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID

    id: str
    kind: WaitKind
    role: WaitRole
    # The node whose event this wait is for: the catch event, the task, the boundary
    # event, the event-based gateway's target event, the event sub-process start.
    node_id: str
    # Index of the event definition within ``node_id`` (a node may hold several).
    def_index: int = 0
    # The waiting token (None for an event sub-process start armed on a scope).
    token_id: str | None = None
    scope_id: str | None = None
    # Timers: the ABSOLUTE due time, recorded once at arming; re-arming never
    # re-evaluates the timer expression, so a boundary's deadline never moves.
    due_at: datetime | None = None
    # Timer cycles: repetitions still to fire after this one (None = unbounded), and
    # the interval in seconds used to compute the next due time.
    cycle_remaining: int | None = None
    cycle_interval_seconds: float | None = None
    # Messages and signals.
    message_name: str | None = None
    correlation_key: str | None = None
    signal_name: str | None = None
    # User tasks: the attributes as evaluated at creation (and changed since by
    # assign / update operations and listener corrections), then the lifecycle: the
    # transition under way, what it will apply once its listeners are done, the next
    # listener to run, and why the last transition was denied.
    task_name: str | None = None
    assignee: str | None = None
    candidate_users: list[str] = field(default_factory=list)
    candidate_groups: list[str] = field(default_factory=list)
    due_date: datetime | None = None
    follow_up_date: datetime | None = None
    priority: int = 50
    form_key: str | None = None
    form_id: str | None = None
    external_reference: str | None = None
    task_state: TaskState = TaskState.CREATED
    task_pending: dict[str, Any] | None = None
    listener_next: int = 0
    denied_reason: str | None = None
    # A task listener's job: the user task wait it runs for, and the headers it is
    # dispatched with (the task's attributes) instead of the node's task headers.
    listener_of: str | None = None
    job_headers: dict[str, str] | None = None
    # Jobs: the Celery task name, attempt number (1-based), retries left after this one.
    job_type: str | None = None
    attempt: int = 1
    retries_left: int = 0
    # True while the job of ``attempt`` is out (``due_at`` is then its timeout); False
    # while a failed job waits out its retry backoff (``due_at`` is then the backoff).
    job_running: bool = False
    # A job run for an execution listener: its event type ("start" or "end").
    execution_listener: str | None = None
    # Call activities: the child instance id.
    child_instance_id: str | None = None
    # Incident retries: the incident this deadline retries.
    incident_id: str | None = None
    interrupting: bool = True

    @property
    def holds_deadline(self) -> bool:
        return self.due_at is not None

    @property
    def holds_subscription(self) -> bool:
        return self.kind in (WaitKind.MESSAGE, WaitKind.SIGNAL)


@dataclass(slots=True, kw_only=True)
class Incident:
    __pydantic_config__: ClassVar[ConfigDict] = _FORBID

    id: str
    node_id: str
    node_name: str | None = None
    token_id: str
    scope_id: str
    lineage: list[str] = field(default_factory=list)
    cause: str
    cause_class: str
    state: IncidentState = IncidentState.OPEN
    attempts: int = 1
    first_at: datetime
    last_at: datetime
    retry_at: datetime | None = None
    # The variables visible from the node's scope at the last raise.
    data: dict[str, Any] = field(default_factory=dict)
    job_type: str | None = None
    # False when the node failed while activating: its boundaries were never armed, so
    # a retry arms them. True once armed: a retry never arms them again, even after a
    # one-shot boundary fired and left no wait behind (docs/incidents.md).
    boundaries_armed: bool = True


@dataclass(slots=True, kw_only=True)
class CompensationEntry:
    """A completed compensable activity, in completion order (the ledger)."""

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID

    node_id: str
    scope_id: str
    variables: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class ParentLink:
    """A child instance started by a call activity: who waits for it."""

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID

    instance_id: str
    wait_id: str
    root_instance_id: str


@dataclass(slots=True, kw_only=True)
class HeldTrigger:
    """A trigger that arrived while the instance was suspended, kept to apply on resume."""

    __pydantic_config__: ClassVar[ConfigDict] = _FORBID

    at: datetime
    trigger: dict[str, Any]


@dataclass(slots=True, kw_only=True)
class Checkpoint:
    __pydantic_config__: ClassVar[ConfigDict] = _FORBID

    instance_id: str
    process_key: str
    version: int
    business_key: str | None = None
    # The correlation key of the message start that created this instance, if any:
    # a later start message with the same key joins instead of duplicating.
    start_key: str | None = None
    status: InstanceStatus = InstanceStatus.ACTIVE
    revision: int = 0
    counter: int = 0
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None = None
    tokens: dict[str, Token] = field(default_factory=dict)
    scopes: dict[str, Scope] = field(default_factory=dict)
    waits: dict[str, Wait] = field(default_factory=dict)
    incidents: dict[str, Incident] = field(default_factory=dict)
    compensation: list[CompensationEntry] = field(default_factory=list)
    parent: ParentLink | None = None
    # Why the instance failed (an invariant broke, an error end event reached the root).
    failure: str | None = None
    # Suspended by an operator: later triggers are held here, in arrival order.
    suspended: bool = False
    held: list[HeldTrigger] = field(default_factory=list)
    # Stored as ``schema`` (last, as every dormant wrote it); the upper bound ``decode``
    # checks. No default: a stored document without it is corrupt, so the one-pass
    # decode of a JSON text cannot mistake it for the current schema.
    schema_version: Annotated[int, Field(alias="schema", strict=True)]

    def next_id(self, prefix: str) -> str:
        """A fresh id unique within this instance (mutates the counter)."""
        self.counter += 1
        return f"{prefix}{self.counter}"

    def has_open_incidents(self) -> bool:
        return any(not i.state.closed for i in self.incidents.values())


@cache
def _document() -> TypeAdapter[Checkpoint]:
    """The stored document's schema: pydantic's validator and serializer for the classes
    above, built once, on the first decode or encode — building it costs a process
    about 50 ms, which the CLI's read-only lists and ``dormant --help`` never need
    (bench/bench_cli.py). The only place pydantic touches the working state."""
    return TypeAdapter(Checkpoint)


@dataclass(slots=True, kw_only=True)
class HoldState:
    """The part of a stored checkpoint its hold rows and incident rows are projected
    from: what the Store diffs the step's new state against. ``apply`` given the stored
    text mutates its own decode, so the state before the step is read from the text
    again, building only waits and incidents (tokens, scopes and variables are parsed
    past, not built): half a full decode."""

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="ignore")

    waits: dict[str, Wait] = field(default_factory=dict)
    incidents: dict[str, Incident] = field(default_factory=dict)
    suspended: bool = False
    schema_version: Annotated[int, Field(alias="schema", strict=True)]


@cache
def _holds() -> TypeAdapter[HoldState]:
    """``HoldState``'s validator, built on first use as ``_document``'s."""
    return TypeAdapter(HoldState)


def decode_holds(raw: str | bytes) -> HoldState | Checkpoint:
    """``raw``'s waits, incidents and suspension, for a text ``decode`` accepts; any
    schema but the current one (or a text ``decode`` would refuse) takes ``decode``'s
    own path, upgrades and classified errors included."""
    try:
        holds = _holds().validate_json(raw)
    except ValidationError:
        return decode(raw)
    return holds if holds.schema_version == CURRENT_SCHEMA else decode(raw)


def holds_of(checkpoint: Checkpoint) -> HoldState:
    """``checkpoint``'s waits, incidents and suspension as a ``HoldState`` of their own
    (copies: the step that follows mutates the checkpoint, never these). What
    ``decode_holds`` reads from the stored text, taken from a decode already made:
    copying two small dicts costs less than parsing the text again."""
    return HoldState(
        waits=_dataclass_dict(checkpoint.waits),
        incidents=_dataclass_dict(checkpoint.incidents),
        suspended=checkpoint.suspended,
        schema_version=CURRENT_SCHEMA,
    )


def copy_checkpoint(checkpoint: Checkpoint) -> Checkpoint:
    """A deep copy ``apply`` may mutate, made without pydantic: every container is new,
    every scalar (str, number, enum, datetime) shared."""
    copy: Checkpoint = _copy_dataclass(checkpoint)
    return copy


def _json_copy(value: Any) -> Any:
    """A copy of JSON data (variables, a held trigger): only dicts and lists are mutable."""
    if isinstance(value, dict):
        return {k: _json_copy(v) if isinstance(v, _MUTABLE) else v for k, v in value.items()}
    if isinstance(value, list):
        return [_json_copy(v) if isinstance(v, _MUTABLE) else v for v in value]
    return value


_MUTABLE = (dict, list)


def _copy_dataclass(obj: Any) -> Any:
    # Every field read in one call and set in one pass (``map`` over ``setattr``), then
    # the containers replaced by their copies: no ``__init__`` keyword parsing.
    cls = type(obj)
    names, read, copied = _PLANS[cls]
    new = object.__new__(cls)
    any(map(setattr, repeat(new), names, read(obj)))
    for name, copy in copied:
        value = getattr(obj, name)
        if value is not None:
            setattr(new, name, copy(value))
    return new


def _dataclass_dict(value: dict[str, Any]) -> dict[str, Any]:
    return {k: _copy_dataclass(v) for k, v in value.items()} if value else {}


def _dataclass_list(value: list[Any]) -> list[Any]:
    return [_copy_dataclass(v) for v in value] if value else []


def _copier(hint: Any) -> Callable[[Any], Any] | None:
    """How to copy a field of type ``hint``; None when its values are immutable. Derived
    from the annotations, so a field added above is copied without a word here; a type
    this does not know fails at import, not as a shared list at run time."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return _copier(args[0])
    if origin in (UnionType, Union):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"checkpoint field type {hint!r}: one type or None")
        return _copier(inner[0])  # a None value is kept as it is
    if hint in (str, int, float, bool, datetime) or (
        isinstance(hint, type) and issubclass(hint, StrEnum)
    ):
        return None
    if hint is Any:
        return _json_copy
    if isinstance(hint, type) and is_dataclass(hint):
        return _copy_dataclass
    if origin in (list, dict):
        item = _copier(args[-1])
        if item is None:
            return origin  # type: ignore[no-any-return]
        if item is _copy_dataclass:
            return _dataclass_list if origin is list else _dataclass_dict
        if item is _json_copy:
            return _json_copy
    raise TypeError(f"checkpoint field type {hint!r} has no copy rule")


# class -> (its field names, a getter of all of them, (name, copy) for each container).
_PLANS: dict[
    type, tuple[tuple[str, ...], attrgetter[Any], tuple[tuple[str, Callable[[Any], Any]], ...]]
] = {}
for _cls in (Token, Scope, Wait, Incident, CompensationEntry, ParentLink, HeldTrigger, Checkpoint):
    _hints = get_type_hints(_cls, include_extras=True)
    _names = tuple(f.name for f in fields(_cls))
    _rules = ((n, _copier(_hints[n])) for n in _names)
    # (attrgetter of one name returns the value itself, of several a tuple)
    _PLANS[_cls] = (
        _names,
        attrgetter(*_names, _names[0]),
        tuple((n, c) for n, c in _rules if c is not None),
    )


def _schema_1_to_2(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 added the operator's suspension (``suspended``, ``held``), both with
    defaults, so a schema-1 document reads unchanged. The bump itself is what matters:
    an older dormant meeting a suspended instance's document refuses it as too new
    (``CheckpointTooNew``) instead of calling the unknown fields corrupt."""
    return doc


def _schema_2_to_3(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 3 keeps a user task's candidate groups as a list (schema 2: the text as
    evaluated, comma-separated) beside its candidate users, schedule, priority, form
    and lifecycle fields, which all have defaults."""
    waits = doc.get("waits")
    if isinstance(waits, dict):
        for wait in waits.values():
            groups = wait.get("candidate_groups") if isinstance(wait, dict) else None
            if isinstance(groups, str):
                wait["candidate_groups"] = _group_names(groups)
    return doc


def _group_names(text: str) -> list[str]:
    """Schema 2's candidate groups text: a literal "a, b", or a FEEL list as it was
    printed ("['a', 'b']")."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    names = []
    for part in text.split(","):
        name = part.strip()
        if len(name) >= 2 and name[0] == name[-1] and name[0] in "'\"":
            name = name[1:-1]
        if name and name not in names:
            names.append(name)
    return names


# schema N -> a function turning a schema-N document (as a dict) into schema N+1.
_UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _schema_1_to_2,
    2: _schema_2_to_3,
}


def decode(raw: str | bytes | dict[str, Any]) -> Checkpoint:
    """Read a stored checkpoint of any schema from 1 to CURRENT_SCHEMA.

    A newer schema is refused rather than half-read: an older dormant must not
    rewrite a document whose fields it does not know.
    """
    if not isinstance(raw, dict):
        # JSON text of the current schema: validated straight from the text, one pass
        # (no dict in between). Anything else takes the path below, which says why.
        try:
            checkpoint = _document().validate_json(raw)
        except ValidationError:
            pass
        else:
            if checkpoint.schema_version == CURRENT_SCHEMA:
                return checkpoint
    try:
        data = raw if isinstance(raw, dict) else json.loads(raw)
    except (ValueError, TypeError) as exc:
        raise CorruptCheckpoint(f"stored checkpoint is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CorruptCheckpoint("stored checkpoint is not a JSON object")
    schema = data.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
        raise CorruptCheckpoint(f"stored checkpoint has no valid 'schema' field (got {schema!r})")
    if schema > CURRENT_SCHEMA:
        instance = data.get("instance_id", "?")
        raise CheckpointTooNew(
            f"checkpoint of instance {instance} has schema {schema}, newer than this dormant "
            f"reads (1..{CURRENT_SCHEMA}); upgrade dormant on this worker"
        )
    while schema < CURRENT_SCHEMA:
        data = _UPGRADES[schema](dict(data))
        schema += 1
        data["schema"] = schema
    try:
        return _document().validate_python(data)
    except ValidationError as exc:
        raise CorruptCheckpoint(f"stored checkpoint does not validate: {exc}") from exc


def encode(checkpoint: Checkpoint) -> dict[str, Any]:
    """The JSON-ready document, with defaults left out to keep rows small."""
    doc: dict[str, Any] = _document().dump_python(
        checkpoint, mode="json", by_alias=True, exclude_defaults=True
    )
    return doc


def encode_json(checkpoint: Checkpoint) -> str:
    """``encode`` as JSON text in one pass (the same document, compact), for a caller
    that stores text."""
    return _dump_json(checkpoint, frozenset())


def _dump_json(checkpoint: Checkpoint, leave_out: frozenset[str]) -> str:
    return (
        _document()
        .dump_json(checkpoint, by_alias=True, exclude_defaults=True, exclude=set(leave_out))
        .decode()
    )


# What a stored document leaves to the row that holds it: the instance's id and its
# process key, which the Store keeps as columns of that row anyway (``instances.id`` and
# ``.key``; neither ever changes). Written in every checkpoint they were a tenth of it.
ROW_IDENTITY = frozenset({"instance_id", "process_key"})


def encode_row_json(checkpoint: Checkpoint) -> str:
    """``encode_json`` without ``ROW_IDENTITY``: the document as a row stores it;
    ``with_row_identity`` gives it back whole."""
    return _dump_json(checkpoint, ROW_IDENTITY)


@overload
def with_row_identity(
    raw: dict[str, Any], instance_id: str, process_key: str
) -> dict[str, Any]: ...


@overload
def with_row_identity(raw: str | bytes, instance_id: str, process_key: str) -> str: ...


def with_row_identity(
    raw: str | bytes | dict[str, Any], instance_id: str, process_key: str
) -> str | dict[str, Any]:
    """A stored document with its row's id and key put back, for ``decode``.

    They go first, so a document written whole (before ``encode_row_json``) keeps its
    own, equal values: the later of two equal keys wins. Text is spliced, not parsed,
    so ``decode`` still validates it in one pass; a text that is no JSON object is
    left as it is for ``decode`` to refuse with its classified error.
    """
    if isinstance(raw, dict):
        return {"instance_id": instance_id, "process_key": process_key, **raw}
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    body = text.lstrip()
    if not body.startswith("{"):
        return text
    head = json.dumps(
        {"instance_id": instance_id, "process_key": process_key}, separators=(",", ":")
    )
    rest = body[1:].lstrip()
    return head if rest.startswith("}") and rest[1:].strip() == "" else f"{head[:-1]},{rest}"

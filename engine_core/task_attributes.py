"""A user task's attributes as Camunda models them, and their value rules.

One home for what a user task attribute may hold, used at deploy (a literal that is
wrong refuses the model), when the task is created (a FEEL result of the wrong type
is an incident naming the attribute), by update operations and by listener
corrections (the Client checks with the same rules before it sends). The attributes
are Camunda's: ``assignee``, ``candidateUsers``, ``candidateGroups`` (a literal is
comma-separated, an expression gives a list of strings), ``dueDate`` and
``followUpDate`` (ISO 8601 date and time with a zone, or a FEEL date and time),
``priority`` (an integer 0 to 100, default 50), ``formKey`` / ``formId`` /
``externalReference``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from dormant.engine_core.errors import InvalidField
from dormant.engine_core.expressions import TechnicalFailure, evaluate, is_expression
from dormant.engine_core.model import Node

__all__ = [
    "EVENTS",
    "MAX_CANDIDATES",
    "MAX_NAME",
    "MAX_REFERENCE",
    "UPDATABLE",
    "check_changes",
    "evaluate_attributes",
    "listener_event",
    "static_problems",
]

# The listener events, Camunda 8.8's names; the 8.7 names are read as these.
EVENTS = ("create", "assign", "update", "complete")
_ALIASES = {"creating": "create", "assigning": "assign", "updating": "update"}
_ALIASES["completing"] = "complete"

# The bounds of the columns the attributes are projected into.
MAX_NAME = 255
MAX_CANDIDATES = 100
MAX_REFERENCE = 1024

# What an update operation (and a listener's corrections) may change, by Camunda name.
UPDATABLE = ("candidateUsers", "candidateGroups", "dueDate", "followUpDate", "priority")
_CORRECTABLE = ("assignee", *UPDATABLE)


def listener_event(raw: str) -> str | None:
    """The event a ``zeebe:taskListener eventType`` names, or None if dormant runs none."""
    name = raw.strip()
    name = _ALIASES.get(name, name)
    return name if name in EVENTS else None


# -- values ---------------------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, int | Decimal | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value[:60]!r}"
    return f"a {type(value).__name__}"


class _Bad(Exception):
    """A value of the wrong type or out of bounds; the caller says whose it is."""


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{what} is {_kind(value)}, expected a string")
    name = value.strip()
    if not name or len(name) > MAX_NAME or "\x00" in name:
        raise _Bad(f"{what} must be 1 to {MAX_NAME} characters without NUL (got {len(name)})")
    return name


def _names(value: Any, what: str, *, static: bool) -> list[str]:
    """A literal is comma-separated; an expression's result a list of strings."""
    if static and isinstance(value, str):
        items: list[Any] = [v for v in value.split(",") if v.strip()]
    elif isinstance(value, list):
        items = value
    else:
        raise _Bad(f"{what} is {_kind(value)}, expected a list of strings")
    if len(items) > MAX_CANDIDATES:
        raise _Bad(f"{what} has {len(items)} entries, at most {MAX_CANDIDATES}")
    out: list[str] = []
    for item in items:
        name = _name(item, f"an entry of {what}")
        if name not in out:
            out.append(name)
    return out


def _moment(value: Any, what: str) -> datetime:
    """A FEEL date and time, or its ISO 8601 text; with a zone, as Camunda requires."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise _Bad(
                f"{what} {value[:60]!r} is not an ISO 8601 date and time "
                "(e.g. 2026-10-02T08:00:00Z)"
            ) from None
    if not isinstance(value, datetime):
        raise _Bad(f"{what} is {_kind(value)}, expected a date and time")
    if value.tzinfo is None or value.utcoffset() is None:
        raise _Bad(f"{what} {value.isoformat()} has no time zone offset")
    return value


def _priority(value: Any, what: str, *, static: bool) -> int:
    if static and isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise _Bad(f"{what} {value[:60]!r} is not an integer") from None
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise _Bad(f"{what} is {_kind(value)}, expected an integer from 0 to 100")
    if value != int(value) or not 0 <= int(value) <= 100:
        raise _Bad(f"{what} is {value}, expected an integer from 0 to 100")
    return int(value)


def _reference(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{what} is {_kind(value)}, expected a string")
    if not value.strip() or len(value) > MAX_REFERENCE or "\x00" in value:
        raise _Bad(f"{what} must be 1 to {MAX_REFERENCE} characters without NUL")
    return value


# attribute (Node field) -> (Camunda name, Wait field, reader(value, what, static))
_Reader = Callable[[Any, str, bool], Any]
_ATTRIBUTES: tuple[tuple[str, str, str, _Reader], ...] = (
    ("assignee", "assignee", "assignee", lambda v, w, s: _name(v, w)),
    (
        "candidate_users",
        "candidateUsers",
        "candidate_users",
        lambda v, w, s: _names(v, w, static=s),
    ),
    (
        "candidate_groups",
        "candidateGroups",
        "candidate_groups",
        lambda v, w, s: _names(v, w, static=s),
    ),
    ("due_date", "dueDate", "due_date", lambda v, w, s: _moment(v, w)),
    ("follow_up_date", "followUpDate", "follow_up_date", lambda v, w, s: _moment(v, w)),
    ("priority", "priority", "priority", lambda v, w, s: _priority(v, w, static=s)),
    ("form_key", "formKey", "form_key", lambda v, w, s: _reference(v, w)),
    ("form_id", "formId", "form_id", lambda v, w, s: _reference(v, w)),
    (
        "external_reference",
        "externalReference",
        "external_reference",
        lambda v, w, s: _reference(v, w),
    ),
)
_BY_CAMUNDA = {camunda: (field, reader) for _, camunda, field, reader in _ATTRIBUTES}


def static_problems(node: Node) -> list[str]:
    """What is wrong with the literal (non-FEEL) attributes of a user task, for the
    deploy to refuse: a literal that is wrong now is wrong for every instance."""
    problems = []
    for attr, camunda, _, reader in _ATTRIBUTES:
        raw = getattr(node, attr)
        if raw is None or is_expression(raw):
            continue
        try:
            reader(raw, camunda, True)
        except _Bad as exc:
            problems.append(str(exc))
    for listener in node.task_listeners:
        if listener.retries is not None and not is_expression(listener.retries):
            if not listener.retries.strip().isdigit():
                problems.append(f"task listener retries {listener.retries!r} is not an integer")
    return problems


def evaluate_attributes(node: Node, context: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The user task's attributes as ``Wait`` fields, evaluated against ``context``."""
    fields: dict[str, Any] = {}
    for attr, camunda, field, reader in _ATTRIBUTES:
        raw = getattr(node, attr)
        if raw is None:
            continue
        static = not is_expression(raw)
        value = evaluate(raw, context, node.id, now)
        if value is None and not static:
            continue  # an expression may leave an optional attribute unset
        try:
            fields[field] = reader(value, f"{camunda} {raw[:80]!r}", static)
        except _Bad as exc:
            raise TechnicalFailure(
                f"user task {node.label}: {exc}", "InvalidTaskAttribute"
            ) from None
    return fields


def check_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """An update's (or a listener's corrections') values as Wait fields; ``InvalidField``
    names the first one that is unknown or of the wrong type. The Client checks with it
    before sending, the core again when applying."""
    out: dict[str, Any] = {}
    for key, value in changes.items():
        found = _BY_CAMUNDA.get(key)
        if found is None or key not in _CORRECTABLE:
            allowed = ", ".join(_CORRECTABLE)
            raise InvalidField(f"user task attribute {key!r} cannot be changed; one of: {allowed}")
        field, reader = found
        if value is None and key in ("assignee", "dueDate", "followUpDate"):
            out[field] = None
            continue
        try:
            out[field] = reader(value, key, False)
        except _Bad as exc:
            raise InvalidField(f"user task attribute {exc}") from None
    return out

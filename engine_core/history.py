"""An instance's history for people: its facts read as business events.

The facts table is written for the engine and its operators alike: one ``Hydrated`` and
one ``Dehydrated`` per trigger, listener bookkeeping, stale triggers, beside the events
a person asks about (which element was reached, which job attempt failed, which end
event the instance ended at, who suspended it). ``business_history`` keeps the second
kind, each as one line of plain words, and drops the first (issue 28: the console
showed two or three lines per real event, and no command showed which end event an
instance reached).

Every fact kind the engine or the shell records is in exactly one of ``TRANSLATED``
and ``BOOKKEEPING`` (tests/core/test_history.py walks the sources and pins it), so a
new fact kind is a decision, never silently dropped. An operator's action names who
took it ("instance cancelled by ann": the trigger's ``actor`` on its facts). Pure:
facts in, events out; no value of a variable is in a fact (docs/internals.md), so none
is in an event either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dormant.engine_core.views import FactView

__all__ = ["BOOKKEEPING", "TRANSLATED", "BusinessEvent", "business_history"]


@dataclass(frozen=True, slots=True)
class BusinessEvent:
    """One thing that happened, as ``dormant instances history`` prints it.

    ``category``: ``instance``, ``element``, ``job``, ``task``, ``message``, ``timer``,
    ``signal``, ``incident`` or ``operator``; ``node``: the element it happened at, if
    any; ``fact``: the kind of the fact it was read from (the internal name, for the
    console's "internal facts" toggle to line them up)."""

    at: datetime
    revision: int | None
    category: str
    node: str | None
    text: str
    fact: str


_Line = tuple[str, str | None, str]  # category, node, text
_Reader = Callable[[Mapping[str, Any]], _Line | None]


def _d(details: Mapping[str, Any], name: str, default: str = "?") -> str:
    value = details.get(name)
    return default if value is None else str(value)


def _woken(d: Mapping[str, Any]) -> _Line | None:
    """A trigger that woke a wait from outside: the fact of the step it started. The
    start and the operators' triggers have facts of their own (``Started``,
    ``Suspended``, ...); a job's result is told by the element it moves on from."""
    said = _WAKES.get(str(d.get("trigger")))
    return None if said is None else (said[0], None, said[1])


# Hydrated's ``trigger``: the wakes that have no other fact of their own.
_WAKES: Mapping[str, tuple[str, str]] = {
    "timer": ("timer", "a timer fired"),
    "message": ("message", "a message was received"),
    "signal": ("signal", "a signal was received"),
    "job_completed": ("job", "a job completed"),
    "job_error": ("job", "a job threw a BPMN error"),
    "child_completed": ("element", "a called instance completed"),
    "child_failed": ("element", "a called instance failed"),
}


def _incident(d: Mapping[str, Any]) -> _Line:
    action = _d(d, "action")
    text = {
        "raised": f"incident {_d(d, 'incident')} raised ({_d(d, 'cause_class')})",
        "retry-scheduled": f"incident {_d(d, 'incident')}: retry scheduled",
        "retried": f"incident {_d(d, 'incident')} retried",
        "retry-succeeded": f"incident {_d(d, 'incident')} closed: the retry succeeded",
        "resolved": f"incident {_d(d, 'incident')} resolved",
        "dead-lettered": f"incident {_d(d, 'incident')} dropped (dead-lettered)",
        "overtaken": f"incident {_d(d, 'incident')} overtaken (its token was withdrawn)",
    }.get(action, f"incident {_d(d, 'incident')}: {action}")
    if action == "raised" and d.get("attempts") not in (None, 1):
        text += f", attempt {d['attempts']}"
    return "incident", d.get("node"), text


def _terminated(d: Mapping[str, Any]) -> _Line:
    if d.get("reason_kind") == "cancel":
        return "operator", None, "instance cancelled"
    return "element", d.get("node"), f"everything else ended by terminate end event {_d(d, 'node')}"


def _variables(d: Mapping[str, Any]) -> _Line:
    parts = [
        f"set {d['set']}" if d.get("set") else "",
        f"unset {d['unset']}" if d.get("unset") else "",
    ]
    said = "; ".join(p for p in parts if p) or "no change"
    return "operator", None, f"variables changed in scope {_d(d, 'scope')}: {said}"


def _modified(d: Mapping[str, Any]) -> _Line:
    parts = []
    if d.get("cancelled"):
        parts.append(f"cancelled at {d['cancelled']} ({_d(d, 'tokens_cancelled', '0')} token(s))")
    if d.get("started"):
        parts.append(f"started before {d['started']}")
    return "operator", None, "instance modified: " + ("; ".join(parts) or "nothing")


def _held(d: Mapping[str, Any]) -> _Line:
    return "operator", None, f"held {_d(d, 'trigger')} applied on resume: {_d(d, 'outcome')}"


TRANSLATED: Mapping[str, _Reader] = {
    "Started": lambda d: ("instance", d.get("start"), f"instance started at {_d(d, 'start')}"),
    "Completed": lambda d: ("instance", None, "instance completed"),
    "Failed": lambda d: (
        "instance",
        None,
        "instance failed" + (f" (error {d['error_code']})" if d.get("error_code") else ""),
    ),
    "Terminated": _terminated,
    "Withdrawn": lambda d: (
        "element",
        d.get("node"),
        f"{_d(d, 'node')} withdrawn before it finished"
        + (f" ({d['tokens']} tokens)" if d.get("tokens") not in (None, 1) else ""),
    ),
    "EndEventReached": lambda d: ("element", d.get("node"), f"end event {_d(d, 'node')} reached"),
    "BoundaryFired": lambda d: (
        "element",
        d.get("boundary"),
        f"boundary event {_d(d, 'boundary')} on {_d(d, 'host')} fired"
        + ("" if d.get("interrupting") else " (non-interrupting)"),
    ),
    "GatewayArmWon": lambda d: (
        "element",
        d.get("arm"),
        f"event-based gateway {_d(d, 'gateway')}: {_d(d, 'arm')} came first",
    ),
    "EventSubProcessStarted": lambda d: (
        "element",
        d.get("node"),
        f"event sub-process {_d(d, 'node')} started"
        + ("" if d.get("interrupting") else " (non-interrupting)"),
    ),
    "Compensating": lambda d: (
        "element",
        d.get("node"),
        f"compensation thrown at {_d(d, 'node')}: {_d(d, 'handlers', '0')} handler(s)",
    ),
    "AdHocActivated": lambda d: (
        "element",
        d.get("node"),
        f"ad-hoc sub-process {_d(d, 'node')}: {_d(d, 'elements', '0')} element(s) activated",
    ),
    "AdHocJobCompleted": lambda d: (
        "element",
        d.get("node"),
        f"ad-hoc sub-process {_d(d, 'node')}: its job activated {_d(d, 'elements', '0')} "
        f"element(s){'; done' if d.get('fulfilled') else ''}",
    ),
    "JobDispatched": lambda d: (
        "job",
        d.get("node"),
        f"{_d(d, 'node')} entered: job {_d(d, 'job_type')} sent (attempt {_d(d, 'attempt')})",
    ),
    "JobRetryScheduled": lambda d: (
        "job",
        d.get("node"),
        f"job {_d(d, 'job_type')} attempt {_d(d, 'attempt')} failed "
        f"({_d(d, 'error_class')}); retrying",
    ),
    "JobTimedOut": lambda d: (
        "job",
        d.get("node"),
        f"job {_d(d, 'job_type')} attempt {_d(d, 'attempt')} timed out; sent again",
    ),
    "TaskCreated": lambda d: ("task", d.get("node"), f"{_d(d, 'node')} entered: user task created"),
    "TaskAssigned": lambda d: (
        "task",
        d.get("node"),
        f"user task {_d(d, 'node')} " + ("assigned" if d.get("assigned") else "unassigned"),
    ),
    "TaskUpdated": lambda d: (
        "task",
        d.get("node"),
        f"user task {_d(d, 'node')} updated: {_d(d, 'fields', '')}",
    ),
    "TaskCompleted": lambda d: ("task", d.get("node"), f"user task {_d(d, 'node')} completed"),
    "TaskTransitionDenied": lambda d: (
        "task",
        d.get("node"),
        f"user task {_d(d, 'node')}: a task listener denied {_d(d, 'transition')}",
    ),
    "Hydrated": _woken,
    "WakeFailed": lambda d: (
        "timer",
        None,
        f"a timer could not fire ({_d(d, 'cause_class')}), attempt {_d(d, 'attempt')}; kept",
    ),
    "DuplicateStart": lambda d: (
        "message",
        None,
        f"start message {_d(d, 'message')} joined this running instance",
    ),
    "Incident": _incident,
    "IncidentsRetried": lambda d: (
        "operator",
        None,
        f"{_d(d, 'count', '0')} incident(s) retried with the new variables",
    ),
    "Suspended": lambda d: ("operator", None, "instance suspended"),
    "Resumed": lambda d: ("operator", None, "instance resumed"),
    "TriggerHeld": lambda d: (
        "operator",
        None,
        f"{_d(d, 'trigger')} held while suspended",
    ),
    "HeldTriggerApplied": _held,
    "VariablesSet": _variables,
    "Modified": _modified,
    "Migrated": lambda d: (
        "operator",
        None,
        f"migrated from v{_d(d, 'from_version')} to v{_d(d, 'to_version')}"
        + (f" (mapped {d['mapped']})" if d.get("mapped") else ""),
    ),
    "TriggerDropped": lambda d: (
        "operator",
        None,
        f"failed trigger {_d(d, 'task')} dropped ({_d(d, 'error_class')})",
    ),
}

# Facts for the engine's own accounting: kept in the table, shown behind the console's
# toggle and by ``Client.history``, never as a business event.
BOOKKEEPING: frozenset[str] = frozenset(
    {
        "Dehydrated",  # the waits a step left: one per trigger
        "StepBudgetReached",  # a long step continued in a follow-up trigger
        "TokensParked",  # tokens behind the one DORMANT_MAX_TOKENS incident (its fact tells)
        "Stale",  # a trigger for a wait already gone: acknowledged, no change
        "ExecutionListener",  # a listener's job ran; its element's facts tell the story
        "TaskListenerCompleted",  # ditto for a task listener
        "AdHocConditionRead",  # the completion condition was evaluated
    }
)


# The incident actions an operator takes (the others are the engine's own).
_OPERATOR_INCIDENT_ACTIONS = frozenset({"retried", "resolved", "dead-lettered"})


def _by(fact: FactView, category: str) -> str:
    """`` by ann`` for an operator's action whose fact names its actor (the trigger's
    ``actor``, stamped by engine_core/engine.py), else nothing: the engine's own facts
    of the same step (a job sent again after a retry) are not the operator's."""
    actor = fact.details.get("actor")
    if actor is None or fact.kind == "HeldTriggerApplied":  # another's trigger, let through
        return ""
    if category == "operator" or (
        fact.kind == "Incident" and fact.details.get("action") in _OPERATOR_INCIDENT_ACTIONS
    ):
        return f" by {actor}"
    return ""


def business_history(facts: Iterable[FactView]) -> list[BusinessEvent]:
    """The facts of one instance, in order, as business events (bookkeeping dropped).

    A fact of a kind this dormant does not know (written by a newer one) is shown by its
    kind rather than dropped: a history that hides what it cannot read misleads."""
    out: list[BusinessEvent] = []
    for fact in facts:
        if fact.kind in BOOKKEEPING:
            continue
        reader = TRANSLATED.get(fact.kind)
        line = reader(fact.details) if reader is not None else ("other", None, fact.kind)
        if line is None:
            continue
        category, node, text = line
        text += _by(fact, category)
        out.append(BusinessEvent(fact.at, fact.revision, category, node, text, fact.kind))
    return out

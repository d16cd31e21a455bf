"""Arming waits: turning an event definition into a ``Wait`` in the checkpoint.

Everything a wait needs to be woken is computed here, once: the ABSOLUTE due time of
a timer, the evaluated message name and correlation key. Re-arming never happens:
a wait stays as recorded until it fires or is withdrawn (a cycle's next repetition
is the one update, ``keep_or_withdraw``). Which waits an element arms is its concept's
module: ``boundaries.py``, ``event_subs.py``, the node handlers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dormant.engine_core.checkpoint import Wait, WaitKind, WaitRole
from dormant.engine_core.expressions import correlation_key, non_empty_string
from dormant.engine_core.model import EventDefinition, EventKind, Node, TimerSpec
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.timers import arm_timer, next_cycle_due

__all__ = ["WAITABLE", "Repetition", "arm_event", "keep_or_withdraw", "next_repetition"]

WAITABLE = frozenset({EventKind.TIMER, EventKind.MESSAGE, EventKind.SIGNAL})


def arm_event(
    rt: Runtime,
    node: Node,
    definition: EventDefinition,
    role: WaitRole,
    variables: dict[str, Any],
    *,
    def_index: int = 0,
    token_id: str | None = None,
    scope_id: str | None = None,
    interrupting: bool = True,
) -> Wait:
    common: dict[str, Any] = {
        "def_index": def_index,
        "token_id": token_id,
        "scope_id": scope_id,
        "interrupting": interrupting,
    }
    if definition.kind is EventKind.TIMER:
        assert definition.timer is not None
        armed = arm_timer(definition.timer, variables, node.id, rt.now)
        return rt.add_wait(
            WaitKind.TIMER,
            role,
            node.id,
            due_at=armed.due_at,
            cycle_remaining=armed.cycle_remaining,
            cycle_interval_seconds=armed.interval_seconds,
            **common,
        )
    if definition.kind is EventKind.MESSAGE:
        name = non_empty_string(
            definition.message_name or "", variables, node.id, rt.now, "message name"
        )
        key = (
            correlation_key(definition.correlation_key, variables, node.id, rt.now)
            if definition.correlation_key
            else None
        )
        return rt.add_wait(
            WaitKind.MESSAGE, role, node.id, message_name=name, correlation_key=key, **common
        )
    if definition.kind is EventKind.SIGNAL:
        name = non_empty_string(
            definition.signal_name or "", variables, node.id, rt.now, "signal name"
        )
        return rt.add_wait(WaitKind.SIGNAL, role, node.id, signal_name=name, **common)
    raise ValueError(f"event kind {definition.kind} is not a wait")


@dataclass(frozen=True, slots=True)
class Repetition:
    """A cycle's next repetition: when it is due, and how many are left after it."""

    due_at: datetime
    cycle_remaining: int | None


def next_repetition(
    due_at: datetime,
    interval_seconds: float | None,
    cycle_remaining: int | None,
    now: datetime,
    *,
    spec: TimerSpec | None = None,
    variables: Mapping[str, Any] | None = None,
    element_id: str = "",
) -> Repetition | None:
    """The one rule of a cycle's repetitions, for an instance's timer waits and for
    timer start events (the scheduler) alike: None when the timer is done (not a cycle,
    or no repetition left); else the next due time (``timers.next_cycle_due``: an
    overdue cycle continues from now, a cron cycle follows its own calendar)."""
    if interval_seconds is None or (cycle_remaining is not None and cycle_remaining <= 0):
        return None
    try:
        due = next_cycle_due(
            due_at, interval_seconds, now, spec=spec, variables=variables, element_id=element_id
        )
    except OverflowError:
        # The model's interval puts the next repetition past the last date there is
        # (year 9999): it never comes, so the cycle ends here.
        return None
    return Repetition(due, None if cycle_remaining is None else cycle_remaining - 1)


def keep_or_withdraw(rt: Runtime, wait: Wait) -> None:
    """After a non-interrupting fire: a cycle arms its next repetition, a message or
    signal stays subscribed, a one-shot timer is done."""
    if wait.kind is not WaitKind.TIMER:
        return
    assert wait.due_at is not None
    node = rt.node(wait.node_id)
    spec = node.events[wait.def_index].timer if wait.def_index < len(node.events) else None
    repetition = next_repetition(
        wait.due_at,
        wait.cycle_interval_seconds,
        wait.cycle_remaining,
        rt.now,
        spec=spec,
        variables=rt.visible(wait.scope_id),
        element_id=node.id,
    )
    if repetition is None:
        rt.withdraw(wait)
        return
    wait.due_at = repetition.due_at
    wait.cycle_remaining = repetition.cycle_remaining

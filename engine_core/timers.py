"""Timer arithmetic: from a timer definition and "now" to an ABSOLUTE due time.

The due time is computed once, when the wait is armed, and recorded in the checkpoint;
nothing ever re-evaluates it (SRD-071 FR-9a): re-evaluating a duration on every load
would restart a "within 24 h" boundary on every unrelated trigger.

Cycles (``R3/PT10M``, ``R/PT1H``, ``R2/2026-12-01T09:00:00Z/P1D``) fire, then arm the
next repetition at ``previous due + interval``. When a cycle is overdue (the engine
was down), the next due time is moved past ``now``: one firing, then on from now,
never a burst of catch-up firings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import isodate

from engine_core.expressions import TechnicalFailure, evaluate, json_value
from engine_core.model import TimerKind, TimerSpec

__all__ = ["ArmedTimer", "arm_timer", "next_cycle_due"]


@dataclass(frozen=True, slots=True)
class ArmedTimer:
    due_at: datetime
    # For cycles: repetitions left after the first firing (None = forever) and the interval.
    cycle_remaining: int | None = None
    interval_seconds: float | None = None


def arm_timer(
    spec: TimerSpec, variables: Mapping[str, Any], element_id: str, now: datetime
) -> ArmedTimer:
    value = evaluate(spec.value, variables, element_id, now)
    if value is None:
        raise TechnicalFailure(f"timer {spec.value!r} of {element_id!r} evaluated to null")
    try:
        if spec.kind is TimerKind.DURATION:
            return ArmedTimer(_add(now, _duration(value)))
        if spec.kind is TimerKind.DATE:
            return ArmedTimer(_datetime(value))
        return _cycle(value, now)
    except (ValueError, isodate.ISO8601Error, TypeError, OverflowError) as exc:
        raise TechnicalFailure(
            f"timer {spec.kind.value} {spec.value!r} of {element_id!r} is not valid ISO 8601: {exc}"
        ) from exc


def next_cycle_due(previous_due: datetime, interval_seconds: float, now: datetime) -> datetime:
    """The next repetition after ``previous_due``; an overdue cycle continues from now."""
    step = timedelta(seconds=interval_seconds)
    due = previous_due + step
    if due <= now:
        due = now + step
    return due


def _duration(value: Any) -> timedelta | isodate.Duration:
    if isinstance(value, timedelta):
        return value
    text = value if isinstance(value, str) else json_value(value)
    if not isinstance(text, str):
        raise ValueError(f"expected a duration, got {type(value).__name__}")
    parsed = isodate.parse_duration(text.strip())
    if not isinstance(parsed, timedelta | isodate.Duration):
        raise ValueError(f"{text!r} is not a duration")
    return parsed


def _add(moment: datetime, duration: timedelta | isodate.Duration) -> datetime:
    result = moment + duration
    if not isinstance(result, datetime):
        raise ValueError("duration arithmetic did not give a date-time")
    return result


def _datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    else:
        text = value if isinstance(value, str) else json_value(value)
        if not isinstance(text, str):
            raise ValueError(f"expected a date-time, got {type(value).__name__}")
        text = text.strip()
        # FEEL date-times may carry a zone id after '@' (e.g. ...T09:00@Europe/Paris).
        if "@" in text:
            raise ValueError("zone ids are not supported in timer dates; use an offset")
        moment = isodate.parse_datetime(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def _cycle(value: Any, now: datetime) -> ArmedTimer:
    text = value if isinstance(value, str) else json_value(value)
    if not isinstance(text, str):
        raise ValueError(f"expected a repeating interval, got {type(value).__name__}")
    parts = text.strip().split("/")
    if not parts[0].startswith("R"):
        raise ValueError(f"{text!r} is not a repeating interval (R<n>/<duration>)")
    count = parts[0][1:]
    repetitions = int(count) if count else None
    if len(parts) == 2:
        start, interval = None, _duration(parts[1])
    elif len(parts) == 3:
        start, interval = _datetime(parts[1]), _duration(parts[2])
    else:
        raise ValueError(f"{text!r} is not a repeating interval")
    seconds = _seconds(interval, now)
    if seconds <= 0:
        raise ValueError(f"{text!r} has a zero interval")
    if repetitions is not None and repetitions < 1:
        raise ValueError(f"{text!r} repeats fewer than once")
    due = start if start is not None else now + timedelta(seconds=seconds)
    remaining = None if repetitions is None else repetitions - 1
    return ArmedTimer(due, remaining, seconds)


def _seconds(interval: timedelta | isodate.Duration, now: datetime) -> float:
    return (_add(now, interval) - now).total_seconds()

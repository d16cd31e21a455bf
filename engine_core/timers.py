"""Timer arithmetic: from a timer definition and "now" to an ABSOLUTE due time.

The due time is computed once, when the wait is armed, and recorded in the checkpoint;
nothing ever re-evaluates it (docs/waits.md, Timers): re-evaluating a duration on every load
would restart a "within 24 h" boundary on every unrelated trigger.

Cycles (``R3/PT10M``, ``R/PT1H``, ``R2/2026-12-01T09:00:00Z/P1D``) fire, then arm the
next repetition at ``previous due + interval``. When a cycle is overdue (the engine
was down), the next due time is moved past ``now``: one firing, then on from now,
never a burst of catch-up firings.

Read as Zeebe reads them: ISO 8601 designators in either case (``PT30s``, ``r/pt1h``);
dates with an offset, a ``Z``, a FEEL ``@zone`` or java.time's bracketed zone id
(``2026-10-02T08:09:40+02:00[Europe/Berlin]``); and in ``timeCycle`` a cron expression
in Spring's six fields (``second minute hour day-of-month month day-of-week``, e.g.
``0 0 9-17 * * MON-FRI``, or ``@daily``), evaluated in UTC by croniter from a given
"now" (pure: no clock is read). A cron cycle's next firing is the rule's next time
after the later of the previous due time and now (``next_cycle_due(..., spec=...)``),
so its calendar never drifts and an overdue one fires once. Every error quotes the
offending text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import isodate
from croniter import croniter

from dormant.engine_core.expressions import TechnicalFailure, evaluate, json_value
from dormant.engine_core.feel.temporal import parse_datetime
from dormant.engine_core.model import TimerKind, TimerSpec

__all__ = ["ArmedTimer", "arm_timer", "cron_next", "next_cycle_due"]


@dataclass(frozen=True, slots=True)
class ArmedTimer:
    due_at: datetime
    # For cycles: repetitions left after the first firing (None = forever) and the interval
    # (for a cron cycle its nominal period: the gap between its first two firings).
    cycle_remaining: int | None = None
    interval_seconds: float | None = None
    cron: str | None = None


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
        shown = _shown(value)
        of = f"{spec.value!r}" + (f" (= {shown!r})" if shown != spec.value else "")
        raise TechnicalFailure(
            f"timer {spec.kind.value} {of} of {element_id!r} is not valid: {exc}"
        ) from exc


def next_cycle_due(
    previous_due: datetime,
    interval_seconds: float,
    now: datetime,
    *,
    spec: TimerSpec | None = None,
    variables: Mapping[str, Any] | None = None,
    element_id: str = "",
) -> datetime:
    """The next repetition after ``previous_due``; an overdue cycle continues from now.

    With the cycle's ``spec`` a cron cycle follows its own calendar (the rule's next time
    after the later of ``previous_due`` and ``now``), not the nominal interval.
    """
    cron = _cron_of(spec, variables or {}, element_id, now) if spec is not None else None
    if cron is not None:
        return cron_next(cron, max(previous_due, now))
    step = timedelta(seconds=interval_seconds)
    due = previous_due + step
    if due <= now:
        due = now + step
    return due


_CRON_MACROS = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}


def _as_cron(text: str) -> str | None:
    """``text`` as a six-field Spring cron (macros expanded), or None if it is not one."""
    text = " ".join(text.split())
    if text.lower() in _CRON_MACROS:
        return _CRON_MACROS[text.lower()]
    if text.upper().startswith("R") or len(text.split(" ")) < 5:
        return None
    fields = text.split(" ")
    if len(fields) != 6:
        raise ValueError(
            f"{text!r} is not a cron expression of six fields (second minute hour "
            f"day-of-month month day-of-week, e.g. '0 0 9 * * MON-FRI'); it has {len(fields)}"
        )
    if not croniter.is_valid(text, second_at_beginning=True):
        raise ValueError(f"{text!r} is not a valid cron expression")
    return text


def cron_next(cron: str, after: datetime) -> datetime:
    """The first time strictly after ``after`` that ``cron`` (six fields, UTC) names."""
    start = after.astimezone(UTC) if after.tzinfo is not None else after.replace(tzinfo=UTC)
    due = croniter(cron, start, second_at_beginning=True).get_next(datetime)
    assert isinstance(due, datetime)
    return due


def _cron_of(
    spec: TimerSpec, variables: Mapping[str, Any], element_id: str, now: datetime
) -> str | None:
    if spec.kind is not TimerKind.CYCLE:
        return None
    try:
        value = evaluate(spec.value, variables, element_id, now)
    except TechnicalFailure:
        return None
    return _as_cron(value) if isinstance(value, str) else None


def _shown(value: Any) -> Any:
    return value if isinstance(value, str) else json_value(value)


def _duration(value: Any) -> timedelta | isodate.Duration:
    if isinstance(value, timedelta):
        return value
    text = value if isinstance(value, str) else json_value(value)
    if not isinstance(text, str):
        raise ValueError(f"expected a duration, got {type(value).__name__}")
    # Parsed once per text: a model's durations are few (mostly literals of the
    # definition) and parsing one cost more than the rest of arming its timer. Only
    # short texts are kept, so a model minting long ones cannot grow the cache.
    return _parse_duration(text) if len(text) <= 64 else _parse_duration.__wrapped__(text)


@functools.lru_cache(maxsize=1024)
def _parse_duration(text: str) -> timedelta | isodate.Duration:
    try:
        # ISO 8601 designators in either case, as Zeebe reads them ("PT30s").
        parsed = isodate.parse_duration(text.strip().upper())
    except isodate.ISO8601Error:
        raise ValueError(f"{text!r} is not an ISO 8601 duration (e.g. 'PT30S', 'P1D')") from None
    if not isinstance(parsed, timedelta | isodate.Duration):
        raise ValueError(f"{text!r} is not a duration")
    return parsed


def _add(moment: datetime, duration: timedelta | isodate.Duration) -> datetime:
    result = moment + duration
    if not isinstance(result, datetime):
        raise ValueError("duration arithmetic did not give a date-time")
    return result


_ZONE = re.compile(r"(\[[^\]]*\]|@.*)$")


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
        zone = _ZONE.search(text)
        # Designators in either case ('t', 'z'); a zone id keeps its own case.
        upper = text[: zone.start()].upper() + zone.group(0) if zone else text.upper()
        parsed = parse_datetime(upper)
        if isinstance(parsed, datetime):
            moment = parsed
        else:
            if zone is not None:
                raise ValueError(f"{text!r} is not a date-time with a valid zone")
            try:
                moment = isodate.parse_datetime(upper)
            except (isodate.ISO8601Error, ValueError):
                raise ValueError(
                    f"{text!r} is not an ISO 8601 date-time (e.g. '2026-10-02T08:00:00Z')"
                ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def _cycle(value: Any, now: datetime) -> ArmedTimer:
    text = value if isinstance(value, str) else json_value(value)
    if not isinstance(text, str):
        raise ValueError(f"expected a repeating interval, got {type(value).__name__}")
    cron = _as_cron(text)
    if cron is not None:
        first = cron_next(cron, now)
        return ArmedTimer(first, None, (cron_next(cron, first) - first).total_seconds(), cron)
    parts = text.strip().split("/")
    if not parts[0].upper().startswith("R"):
        raise ValueError(
            f"{text!r} is not a repeating interval (R<n>/<duration>) nor a cron expression"
        )
    count = parts[0][1:]
    try:
        repetitions = int(count) if count else None
    except ValueError:
        raise ValueError(f"{text!r} has a bad repetition count {count!r}") from None
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

"""The registry of FEEL's built-in functions, and property access (``x.year``).

Functions register themselves with ``@builtin(name, *params)`` from the ``fn_*``
modules; a parameter ending in ``?`` is optional. This module imports none of them: it
sits below the compiler and every ``fn_*`` module (``range(from)`` compiles FEEL text,
so ``fn_range`` sits above the compiler), and ``api`` imports the ``fn_*`` modules, so
the table is complete before the first expression is compiled (the compiler looks a
name up when it compiles a call, not when it runs it). A name may have several signatures
(``date(from)`` and ``date(year, month, day)``): the call picks the one whose arity or
argument names fit. ``now()`` and ``today()`` are not here: they need the caller's
clock, which the evaluator passes in (``CLOCK_FUNCTIONS``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from dormant.engine_core.feel.far import FarMoment
from dormant.engine_core.feel.temporal import YearsMonthsDuration
from dormant.engine_core.feel.values import FeelFunction, Range

__all__ = ["BUILTINS", "CLOCK_FUNCTIONS", "builtin", "feel_property"]

BUILTINS: dict[str, list[FeelFunction]] = {}
F = TypeVar("F", bound=Callable[..., Any])


def builtin(name: str, *params: str, variadic: bool = False) -> Callable[[F], F]:
    names = tuple(p.rstrip("?") for p in params)
    required = sum(1 for p in params if not p.endswith("?"))

    def register(fn: F) -> F:
        BUILTINS.setdefault(name, []).append(FeelFunction(name, names, fn, required, variadic))
        return fn

    return register


def _today(now: datetime) -> date:
    return now.date()


CLOCK_FUNCTIONS: dict[str, Callable[[datetime], Any]] = {"now": lambda n: n, "today": _today}


def _offset(value: Any) -> Any:
    offset = value.utcoffset() if value.tzinfo is not None else None
    return offset


def _zone_name(value: Any) -> Any:
    key = getattr(value.tzinfo, "key", None)
    return key


def _time_props(v: Any, key: str) -> Any:
    if key == "hour":
        return Decimal(v.hour)
    if key == "minute":
        return Decimal(v.minute)
    if key == "second":
        return Decimal(v.second) + Decimal(v.microsecond) / Decimal(1_000_000)
    if key == "time offset":
        if isinstance(v, time):
            return v.utcoffset()
        return _offset(v)
    if key == "timezone":
        return _zone_name(v)
    return None


def feel_property(value: Any, key: str) -> Any:
    """``value.key``: a context entry, a temporal or range property, mapped over lists."""
    if isinstance(value, dict):
        return value.get(key)
    if isinstance(value, list):
        return [feel_property(v, key) for v in value]
    if isinstance(value, FarMoment):
        return Decimal(value.year) if key == "year" else feel_property(value.base, key)
    if isinstance(value, date):
        if key == "year":
            return Decimal(value.year)
        if key == "month":
            return Decimal(value.month)
        if key == "day":
            return Decimal(value.day)
        if key == "weekday":
            return Decimal(value.isoweekday())
        if isinstance(value, datetime):
            return _time_props(value, key)
        return None
    if isinstance(value, time):
        return _time_props(value, key)
    if isinstance(value, timedelta):
        secs = value.days * 86400 + value.seconds
        sign = -1 if value < timedelta(0) else 1
        secs = abs(secs) if value.microseconds == 0 or sign > 0 else abs(secs) - 1
        parts = {
            "days": secs // 86400,
            "hours": secs % 86400 // 3600,
            "minutes": secs % 3600 // 60,
            "seconds": secs % 60,
        }
        return Decimal(sign * parts[key]) if key in parts else None
    if isinstance(value, YearsMonthsDuration):
        months = abs(value.months)
        sign = -1 if value.months < 0 else 1
        if key == "years":
            return Decimal(sign * (months // 12))
        if key == "months":
            return Decimal(sign * (months % 12))
        return None
    if isinstance(value, Range):
        return {
            "start": value.start,
            "end": value.end,
            "start included": value.start_included,
            "end included": value.end_included,
        }.get(key)
    return None

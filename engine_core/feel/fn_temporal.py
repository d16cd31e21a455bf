"""Built-ins that build and inspect dates, times and durations."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

from dormant.engine_core.feel.builtins import builtin
from dormant.engine_core.feel.far import FarMoment, make_date, rebase, split
from dormant.engine_core.feel.temporal import (
    YearsMonthsDuration,
    parse_date,
    parse_datetime,
    parse_duration_text,
    parse_time,
    zone_named,
)

__all__: list[str] = []


def _int(value: Any) -> int | None:
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    return None


@builtin("date", "from")
def date_from(value: Any) -> Any:
    if isinstance(value, str):
        return parse_date(value)
    if isinstance(value, FarMoment):
        return rebase(date_from(value.base), value.cycles)
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    return None


@builtin("date", "year", "month", "day")
def date_parts(year: Any, month: Any, day: Any) -> Any:
    y, m, d = _int(year), _int(month), _int(day)
    if y is None or m is None or d is None:
        return None
    return make_date(y, m, d)


@builtin("time", "from")
def time_from(value: Any) -> Any:
    if isinstance(value, str):
        return parse_time(value)
    if isinstance(value, datetime):
        return value.timetz()
    if isinstance(value, date):
        return time(0, 0, 0, tzinfo=UTC)
    if isinstance(value, time):
        return value
    return None


@builtin("time", "hour", "minute", "second", "offset?")
def time_parts(hour: Any, minute: Any, second: Any, offset: Any = None) -> Any:
    h, m = _int(hour), _int(minute)
    if h is None or m is None or not isinstance(second, Decimal):
        return None
    if offset is not None and not isinstance(offset, timedelta):
        return None
    whole = int(second)
    micro = int((second - whole) * 1_000_000)
    tz = timezone(offset) if offset is not None else None
    return time(h, m, whole, micro, tzinfo=tz)


@builtin("date and time", "from")
def datetime_from(value: Any) -> Any:
    if isinstance(value, str):
        return parse_datetime(value)
    if isinstance(value, FarMoment):
        return rebase(datetime_from(value.base), value.cycles)
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    return None


def datetime_in_zone(value: Any, zone: Any) -> Any:
    """feel-scala's ``date and time(from, timezone)``: the same instant in zone ``timezone``
    (a local date-time is read as already in that zone)."""
    if not isinstance(value, datetime) or not isinstance(zone, str):
        return None
    tz = zone_named(zone)
    if tz is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=tz)
    return value.astimezone(tz)


@builtin("date and time", "date", "time")
def datetime_parts(d: Any, t: Any) -> Any:
    if isinstance(t, str):
        return datetime_in_zone(d, t)
    if isinstance(d, FarMoment):
        return rebase(datetime_parts(d.base, t), d.cycles)
    if not isinstance(d, date) or not isinstance(t, time):
        return None
    return datetime.combine(d if not isinstance(d, datetime) else d.date(), t)


builtin("date and time", "from", "timezone")(datetime_in_zone)


@builtin("duration", "from")
def duration(value: Any) -> Any:
    return parse_duration_text(value) if isinstance(value, str) else None


@builtin("years and months duration", "from", "to")
def years_and_months(start: Any, end: Any) -> Any:
    """Whole months from ``start`` to ``end``, by their dates alone (as Java's ``Period``)."""
    if not isinstance(start, (date, FarMoment)) or not isinstance(end, (date, FarMoment)):
        return None
    (a, i), (b, j) = split(start), split(end)
    months = (b.year - a.year + 400 * (j - i)) * 12 + b.month - a.month
    if months > 0 and b.day < a.day:
        months -= 1
    elif months < 0 and b.day > a.day:
        months += 1
    return YearsMonthsDuration(months)


_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


@builtin("day of week", "date")
def day_of_week(d: Any) -> Any:
    return _DAYS[d.weekday()] if isinstance(d, date) else None


@builtin("day of year", "date")
def day_of_year(d: Any) -> Any:
    return Decimal(d.timetuple().tm_yday) if isinstance(d, date) else None


@builtin("week of year", "date")
def week_of_year(d: Any) -> Any:
    return Decimal(d.isocalendar()[1]) if isinstance(d, date) else None


@builtin("month of year", "date")
def month_of_year(d: Any) -> Any:
    return _MONTHS[d.month - 1] if isinstance(d, date) else None


@builtin("last day of month", "date")
def last_day_of_month(d: Any) -> Any:
    if not isinstance(d, date):
        return None
    first_next = date(d.year + d.month // 12, d.month % 12 + 1, 1)
    return first_next - timedelta(days=1)  # a date, as feel-scala answers

"""FEEL's temporal values, built on the standard library's types.

``date``, ``time`` and ``datetime`` stand for FEEL's date, time and date and time (a
naive value is FEEL's "local" one, which is not the same as UTC); ``timedelta`` is the
days-and-time duration. Python has no calendar-months duration, so
``YearsMonthsDuration`` fills that gap. Reusing the standard types means the engine can
add a parsed timer duration to its own ``datetime`` without a conversion layer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from dormant.engine_core.feel.far import FarMoment, format_year, make_date, rebase

__all__ = [
    "YearsMonthsDuration",
    "add_months",
    "format_date",
    "format_datetime",
    "format_duration",
    "format_time",
    "parse_date",
    "parse_datetime",
    "parse_duration_text",
    "parse_time",
    "zone_named",
]


@dataclass(frozen=True, slots=True)
class YearsMonthsDuration:
    """A FEEL years-and-months duration: calendar months, which no fixed ``timedelta`` is."""

    months: int

    @property
    def years(self) -> int:
        return _trunc_div(self.months, 12)

    def add_to(self, moment: datetime) -> datetime:
        """``moment`` moved by this many calendar months, the day clamped to the month's end."""
        result = add_months(moment, self.months)
        assert isinstance(result, datetime)
        return result

    def __neg__(self) -> YearsMonthsDuration:
        return YearsMonthsDuration(-self.months)

    def __lt__(self, other: YearsMonthsDuration) -> bool:
        return self.months < other.months

    def __le__(self, other: YearsMonthsDuration) -> bool:
        return self.months <= other.months

    def __str__(self) -> str:
        return format_duration(self)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // b
    return q if a >= 0 else -q


def add_months(value: date, months: int) -> date:
    """``value`` shifted by ``months``; the day is clamped (Jan 31 + 1 month = Feb 28/29)."""
    total = value.year * 12 + (value.month - 1) + months
    year, month = divmod(total, 12)
    month += 1
    day = min(value.day, _days_in_month(year, month))
    return value.replace(year=year, month=month, day=day)


def _days_in_month(year: int, month: int) -> int:
    if month == 12:
        return 31
    return (date(year, month + 1, 1) - date(year, month, 1)).days


_DATE = re.compile(r"(-?(?:\d{4}|[1-9]\d{4,8}))-(\d\d)-(\d\d)")
_TIME = re.compile(
    r"(\d\d):(\d\d):(\d\d)(\.\d+)?"
    r"(Z|[+-]\d\d:\d\d(?::\d\d)?)?(?:@([A-Za-z_][A-Za-z0-9_+\-/]*))?"
)
# java.time's zoned form, as Zeebe and feel-scala write it: an offset, then the zone id
# in brackets (``2026-10-02T08:09:40+02:00[Europe/Berlin]``).
_BRACKETED = re.compile(r"(.*?)(Z|[+-]\d\d:\d\d(?::\d\d)?)?\[([A-Za-z_][A-Za-z0-9_+\-/]*)\]")
_DURATION = re.compile(
    r"(-)?P(?!$)(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)W)?(?:(-?\d+)D)?"
    r"(?:T(?=-?\d)(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+(?:\.\d*)?)S)?)?"
)


def zone_named(name: str) -> tzinfo | None:
    """The IANA zone ``name`` from the tz database (data, not a clock), or None if unknown."""
    if name in ("Z", "UTC", "Etc/UTC"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ValueError, KeyError, OSError):
        return None


def parse_date(text: str) -> date | FarMoment | None:
    """A FEEL date from ``YYYY-MM-DD``; None for an invalid calendar date.

    A year outside 1..9999 (``-2021``, ``999999999``) gives a ``FarMoment``.
    """
    m = _DATE.fullmatch(text)
    if not m:
        return None
    return make_date(int(m.group(1)), int(m.group(2)), int(m.group(3)))


def parse_time(text: str) -> time | None:
    """A FEEL time, with an optional offset or ``@zone``; None if malformed.

    A leading ``T`` (``time("T23:59:00")``, ISO 8601's time designator) is read too, as
    feel-scala does."""
    if text.startswith("T"):
        text = text[1:]
    m = _TIME.fullmatch(text)
    if not m:
        return None
    hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3))
    micro = int((m.group(4) or ".0")[1:].ljust(6, "0")[:6])
    tz = _zone(m.group(5), m.group(6))
    if tz is False or hour > 23 or minute > 59 or second > 59:
        return None
    if isinstance(tz, tzinfo) and not isinstance(tz, timezone):
        probe = datetime(2000, 1, 1, hour, minute, second, tzinfo=tz)
        offset = probe.utcoffset()
        tz = timezone(offset) if offset is not None else None
    return time(hour, minute, second, micro, tzinfo=tz if isinstance(tz, tzinfo) else None)


def _zone(offset: str | None, name: str | None) -> tzinfo | bool | None:
    if offset and name:
        return False
    if name:
        return zone_named(name) or False
    if not offset:
        return None
    if offset == "Z":
        return UTC
    sign = -1 if offset[0] == "-" else 1
    parts = [int(p) for p in offset[1:].split(":")]
    delta = timedelta(hours=parts[0], minutes=parts[1], seconds=parts[2] if len(parts) > 2 else 0)
    if delta > timedelta(hours=14):
        return False
    return timezone(sign * delta)


def parse_datetime(text: str) -> datetime | FarMoment | None:
    """A FEEL date and time (``date`` alone means midnight, local); None if malformed.

    Also java.time's ``...+02:00[Europe/Berlin]``: the zone id decides, and the offset
    must be the zone's at that moment (else None, as java.time refuses a mismatch).
    """
    bracketed = _BRACKETED.fullmatch(text)
    if bracketed is not None:
        local, offset, zone = bracketed.groups()
        zoned = parse_datetime(f"{local}@{zone}")
        if isinstance(zoned, datetime) and offset is not None:
            stated = parse_datetime(local + offset)
            if not isinstance(stated, datetime) or stated != zoned:
                return None
        return zoned
    if "T" not in text:
        text += "T00:00:00"
    date_part, time_part = text.split("T", 1)
    d = _DATE.fullmatch(date_part)
    m = _TIME.fullmatch(time_part)
    if d is None or m is None:
        return None
    hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3))
    micro = int((m.group(4) or ".0")[1:].ljust(6, "0")[:6])
    tz = _zone(m.group(5), m.group(6))
    if tz is False or minute > 59 or second > 59 or hour > 24:
        return None
    extra = timedelta(0)
    if hour == 24:
        if minute or second or micro:
            return None
        hour, extra = 0, timedelta(days=1)
    moment = make_date(
        int(d.group(1)),
        int(d.group(2)),
        int(d.group(3)),
        (hour, minute, second, micro),
        tz=tz if isinstance(tz, tzinfo) else None,
    )
    if moment is None or not extra:
        return moment  # type: ignore[return-value]
    try:
        if isinstance(moment, FarMoment):
            return rebase(moment.base + extra, moment.cycles)  # type: ignore[no-any-return]
        return moment + extra  # type: ignore[return-value]
    except OverflowError:
        return None


def parse_duration_text(text: str) -> timedelta | YearsMonthsDuration | None:
    """ISO 8601: ``Y``/``M`` before ``T`` make a years-and-months duration, else days-and-time."""
    m = _DURATION.fullmatch(text)
    if not m:
        return None
    neg, years, months, weeks, days, hours, minutes, seconds = m.groups()
    sign = -1 if neg else 1
    if years or months:
        if weeks or days or hours or minutes or seconds:
            return None
        return YearsMonthsDuration(sign * (int(years or 0) * 12 + int(months or 0)))
    secs = Decimal(seconds or 0)
    try:
        # A component may carry its own sign (``PT-5M``, java.time's form), as feel-scala reads.
        value = timedelta(
            weeks=int(weeks or 0),
            days=int(days or 0),
            hours=int(hours or 0),
            minutes=int(minutes or 0),
            seconds=int(secs),
            microseconds=int((secs - int(secs)) * 1_000_000),
        )
    except OverflowError:
        return None
    return -value if sign < 0 else value


def format_duration(value: timedelta | YearsMonthsDuration) -> str:
    """ISO 8601 text, normalised: ``P1DT2H``, ``-PT1M``, ``PT0S``, ``P1Y2M``, ``P0M``."""
    if isinstance(value, YearsMonthsDuration):
        sign = "-" if value.months < 0 else ""
        years, months = divmod(abs(value.months), 12)
        if not years and not months:
            return "P0Y"  # as feel-scala (java.time.Period) writes a zero years-months duration
        body = (f"{years}Y" if years else "") + (f"{months}M" if months else "")
        return f"{sign}P{body}"
    sign = "-" if value < timedelta(0) else ""
    value = abs(value)
    days = value.days
    hours, rest = divmod(value.seconds, 3600)
    minutes, secs = divmod(rest, 60)
    time_part = ""
    if hours:
        time_part += f"{hours}H"
    if minutes:
        time_part += f"{minutes}M"
    if secs or value.microseconds:
        frac = f".{value.microseconds:06d}".rstrip("0") if value.microseconds else ""
        time_part += f"{secs}{frac}S"
    if not days and not time_part:
        return "P0D"  # as feel-scala writes a zero days-time duration
    return f"{sign}P" + (f"{days}D" if days else "") + (f"T{time_part}" if time_part else "")


def format_date(value: date | FarMoment) -> str:
    return (
        f"{format_year(value.year)}-{value.base.month:02d}-{value.base.day:02d}"
        if isinstance(value, FarMoment)
        else f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    )


def _format_offset(value: Any) -> str:
    tz = value.tzinfo
    if tz is None:
        return ""
    zone_key = getattr(tz, "key", None)
    if zone_key:
        return f"@{zone_key}"
    offset = value.utcoffset()
    if offset is None:
        return ""
    if offset == timedelta(0):
        return "Z"
    sign = "-" if offset < timedelta(0) else "+"
    total = int(abs(offset).total_seconds())
    text = f"{sign}{total // 3600:02d}:{total % 3600 // 60:02d}"
    return text + (f":{total % 60:02d}" if total % 60 else "")


def format_time(value: time) -> str:
    text = f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}"
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    if value.tzinfo is not None:
        text += _format_offset(datetime.combine(date(2000, 1, 1), value))
    return text


def format_datetime(value: datetime | FarMoment) -> str:
    base = value.base if isinstance(value, FarMoment) else value
    assert isinstance(base, datetime)
    return f"{format_date(value)}T{format_time(base.time())}{_format_offset(base)}"

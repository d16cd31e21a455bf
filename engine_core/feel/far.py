"""Dates and date-times whose year is outside Python's 1..9999 (``-2021-01-01``).

The Gregorian calendar repeats every 400 years (146,097 days, a whole number of weeks),
so such a value is kept as a stand-in ``base`` of the same month, day, weekday and time
whose year lies in 2000..2399, plus how many 400-year ``cycles`` to add to its year.
Arithmetic runs on the stand-in and the result is shifted back (``rebase``); anything
that does not know ``FarMoment`` sees a non-date and answers null, FEEL's usual answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo
from typing import Any

__all__ = ["CYCLE_DAYS", "FarMoment", "make_date", "rebase", "split"]

CYCLE_YEARS = 400
CYCLE_DAYS = 146_097
_BASE_YEAR = 2000


@dataclass(frozen=True, slots=True)
class FarMoment:
    """A FEEL date (``base`` is a ``date``) or date and time (a ``datetime``) of any year."""

    base: date
    cycles: int

    @property
    def year(self) -> int:
        return self.base.year + CYCLE_YEARS * self.cycles

    @property
    def is_datetime(self) -> bool:
        return isinstance(self.base, datetime)


def split(value: date | FarMoment) -> tuple[date, int]:
    """The stand-in and its cycles; a plain value is its own stand-in with no cycles."""
    if isinstance(value, FarMoment):
        return value.base, value.cycles
    return value, 0


def rebase(value: Any, cycles: int) -> Any:
    """``value`` (a date or datetime) moved ``cycles`` 400-year cycles on, in its best form."""
    if not isinstance(value, date) or cycles == 0:
        return value
    year = value.year + CYCLE_YEARS * cycles
    if 1 <= year <= 9999:
        return value.replace(year=year)
    shift = (year - _BASE_YEAR) // CYCLE_YEARS
    return FarMoment(value.replace(year=year - CYCLE_YEARS * shift), shift)


def make_date(
    year: int,
    month: int,
    day: int,
    clock: tuple[int, int, int, int] | None = None,
    tz: tzinfo | None = None,
) -> date | FarMoment | None:
    """A date, or with ``clock`` (hour, minute, second, microsecond) a date and time.

    Years reach +-999,999,999, as in the DMN TCK (and Java's ``LocalDate``).
    """
    if abs(year) > 999_999_999:
        return None
    shift = 0 if 1 <= year <= 9999 else (year - _BASE_YEAR) // CYCLE_YEARS
    try:
        if clock:
            h, mi, s, us = clock
            base: date = datetime(year - CYCLE_YEARS * shift, month, day, h, mi, s, us, tzinfo=tz)
        else:
            base = date(year - CYCLE_YEARS * shift, month, day)
    except (ValueError, OverflowError):
        return None
    return FarMoment(base, shift) if shift else base


def difference(a: Any, b: Any, sub: Any) -> Any:
    """``a - b`` for two moments, either far: the stand-ins' difference plus whole cycles."""
    (x, i), (y, j) = split(a), split(b)
    delta = sub(x, y)
    if not isinstance(delta, timedelta):
        return delta
    try:
        return delta + timedelta(days=CYCLE_DAYS * (i - j))
    except OverflowError:
        return None


def format_year(year: int) -> str:
    return f"-{-year:04d}" if year < 0 else f"{year:04d}"

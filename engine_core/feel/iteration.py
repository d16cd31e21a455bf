"""What ``for``, ``some`` and ``every`` iterate over: lists, and ranges made lazily.

A range is never materialised (``1..1000000000`` is a ``range`` object): a quantifier
stops at the first item that decides, and a ``for`` stops at the collection bound of
``limits``, so neither costs memory for items it never reaches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from dormant.engine_core.feel.values import Range

__all__ = ["domain"]


def domain(value: Any, end: Any, spanned: bool) -> Sequence[Any] | None:
    """What an iteration runs over: a list, or a lazy sequence for a range (``1..n``).

    A range is never materialised: ``some x in 1..1000000000 satisfies x > 3`` stops at
    the fourth item, and a ``for`` over it stops at the collection bound.
    """
    if spanned:
        return _span(value, end)
    if isinstance(value, Range):
        if not all(isinstance(v, Decimal) for v in (value.start, value.end)):
            return None  # only a range of numbers can be iterated
        if value.end < value.start:
            return None
        a = int(value.start) + (0 if value.start_included else 1)
        b = int(value.end) - (0 if value.end_included else 1)
        return _Numbers(range(a, b + 1))
    if value is None:
        return None
    return value if isinstance(value, list) else None  # feel-scala: iterating a non-list fails


class _Numbers(Sequence[Decimal]):
    """Whole numbers of a ``range`` as FEEL numbers, made one at a time."""

    __slots__ = ("_r",)

    def __init__(self, r: range) -> None:
        self._r = r

    def __len__(self) -> int:
        return len(self._r)

    def __getitem__(self, i: Any) -> Any:
        return Decimal(self._r[i])

    def __iter__(self) -> Iterator[Decimal]:
        return (Decimal(i) for i in self._r)


class _Days(Sequence[date]):
    """Consecutive days, up or down, made one at a time."""

    __slots__ = ("_r", "_start")

    def __init__(self, start: date, r: range) -> None:
        self._start, self._r = start, r

    def __len__(self) -> int:
        return len(self._r)

    def __getitem__(self, i: Any) -> Any:
        return self._start + timedelta(days=self._r[i])

    def __iter__(self) -> Iterator[date]:
        return (self._start + timedelta(days=i) for i in self._r)


def _span(a: Any, b: Any) -> Sequence[Any] | None:
    """The items of ``a..b`` in a ``for``: whole numbers or days, up or down."""
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        if not (a.is_finite() and b.is_finite()):
            return None
        step = 1 if b >= a else -1
        return _Numbers(range(int(a), int(b) + step, step))
    if type(a) is date and type(b) is date:
        days = (b - a).days
        step = 1 if days >= 0 else -1
        return _Days(a, range(0, days + step, step))
    return None

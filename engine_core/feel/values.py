"""FEEL's value kinds and how Python / JSON values map onto them.

Numbers are ``Decimal`` in IEEE 754 decimal128 (34 digits, half-even), as the spec
asks, so ``0.1 + 0.2 = 0.3`` holds. ``bool`` is tested before numbers everywhere because
``True == 1`` in Python but never in FEEL. Contexts are ``dict`` and lists ``list``, so
JSON process variables need no wrapping beyond turning their numbers into ``Decimal``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import ROUND_HALF_EVEN, Context, Decimal
from typing import Any

from dormant.engine_core.feel.far import FarMoment
from dormant.engine_core.feel.temporal import YearsMonthsDuration

__all__ = [
    "DECIMAL",
    "FeelFunction",
    "Range",
    "UnaryTest",
    "is_number",
    "kind_of",
    "to_feel",
]

DECIMAL = Context(prec=34, rounding=ROUND_HALF_EVEN, Emax=6144, Emin=-6143)


def is_number(value: Any) -> bool:
    return isinstance(value, Decimal)


@dataclass(frozen=True, slots=True)
class Range:
    """A FEEL range. A ``None`` end is unbounded when ``open_ended`` (a unary test like
    ``< 5``); in a literal (``(null..10]``) it is an unknown end, and ``in`` is null."""

    start: Any
    end: Any
    start_included: bool
    end_included: bool
    open_ended: bool = False


@dataclass(frozen=True, slots=True)
class UnaryTest:
    """A test value that is not a range (``!= 5``), applied by ``in`` and unary tests."""

    test: Callable[[Any], bool | None]
    op: str = ""  # "=" or "!=" with its operand, so that ``(=10) = (=10)`` holds
    operand: Any = None


@dataclass(frozen=True, slots=True)
class FeelFunction:
    """A callable FEEL value: a user ``function(...)`` or a built-in.

    ``params`` are FEEL names so that named arguments can be mapped; ``call`` takes the
    arguments in parameter order. ``variadic`` functions receive every positional argument.
    """

    name: str
    params: tuple[str, ...]
    call: Callable[..., Any]
    required: int = -1
    variadic: bool = False

    def min_args(self) -> int:
        return len(self.params) if self.required < 0 else self.required


def to_feel(value: Any) -> Any:
    """A JSON / Python value as a FEEL value: ints and floats become ``Decimal``."""
    kind = type(value)
    if kind is dict:  # JSON's own types first, by exact type: the hot path
        return {str(k): to_feel(v) for k, v in value.items()}
    if kind is list:
        return [to_feel(v) for v in value]
    if value is None or isinstance(value, (str, bool, Decimal)):
        return value
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None
        return Decimal(repr(value))
    if isinstance(value, Mapping):
        return {str(k): to_feel(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_feel(v) for v in value]
    return value


def kind_of(value: Any) -> str:
    """The FEEL type name of ``value``, used by ``instance of`` and operator dispatch."""
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, Decimal):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, datetime):
        return "date and time"
    if isinstance(value, date):
        return "date"
    if isinstance(value, time):
        return "time"
    if isinstance(value, timedelta):
        return "days and time duration"
    if isinstance(value, YearsMonthsDuration):
        return "years and months duration"
    if isinstance(value, FarMoment):
        return "date and time" if value.is_datetime else "date"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "context"
    if isinstance(value, (Range, UnaryTest)):
        return "range"
    if isinstance(value, FeelFunction):
        return "function"
    return "Any"

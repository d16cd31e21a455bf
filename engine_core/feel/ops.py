"""FEEL's operators over values: equality, ordering, arithmetic, membership.

Every operator returns None (FEEL null) for operand kinds it does not define, rather
than raising: FEEL has no run-time exceptions, and a null is what Camunda turns into an
incident where a value was required.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from dormant.engine_core.feel import limits
from dormant.engine_core.feel.far import FarMoment, difference, rebase
from dormant.engine_core.feel.temporal import YearsMonthsDuration, add_months
from dormant.engine_core.feel.values import DECIMAL, FeelFunction, Range, UnaryTest, kind_of

__all__ = [
    "add",
    "compare",
    "div",
    "equal",
    "equality_key",
    "in_test",
    "less",
    "mul",
    "neg",
    "power",
    "sub",
]

_ORDERED = (
    "number",
    "string",
    "date",
    "date and time",
    "time",
    "days and time duration",
    "years and months duration",
)


def equal(a: Any, b: Any) -> bool | None:
    """FEEL ``=``: null equals only null; different kinds are not comparable (null)."""
    if a is None or b is None:
        return a is None and b is None
    if a is b:
        return True  # also keeps a value shared many times inside a list linear to compare
    ka, kb = kind_of(a), kind_of(b)
    if ka != kb:
        return None
    if ka == "list":
        if len(a) != len(b):
            return False
        limits.charge(len(a))
        result: bool | None = True
        for x, y in zip(a, b, strict=True):
            r = equal(x, y)
            if r is False:
                return False
            if r is None:
                result = None
        return False if result is None else result  # feel-scala: [1] = [true] is false
    if ka == "context":
        if a.keys() != b.keys():
            return False
        limits.charge(len(a))
        for key in a:
            if equal(a[key], b[key]) is not True:
                return False  # feel-scala: {x: 1} = {x: true} is false
        return True
    if isinstance(a, FarMoment) or isinstance(b, FarMoment):
        d = difference(a, b, sub)
        return None if d is None else d == timedelta(0)
    if ka in ("date and time", "time"):
        if (a.tzinfo is None) != (b.tzinfo is None):
            return False
        # Equal to the millisecond, as the DMN TCK (0068 time_005, datetime_003_a) expects.
        return bool(
            a.replace(microsecond=a.microsecond // 1000 * 1000)
            == b.replace(microsecond=b.microsecond // 1000 * 1000)
        )
    if ka == "range" and isinstance(a, Range) and isinstance(b, Range):
        return (
            equal(a.start, b.start) is not False
            and equal(a.end, b.end) is not False
            and a.start_included == b.start_included
            and a.end_included == b.end_included
            and a.open_ended == b.open_ended
        )
    if isinstance(a, UnaryTest) and isinstance(b, UnaryTest):
        return a is b or (bool(a.op) and a.op == b.op and equal(a.operand, b.operand) is True)
    return bool(a == b)


def equality_key(value: Any) -> Hashable | None:
    """A hashable key with ``equality_key(a) == equality_key(b)`` iff ``equal(a, b)`` is True,
    or None for a value with no such key (ranges, functions, far dates, or anything
    holding one): the list built-ins then compare those few pairwise.

    It is what makes ``distinct values``, ``union`` and ``duplicate values`` linear: FEEL
    equality is not Python's (``1 = 1.0``; a bool is not a number; date-times equal to
    the millisecond, by instant when zoned, never a zoned one to a local one), so the
    key spells it out per kind.
    """
    fast = _KEY_BY_TYPE.get(type(value))
    if fast is not None:
        return fast(value)
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, (Decimal, str)):
        # Their own keys: Decimal hashes and equates 1 and 1.0, as FEEL does, and neither
        # a number nor a string equals any other key (booleans, the one kind Python
        # equates with numbers, are tagged).
        return value
    if isinstance(value, datetime):
        moment = value.replace(microsecond=value.microsecond // 1000 * 1000)
        if value.tzinfo is None or value.utcoffset() is None:
            return ("date and time", False, moment)
        return ("date and time", True, moment.astimezone(UTC).replace(tzinfo=None))
    if isinstance(value, date):
        return ("date", value)
    if isinstance(value, time):
        ms = (
            (value.hour * 60 + value.minute) * 60 + value.second
        ) * 1000 + value.microsecond // 1000
        offset = value.utcoffset()
        if value.tzinfo is None or offset is None:
            return ("time", False, ms)
        return ("time", True, ms - offset // timedelta(milliseconds=1))
    if isinstance(value, timedelta):
        return ("days and time duration", value)
    if isinstance(value, YearsMonthsDuration):
        return ("years and months duration", value.months)
    if isinstance(value, list):
        return _list_key(value)
    if isinstance(value, dict):
        return _context_key(value)
    return None


def _list_key(value: list[Any]) -> Hashable | None:
    limits.charge(len(value))
    items = []
    for item in value:
        key = equality_key(item)
        if key is None:
            return None
        items.append(key)
    return ("list", tuple(items))


def _context_key(value: dict[str, Any]) -> Hashable | None:
    """Its entries sorted by name, not a frozenset of them: equal contexts have the
    same names, so the order is canonical, and a tuple is a quarter of a frozenset's
    memory (at 100k contexts the frozensets' allocation was most of the key's time).
    Names are distinct, so the sort never compares two keys, which may not order."""
    limits.charge(len(value))
    entries = []
    for name, item in value.items():
        key = equality_key(item)
        if key is None:
            return None
        entries.append((name, key))
    entries.sort()
    return ("context", tuple(entries))


# The common kinds by exact type, before the isinstance chain (a hot path: every item).
_KEY_BY_TYPE: dict[type, Callable[[Any], Hashable | None]] = {
    type(None): lambda v: ("null",),
    bool: lambda v: ("boolean", v),
    Decimal: lambda v: v,
    str: lambda v: v,
    list: _list_key,
    dict: _context_key,
}


def less(a: Any, b: Any) -> bool | None:
    ka = kind_of(a)
    if ka != kind_of(b) or ka not in _ORDERED:
        return None
    if isinstance(a, FarMoment) or isinstance(b, FarMoment):
        d = difference(a, b, sub)
        return None if d is None else d < timedelta(0)
    try:
        return bool(a < b)
    except TypeError:
        return None


def compare(op: str, a: Any, b: Any) -> bool | None:
    if op == "=":
        return equal(a, b)
    if op == "!=":
        r = equal(a, b)
        return None if r is None else not r
    if op == "<":
        return less(a, b)
    if op == ">":
        return less(b, a)
    lt = less(a, b) if op == "<=" else less(b, a)
    if lt is None:
        return None
    return lt or equal(a, b) is True


def _midnight(d: date) -> datetime:
    """A date as a date and time: midnight UTC, as DMN 1.4 (10.3.2.3.6) defines it."""
    return d if isinstance(d, datetime) else datetime(d.year, d.month, d.day, tzinfo=UTC)


def add(a: Any, b: Any) -> Any:
    ka, kb = kind_of(a), kind_of(b)
    if ka == "number" and kb == "number":
        return DECIMAL.add(a, b)
    if ka == "string" and kb == "string":
        limits.check_string(len(a) + len(b))
        return a + b
    if ka == kb == "days and time duration":
        return a + b
    if ka == kb == "years and months duration":
        return YearsMonthsDuration(a.months + b.months)
    if kb in ("date", "date and time", "time") and ka.endswith("duration"):
        a, b, ka, kb = b, a, kb, ka
    if ka in ("date", "date and time"):
        if isinstance(a, FarMoment):
            return rebase(add(a.base, b), a.cycles)
        if kb == "years and months duration":
            return add_months(a, b.months)
        if kb == "days and time duration":
            result = _midnight(a) + b
            return result if ka == "date and time" else result.date()
        return None
    if ka == "time" and kb == "days and time duration":
        moved = datetime.combine(date(2000, 1, 1), a) + b
        return moved.timetz()
    return None


def neg(a: Any) -> Any:
    if isinstance(a, Decimal):
        return DECIMAL.minus(a)
    if isinstance(a, (timedelta, YearsMonthsDuration)):
        return -a
    return None


def sub(a: Any, b: Any) -> Any:
    ka, kb = kind_of(a), kind_of(b)
    if ka == "number" and kb == "number":
        return DECIMAL.subtract(a, b)
    if ka == kb == "days and time duration":
        return a - b
    if ka == kb == "years and months duration":
        return YearsMonthsDuration(a.months - b.months)
    if ka in ("date", "date and time") and kb in ("date", "date and time"):
        if isinstance(a, FarMoment) or isinstance(b, FarMoment):
            return difference(a, b, sub)
        x, y = _midnight(a), _midnight(b)
        if (x.tzinfo is None) != (y.tzinfo is None):
            return None
        return x - y
    if ka == kb == "time":
        x = datetime.combine(date(2000, 1, 1), a)
        y = datetime.combine(date(2000, 1, 1), b)
        try:
            return x - y
        except TypeError:
            return None
    if ka in ("date", "date and time", "time") and kb.endswith("duration"):
        return add(a, neg(b))
    return None


def mul(a: Any, b: Any) -> Any:
    ka, kb = kind_of(a), kind_of(b)
    if ka == "number" and kb == "number":
        return DECIMAL.multiply(a, b)
    if ka == "number" and kb.endswith("duration"):
        a, b, ka, kb = b, a, kb, ka
    if kb != "number":
        return None
    if ka == "days and time duration":
        return _seconds_to_delta(DECIMAL.multiply(_delta_seconds(a), b))
    if ka == "years and months duration":
        return YearsMonthsDuration(int(DECIMAL.multiply(Decimal(a.months), b)))
    return None


def div(a: Any, b: Any) -> Any:
    ka, kb = kind_of(a), kind_of(b)
    try:
        if ka == "number" and kb == "number":
            return None if b == 0 else DECIMAL.divide(a, b)
        if kb == "number" and b == 0:
            return None
        if ka == "days and time duration" and kb == "number":
            return _seconds_to_delta(DECIMAL.divide(_delta_seconds(a), b))
        if ka == "years and months duration" and kb == "number":
            return YearsMonthsDuration(int(DECIMAL.divide(Decimal(a.months), b)))
        if ka == kb == "days and time duration":
            bs = _delta_seconds(b)
            return None if bs == 0 else DECIMAL.divide(_delta_seconds(a), bs)
        if ka == kb == "years and months duration":
            return None if b.months == 0 else DECIMAL.divide(Decimal(a.months), Decimal(b.months))
    except (InvalidOperation, ArithmeticError):
        return None
    return None


def power(a: Any, b: Any) -> Any:
    if not (isinstance(a, Decimal) and isinstance(b, Decimal)):
        return None
    try:
        if b == b.to_integral_value():
            return DECIMAL.power(a, int(b))
        return DECIMAL.power(a, b)
    except (InvalidOperation, ArithmeticError):
        return None


def _delta_seconds(d: timedelta) -> Decimal:
    return Decimal(d.days * 86400 + d.seconds) + Decimal(d.microseconds) / Decimal(1_000_000)


def _seconds_to_delta(s: Decimal) -> timedelta:
    return timedelta(seconds=int(s), microseconds=int((s - int(s)) * 1_000_000))


def in_test(value: Any, test: Any) -> bool | None:
    """``value in test``: a range or unary test applies, a list means membership, else ``=``."""
    if isinstance(test, Range):
        return in_range(value, test)
    if isinstance(test, UnaryTest):
        return test.test(value)
    if isinstance(test, list):
        if any(equal(value, item) is True for item in test):
            return True
        if any(isinstance(item, (Range, UnaryTest)) and in_test(value, item) for item in test):
            return True
        return False
    if isinstance(test, bool) and not isinstance(value, bool):
        return test
    if isinstance(test, FeelFunction):
        return None
    return equal(value, test)


def in_range(value: Any, r: Range) -> bool | None:
    if value is None or (not r.open_ended and (r.start is None or r.end is None)):
        return None
    if r.start is not None:
        c = compare("<=" if r.start_included else "<", r.start, value)
        if c is not True:
            return c
    if r.end is not None:
        c = compare("<=" if r.end_included else "<", value, r.end)
        if c is not True:
            return c
    return True

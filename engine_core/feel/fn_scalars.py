"""Built-ins over single values: conversion, strings, numbers, booleans, contexts.

Each function trusts nothing about its arguments: a wrong kind is answered with None
(the registry also turns an invalid-argument exception into None: ``scope.INVALID_CALL``),
because FEEL's answer to an invalid call is null, not an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, datetime, time, timedelta
from decimal import (
    ROUND_CEILING,
    ROUND_DOWN,
    ROUND_FLOOR,
    ROUND_HALF_DOWN,
    ROUND_HALF_EVEN,
    ROUND_HALF_UP,
    ROUND_UP,
    Decimal,
)
from typing import Any

from dormant.engine_core.feel import limits, ops
from dormant.engine_core.feel.builtins import builtin
from dormant.engine_core.feel.far import FarMoment
from dormant.engine_core.feel.temporal import (
    YearsMonthsDuration,
    format_date,
    format_datetime,
    format_duration,
    format_time,
)
from dormant.engine_core.feel.values import DECIMAL, Range

__all__ = ["format_number", "to_string"]


def format_number(n: Decimal) -> str:
    text = format(n.normalize(DECIMAL), "f")
    return "0" if text in ("-0", "0") else text


def to_string(value: Any) -> Any:
    """FEEL ``string(from)``: the value's FEEL text form."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format_number(value)
    if isinstance(value, FarMoment):
        return format_datetime(value) if value.is_datetime else format_date(value)
    if isinstance(value, datetime):
        return format_datetime(value)
    if isinstance(value, date):
        return format_date(value)
    if isinstance(value, time):
        return format_time(value)
    if isinstance(value, (timedelta, YearsMonthsDuration)):
        return format_duration(value)
    if isinstance(value, list):
        return "[" + _joined(_inner(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + _joined(f"{k}:{_inner(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Range):
        lo = "[" if value.start_included else "("
        hi = "]" if value.end_included else ")"
        return f"{lo}{_inner(value.start)}..{_inner(value.end)}{hi}"
    return None


def _joined(parts: Iterable[str]) -> str:
    """``", "``-joined, checked against the string bound as it grows, not after: a list
    may hold the same large value many times over, and its text would multiply."""
    out: list[str] = []
    size = 0
    for part in parts:
        limits.charge()
        size += len(part) + 2
        limits.check_string(size)
        out.append(part)
    return ", ".join(out)


def _inner(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    return str(to_string(value))


builtin("string", "from")(to_string)


@builtin("number", "from", "grouping separator?", "decimal separator?")
def number(text: Any, group: Any = None, dec: Any = None) -> Any:
    if not isinstance(text, str) or group not in (None, " ", ",", "."):
        return None
    if dec not in (None, ",", "."):
        return None
    if group is not None and group == dec:
        return None
    if group:
        text = text.replace(group, "")
    if dec:
        text = text.replace(dec, ".")
    if not re.fullmatch(r"-?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", text):
        return None
    return DECIMAL.plus(Decimal(text))


def _strs(*values: Any) -> bool:
    return all(isinstance(v, str) for v in values)


def _is_int(value: Any) -> bool:
    """A number used as a whole number; FEEL truncates a fraction (``substring(s, 3, 3.8)``)."""
    return isinstance(value, Decimal) and value.is_finite()


@builtin("substring", "string", "start position", "length?")
def substring(s: Any, start: Any, length: Any = None) -> Any:
    if not _strs(s) or not _is_int(start) or (length is not None and not _is_int(length)):
        return None
    chars = list(s)
    i = int(start)
    begin = i - 1 if i > 0 else len(chars) + i
    length = None if length is None else Decimal(int(length))
    if i == 0 or begin < 0 or begin > len(chars):
        return None if i == 0 or begin < 0 else ""
    if length is None:
        return "".join(chars[begin:])
    if length < 0:
        return None
    return "".join(chars[begin : begin + int(length)])


@builtin("string length", "string")
def string_length(s: Any) -> Any:
    return Decimal(len(s)) if _strs(s) else None


@builtin("upper case", "string")
def upper_case(s: Any) -> Any:
    return s.upper() if _strs(s) else None


@builtin("lower case", "string")
def lower_case(s: Any) -> Any:
    return s.lower() if _strs(s) else None


@builtin("substring before", "string", "match")
def substring_before(s: Any, m: Any) -> Any:
    if not _strs(s, m):
        return None
    i = s.find(m)
    return "" if i < 0 else s[:i]


@builtin("substring after", "string", "match")
def substring_after(s: Any, m: Any) -> Any:
    if not _strs(s, m):
        return None
    i = s.find(m)
    return "" if i < 0 else s[i + len(m) :]


@builtin("contains", "string", "match")
def contains(s: Any, m: Any) -> Any:
    return m in s if _strs(s, m) else None


@builtin("starts with", "string", "match")
def starts_with(s: Any, m: Any) -> Any:
    return s.startswith(m) if _strs(s, m) else None


@builtin("ends with", "string", "match")
def ends_with(s: Any, m: Any) -> Any:
    return s.endswith(m) if _strs(s, m) else None


@builtin("trim", "string")
def trim(s: Any) -> Any:
    return s.strip() if _strs(s) else None


@builtin("string join", "list", "delimiter?")
@builtin("string join", "list", "delimiter", "prefix", "suffix")
def string_join(items: Any, delimiter: Any = None, prefix: Any = None, suffix: Any = None) -> Any:
    if isinstance(items, str):
        items = [items]
    if not isinstance(items, list) or not all(v is None or isinstance(v, str) for v in items):
        return None
    if any(v is not None and not isinstance(v, str) for v in (delimiter, prefix, suffix)):
        return None
    kept = [v for v in items if v is not None]
    limits.check_string(
        sum(len(v) for v in kept) + len(delimiter or "") * len(kept) + len(prefix or "")
    )
    body = (delimiter or "").join(kept)
    return (prefix or "") + body + (suffix or "")


# --- numbers ---------------------------------------------------------------


def _num(*values: Any) -> bool:
    return all(isinstance(v, Decimal) for v in values)


def _rounded(n: Any, scale: Any, mode: str) -> Any:
    if not _num(n) or not _is_int(scale) or not -6111 <= scale <= 6176:
        return None
    scale = int(scale)
    exponent = n.as_tuple().exponent
    if isinstance(exponent, int) and -exponent <= scale:
        return n
    return n.quantize(Decimal(1).scaleb(-int(scale)), rounding=mode, context=DECIMAL)


@builtin("decimal", "n", "scale")
def decimal_(n: Any, scale: Any) -> Any:
    return _rounded(n, scale, ROUND_HALF_EVEN)


@builtin("floor", "n", "scale?")
def floor(n: Any, scale: Any = Decimal(0)) -> Any:
    return _rounded(n, scale, ROUND_FLOOR)


@builtin("ceiling", "n", "scale?")
def ceiling(n: Any, scale: Any = Decimal(0)) -> Any:
    return _rounded(n, scale, ROUND_CEILING)


@builtin("round up", "n", "scale?")
def round_up(n: Any, scale: Any = Decimal(0)) -> Any:
    return _rounded(n, scale, ROUND_UP)


@builtin("round down", "n", "scale?")
def round_down(n: Any, scale: Any = Decimal(0)) -> Any:
    return _rounded(n, scale, ROUND_DOWN)


@builtin("round half up", "n", "scale?")
def round_half_up(n: Any, scale: Any = Decimal(0)) -> Any:
    return _rounded(n, scale, ROUND_HALF_UP)


@builtin("round half down", "n", "scale?")
def round_half_down(n: Any, scale: Any = Decimal(0)) -> Any:
    return _rounded(n, scale, ROUND_HALF_DOWN)


@builtin("abs", "n")
def abs_(n: Any) -> Any:
    if isinstance(n, (Decimal, timedelta)):
        return abs(n)
    if isinstance(n, YearsMonthsDuration):
        return YearsMonthsDuration(abs(n.months))
    return None


@builtin("modulo", "dividend", "divisor")
def modulo(a: Any, b: Any) -> Any:
    if not _num(a, b) or b == 0:
        return None
    quotient = DECIMAL.divide(a, b).to_integral_value(rounding=ROUND_FLOOR)
    return DECIMAL.subtract(a, DECIMAL.multiply(b, quotient))


@builtin("sqrt", "number")
def sqrt(n: Any) -> Any:
    return DECIMAL.sqrt(n) if _num(n) and n >= 0 else None


@builtin("log", "number")
def log(n: Any) -> Any:
    return DECIMAL.ln(n) if _num(n) and n > 0 else None


@builtin("exp", "number")
def exp(n: Any) -> Any:
    return DECIMAL.exp(n) if _num(n) else None


@builtin("odd", "number")
def odd(n: Any) -> Any:
    return int(n) % 2 == 1 if _is_int(n) and n == n.to_integral_value() else None


@builtin("even", "number")
def even(n: Any) -> Any:
    return int(n) % 2 == 0 if _is_int(n) and n == n.to_integral_value() else None


# --- booleans and contexts -------------------------------------------------


@builtin("not", "negand")
def not_(b: Any) -> Any:
    return (not b) if isinstance(b, bool) else None


@builtin("is", "value1", "value2")
def is_(a: Any, b: Any) -> Any:
    if type(a) is not type(b):
        return False
    if isinstance(a, (datetime, time)):
        return a == b and a.tzinfo == b.tzinfo
    return ops.equal(a, b) is True


@builtin("is defined", "value")
def is_defined(value: Any) -> Any:
    return value is not None


@builtin("get value", "m", "key")
@builtin("get value", "context", "key")
@builtin("get value", "context", "keys")
def get_value(m: Any, key: Any) -> Any:
    if not isinstance(m, dict):
        return None
    if isinstance(key, list):
        if not key:
            return None
        for k in key:
            if not isinstance(m, dict) or not isinstance(k, str):
                return None
            m = m.get(k)
        return m
    return m.get(key) if isinstance(key, str) else None


@builtin("get entries", "m")
@builtin("get entries", "context")
def get_entries(m: Any) -> Any:
    if not isinstance(m, dict):
        return None
    return [{"key": k, "value": v} for k, v in m.items()]


@builtin("context", "entries")
def context(entries: Any) -> Any:
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list):
        return None
    result: dict[str, Any] = {}
    for e in entries:
        if not isinstance(e, dict) or "key" not in e or "value" not in e:
            return None
        if not isinstance(e["key"], str) or e["key"] in result:
            return None
        result[e["key"]] = e["value"]
    return result


@builtin("context put", "context", "keys", "value")
def context_put(ctx: Any, key: Any, value: Any) -> Any:
    if not isinstance(ctx, dict):
        return None
    if isinstance(key, list):
        if not key or not all(isinstance(k, str) for k in key):
            return None
        if len(key) == 1:
            return context_put(ctx, key[0], value)
        inner = ctx.get(key[0])
        if inner is not None and not isinstance(inner, dict):
            return None  # the DMN TCK's answer (feel-scala would replace the value)
        nested = context_put(inner or {}, key[1:], value)
        return None if nested is None else {**ctx, key[0]: nested}
    if not isinstance(key, str):
        return None
    return {**ctx, key: value}


@builtin("context put", "context", "key", "value")
def context_put_key(ctx: Any, key: Any, value: Any) -> Any:
    """The named form with ``key``: one key (a path of keys is named ``keys``)."""
    return context_put(ctx, key, value) if isinstance(key, str) else None


@builtin("context merge", "contexts")
def context_merge(contexts: Any) -> Any:
    if isinstance(contexts, dict):
        contexts = [contexts]
    if not isinstance(contexts, list) or not all(isinstance(c, dict) for c in contexts):
        return None
    result: dict[str, Any] = {}
    for c in contexts:
        result.update(c)
    return result

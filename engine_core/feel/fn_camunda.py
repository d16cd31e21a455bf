"""Camunda's extension built-ins, as feel-scala (the FEEL engine of Camunda 8) defines them.

Models written for Camunda 8 call these beside the DMN ones: ``assert``, ``is blank``,
``put`` / ``put all`` (aliases of ``context put`` / ``context merge``), ``get or else``,
``to json`` / ``from json``, ``to base64`` / ``from base64``, ``uuid``, ``decimal`` with
a rounding mode, ``overlaps before`` / ``overlaps after``, and Camunda 8.8's ``fromAi``
(an AI agent tool's parameter: its value). Where feel-scala fails rather
than answering null (``assert`` of a false condition), so do we: an ``ExpressionError``,
which the engine turns into an incident.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import date, datetime, time, timedelta, timezone
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

from dormant.engine_core.errors import ExpressionError
from dormant.engine_core.feel import limits, ops
from dormant.engine_core.feel.builtins import builtin
from dormant.engine_core.feel.far import FarMoment
from dormant.engine_core.feel.fn_scalars import _rounded, context_merge, context_put, to_string
from dormant.engine_core.feel.temporal import YearsMonthsDuration
from dormant.engine_core.feel.values import DECIMAL, FeelFunction, Range, to_feel

__all__: list[str] = []

_MODES = {
    "UP": ROUND_UP,
    "DOWN": ROUND_DOWN,
    "CEILING": ROUND_CEILING,
    "FLOOR": ROUND_FLOOR,
    "HALF_UP": ROUND_HALF_UP,
    "HALF_DOWN": ROUND_HALF_DOWN,
    "HALF_EVEN": ROUND_HALF_EVEN,
}


@builtin("decimal", "n", "scale", "mode")
def decimal_mode(n: Any, scale: Any, mode: Any) -> Any:
    """``decimal(n, scale, "HALF_UP")``: Java's rounding modes; ``UNNECESSARY`` only when
    no rounding is needed (else null, as feel-scala answers)."""
    if not isinstance(mode, str):
        return None
    mode = mode.upper()
    if mode == "UNNECESSARY":
        result = _rounded(n, scale, ROUND_DOWN)
        return result if result is not None and result == n else None
    rounding = _MODES.get(mode)
    return None if rounding is None else _rounded(n, scale, rounding)


@builtin("assert", "value", "condition", "cause?")
def assert_(value: Any, condition: Any, cause: Any = None) -> Any:
    if condition is True:
        return value
    reason = cause if isinstance(cause, str) else "The condition is not fulfilled"
    raise ExpressionError(f"Assertion failure: {reason}")


@builtin("is blank", "string")
def is_blank(s: Any) -> Any:
    return s.strip() == "" if isinstance(s, str) else None


@builtin("get or else", "value", "default")
def get_or_else(value: Any, default: Any) -> Any:
    return default if value is None else value


@builtin("fromAi", "value", "description?", "type?", "schema?", "options?")
def from_ai(
    value: Any, description: Any = None, type: Any = None, schema: Any = None, options: Any = None
) -> Any:
    """Camunda 8.8's marker for a tool's parameter in an AI agent's ad-hoc sub-process:
    at run time the value itself (the agent's job put it in ``toolCall``); the other
    arguments describe it to the model and are not read here."""
    return value


builtin("put", "context", "key", "value")(context_put)
builtin("put", "context", "keys", "value")(context_put)


@builtin("context merge", "contexts", variadic=True)
def context_merge_all(*contexts: Any) -> Any:
    """``context merge([a, b])`` and ``context merge(a, b, c)``: later entries win."""
    if not contexts:
        return None
    if len(contexts) == 1:
        return context_merge(contexts[0])
    return context_merge(list(contexts))


builtin("put all", "contexts", variadic=True)(context_merge_all)


@builtin("to base64", "value")
def to_base64(value: Any) -> Any:
    if not isinstance(value, str):
        return None
    return base64.b64encode(value.encode("utf-8")).decode("ascii")


@builtin("from base64", "value")
def from_base64(value: Any) -> Any:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value.encode("ascii"), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        return None


def _json_value(value: Any) -> Any:
    """A FEEL value in JSON's terms, as feel-scala writes it (temporals as their text)."""
    limits.charge()
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else value
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, FeelFunction):
        return f"function({', '.join(value.params)})"
    if isinstance(value, datetime) and getattr(value.tzinfo, "key", None):
        # java.time's zoned form, as feel-scala writes it: offset, then [zone id]
        text = to_string(value.astimezone(timezone(value.utcoffset() or timedelta(0))))
        return f"{text}[{value.tzinfo.key}]"  # type: ignore[union-attr]
    if isinstance(value, (date, datetime, time, timedelta, YearsMonthsDuration, FarMoment, Range)):
        return to_string(value)
    return None


def _dump(value: Any) -> str:
    # Decimals with a fraction are written by their own text, not through float.
    if isinstance(value, Decimal):
        return format(value.normalize(DECIMAL), "f")
    if isinstance(value, list):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_dump(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def _check_written(value: Any) -> None:
    """Hold ``to json``'s text to the string bound BEFORE writing it: a list of 5,000
    references to one 1 MB string is cheap to build and 5 GB written out. Each value is
    a step; each string's length counts toward the text as it grows."""
    size = 0
    stack = [value]
    while stack:
        item = stack.pop()
        limits.charge()
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, list):
            stack.extend(item)
            size += len(item) + 2
        elif isinstance(item, dict):
            for key, inner in item.items():
                size += len(str(key)) + 4
                stack.append(inner)
        else:
            size += 8
        limits.check_string(size)


@builtin("to json", "value")
def to_json_text(value: Any) -> Any:
    _check_written(value)
    text = _dump(_json_value(value))
    limits.check_string(len(text))
    return text


@builtin("from json", "value")
def from_json_text(value: Any) -> Any:
    if not isinstance(value, str):
        return None
    try:
        parsed = json.loads(value, parse_float=Decimal, parse_int=Decimal)
    except ValueError:
        return None  # not JSON: null, as any invalid call (nested too deep is a bound)
    return to_feel(parsed)


@builtin("uuid")
def uuid_() -> Any:
    """``uuid()`` as a call is answered in the compiler from the evaluation's id source
    (``evaluate(..., ids=...)``, or ``id_source``: in a model, the engine's name-based
    ids, ``feel.ids``), like ``now()`` from its clock; this entry only makes the name
    known, and is null when passed around as a function value."""
    return None


@builtin("overlaps before", "range1", "range2")
def overlaps_before(a: Any, b: Any) -> Any:
    """``a`` starts before ``b`` and they overlap, ``a`` ending inside ``b``."""
    if not isinstance(a, Range) or not isinstance(b, Range):
        return None
    starts_first = _lt(a.start, b.start) or (
        _eq(a.start, b.start) and a.start_included and not b.start_included
    )
    ends_inside = (
        _lt(b.start, a.end) or (_eq(b.start, a.end) and a.end_included and b.start_included)
    ) and (_lt(a.end, b.end) or (_eq(a.end, b.end) and (not a.end_included or b.end_included)))
    return bool(starts_first and ends_inside)


@builtin("overlaps after", "range1", "range2")
def overlaps_after(a: Any, b: Any) -> Any:
    return overlaps_before(b, a)


def _lt(a: Any, b: Any) -> bool:
    r = ops.less(a, b)
    if r is None:
        raise ValueError("not comparable")
    return r


def _eq(a: Any, b: Any) -> bool:
    return ops.equal(a, b) is True

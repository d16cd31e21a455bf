"""Built-ins over lists and ranges.

Aggregates (``sum``, ``min``, ...) take either one list or the items as arguments,
as the spec allows (``max(1, 2)`` and ``max([1, 2])``); that is the ``variadic`` flag.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from dormant.engine_core.feel import limits, ops
from dormant.engine_core.feel.builtins import builtin
from dormant.engine_core.feel.scope import invoke
from dormant.engine_core.feel.values import DECIMAL, FeelFunction, Range

__all__: list[str] = []


def _items(args: tuple[Any, ...]) -> list[Any] | None:
    if len(args) == 1 and isinstance(args[0], list):
        return list(args[0])
    if len(args) == 1 and args[0] is None:
        return None
    return list(args) if args else None


def _numbers(args: tuple[Any, ...]) -> list[Decimal] | None:
    items = _items(args)
    if items is None or not all(isinstance(v, Decimal) and not isinstance(v, bool) for v in items):
        return None
    return items


@builtin("list contains", "list", "element")
def list_contains(xs: Any, x: Any) -> Any:
    if not isinstance(xs, list):
        return None
    return any(ops.equal(v, x) is True for v in xs)


@builtin("count", "list", variadic=True)
def count(*args: Any) -> Any:
    items = _items(args)
    return None if items is None else Decimal(len(items))


def _extreme(args: tuple[Any, ...], want_max: bool) -> Any:
    items = _items(args)
    if not items:
        return None
    best = items[0]
    for v in items[1:]:
        lt = ops.less(best, v) if want_max else ops.less(v, best)
        if lt is None:
            return None
        if lt:
            best = v
    return best


@builtin("min", "list", variadic=True)
def min_(*args: Any) -> Any:
    return _extreme(args, False)


@builtin("max", "list", variadic=True)
def max_(*args: Any) -> Any:
    return _extreme(args, True)


@builtin("sum", "list", variadic=True)
def sum_(*args: Any) -> Any:
    items = _numbers(args)
    if not items:
        return None
    total = Decimal(0)
    for v in items:
        total = DECIMAL.add(total, v)
    return total


@builtin("product", "list", variadic=True)
def product(*args: Any) -> Any:
    items = _numbers(args)
    if not items:
        return None
    total = Decimal(1)
    for v in items:
        total = DECIMAL.multiply(total, v)
    return total


@builtin("mean", "list", variadic=True)
def mean(*args: Any) -> Any:
    items = _numbers(args)
    if not items:
        return None
    return DECIMAL.divide(sum_(items), Decimal(len(items)))


@builtin("median", "list", variadic=True)
def median(*args: Any) -> Any:
    items = _numbers(args)
    if not items:
        return None
    s = sorted(items)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else DECIMAL.divide(DECIMAL.add(s[mid - 1], s[mid]), Decimal(2))


@builtin("stddev", "list", variadic=True)
def stddev(*args: Any) -> Any:
    items = _numbers(args)
    if not items or len(items) < 2:
        return None
    m = mean(items)
    var = Decimal(0)
    for v in items:
        var = DECIMAL.add(var, DECIMAL.power(DECIMAL.subtract(v, m), 2))
    return DECIMAL.sqrt(DECIMAL.divide(var, Decimal(len(items) - 1)))


@builtin("mode", "list", variadic=True)
def mode(*args: Any) -> Any:
    items = _numbers(args)
    if items is None:
        return None
    counts: dict[Decimal, int] = {}
    for v in items:
        counts[v] = counts.get(v, 0) + 1
    top = max(counts.values(), default=0)
    return sorted(v for v, c in counts.items() if c == top)


@builtin("all", "list", variadic=True)
def all_(*args: Any) -> Any:
    items = _items(args)
    if items is None or not all(v is None or isinstance(v, bool) for v in items):
        return None
    if False in items:
        return False
    return None if None in items else True


builtin("and", "list", variadic=True)(all_)


@builtin("any", "list", variadic=True)
def any_(*args: Any) -> Any:
    items = _items(args)
    if items is None or not all(v is None or isinstance(v, bool) for v in items):
        return None
    if True in items:
        return True
    return None if None in items else False


builtin("or", "list", variadic=True)(any_)


def _position(xs: list[Any], pos: Any, extra: int = 0) -> int | None:
    if not isinstance(pos, Decimal) or not pos.is_finite() or int(pos) == 0:
        return None
    i = int(pos)
    if abs(i) > len(xs) + extra:
        return None
    return i - 1 if i > 0 else len(xs) + i


@builtin("sublist", "list", "start position", "length?")
def sublist(xs: Any, start: Any, length: Any = None) -> Any:
    if not isinstance(xs, list):
        return None
    i = _position(xs, start)
    if i is None:
        return None
    if length is None:
        return xs[i:]
    if not isinstance(length, Decimal) or length < 0 or i + int(length) > len(xs):
        return None
    return xs[i : i + int(length)]


@builtin("append", "list", "item", variadic=True)
def append(xs: Any, *items: Any) -> Any:
    if not isinstance(xs, list):
        return None
    limits.check_collection(len(xs) + len(items))
    return [*xs, *items]


@builtin("concatenate", "lists", variadic=True)
def concatenate(*lists: Any) -> Any:
    if not all(isinstance(x, list) for x in lists):
        return None
    limits.check_collection(sum(len(x) for x in lists))
    return [v for x in lists for v in x]


@builtin("insert before", "list", "position", "newItem")
def insert_before(xs: Any, pos: Any, item: Any) -> Any:
    if not isinstance(xs, list):
        return None
    i = _position(xs, pos)
    return None if i is None else [*xs[:i], item, *xs[i:]]


@builtin("remove", "list", "position")
def remove(xs: Any, pos: Any) -> Any:
    if not isinstance(xs, list):
        return None
    i = _position(xs, pos)
    return None if i is None else [*xs[:i], *xs[i + 1 :]]


@builtin("list replace", "list", "position", "newItem")
def list_replace(xs: Any, pos: Any, item: Any) -> Any:
    if xs is not None and not isinstance(xs, list):
        xs = [xs]
    if not isinstance(xs, list):
        return None
    if isinstance(pos, FeelFunction):
        return [item if invoke(pos, [v, item]) is True else v for v in xs]
    i = _position(xs, pos)
    return None if i is None else [*xs[:i], item, *xs[i + 1 :]]


@builtin("reverse", "list")
def reverse(xs: Any) -> Any:
    return xs[::-1] if isinstance(xs, list) else None


@builtin("index of", "list", "match")
def index_of(xs: Any, x: Any) -> Any:
    if not isinstance(xs, list):
        return None
    return [Decimal(i + 1) for i, v in enumerate(xs) if ops.equal(v, x) is True]


def _distinct(items: list[Any]) -> list[Any]:
    """The first of each FEEL-equal group, in order: by hash where a value has an
    equality key (all but ranges, functions, far dates), by comparison among the rest."""
    seen: set[Any] = set()
    others: list[Any] = []
    result: list[Any] = []
    for v in items:
        key = ops.equality_key(v)
        if key is None:
            # pairwise among the values without a key: quadratic, so each pass is paid for
            limits.charge(len(others))
            if any(ops.equal(v, o) is True for o in others):
                continue
            others.append(v)
        elif key in seen:
            continue
        else:
            seen.add(key)
        result.append(v)
    return result


@builtin("union", "lists", variadic=True)
def union(*lists: Any) -> Any:
    if not all(isinstance(x, list) for x in lists):
        return None
    return _distinct([v for x in lists for v in x])


@builtin("distinct values", "list")
def distinct_values(xs: Any) -> Any:
    return _distinct(xs) if isinstance(xs, list) else None


@builtin("duplicate values", "list")
def duplicate_values(xs: Any) -> Any:
    """Each value that occurs more than once, once, in the order of its first occurrence."""
    if not isinstance(xs, list):
        return None
    counts: dict[Any, int] = {}
    others: list[list[Any]] = []  # [value, count] for values without an equality key
    keys = []
    for v in xs:
        key = ops.equality_key(v)
        keys.append(key)
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
            continue
        limits.charge(len(others))  # pairwise, as in ``_distinct``
        for entry in others:
            if ops.equal(v, entry[0]) is True:
                entry[1] += 1
                break
        else:
            others.append([v, 1])
    result: list[Any] = []
    for v, key in zip(xs, keys, strict=True):
        if key is not None:
            if counts.get(key, 0) > 1:
                result.append(v)
                counts[key] = 0  # emitted once
        else:
            limits.charge(len(others))
            for entry in others:
                if entry[1] > 1 and ops.equal(v, entry[0]) is True:
                    result.append(v)
                    entry[1] = 0
                    break
    return result


@builtin("flatten", "list")
def flatten(xs: Any) -> Any:
    """Depth first, by an explicit stack: deep nesting costs no recursion, and the result
    is held to the collection bound while it grows (a list may hold one list many times)."""
    if not isinstance(xs, list):
        return None
    out: list[Any] = []
    stack: list[Iterator[Any]] = [iter(xs)]
    while stack:
        for v in stack[-1]:
            limits.charge()
            if isinstance(v, list):
                stack.append(iter(v))
                break
            out.append(v)
            limits.check_collection(len(out))
        else:
            stack.pop()
    return out


@builtin("is empty", "list")
def is_empty(xs: Any) -> Any:
    return len(xs) == 0 if isinstance(xs, list) else None


@builtin("partition", "list", "size")
def partition(xs: Any, size: Any) -> Any:
    if not isinstance(xs, list) or not isinstance(size, Decimal) or size < 1:
        return None
    n = int(size)
    return [xs[i : i + n] for i in range(0, len(xs), n)]


@builtin("sort", "list", "precedes?")
def sort(xs: Any, precedes: Any = None) -> Any:
    if not isinstance(xs, list):
        return None

    def cmp(a: Any, b: Any) -> int:
        limits.charge()  # n log n comparisons: more than the one pass ``invoke`` charged
        if precedes is None:
            lt = ops.less(a, b)
        else:
            lt = invoke(precedes, [a, b])
        if lt is None:
            raise ValueError("not comparable")
        return -1 if lt else 1

    if precedes is not None and not isinstance(precedes, FeelFunction):
        return None
    return sorted(xs, key=functools.cmp_to_key(cmp))


# --- ranges (DMN 1.4 §10.3.4.10): a point is a degenerate closed range ---------------


def _as_range(v: Any) -> Range:
    return v if isinstance(v, Range) else Range(v, v, True, True)


def _lt(a: Any, b: Any, strict: bool) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        raise ValueError("a string is not a point")  # feel-scala: before("a", "b") is null
    r = ops.compare("<" if strict else "<=", a, b)
    if r is None:
        raise ValueError("not comparable")
    return r


@builtin("before", "point1", "point2")
@builtin("before", "point", "range")
@builtin("before", "range", "point")
@builtin("before", "range1", "range2")
def before(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    x, y = _as_range(a), _as_range(b)
    return _lt(x.end, y.start, x.end_included and y.start_included)


@builtin("after", "point1", "point2")
@builtin("after", "point", "range")
@builtin("after", "range", "point")
@builtin("after", "range1", "range2")
def after(a: Any, b: Any) -> Any:
    return before(b, a)


@builtin("meets", "range1", "range2")
def meets(a: Any, b: Any) -> Any:
    if not isinstance(a, Range) or not isinstance(b, Range):
        return None
    return a.end_included and b.start_included and ops.equal(a.end, b.start) is True


@builtin("met by", "range1", "range2")
def met_by(a: Any, b: Any) -> Any:
    return meets(b, a)


@builtin("overlaps", "range1", "range2")
def overlaps(a: Any, b: Any) -> Any:
    if not isinstance(a, Range) or not isinstance(b, Range):
        return None
    return not (before(a, b) or before(b, a))


@builtin("includes", "range", "point")
@builtin("includes", "range1", "range2")
def includes(a: Any, b: Any) -> Any:
    if not isinstance(a, Range) or b is None:
        return None
    if not isinstance(b, Range):
        return ops.in_range(b, a)
    starts_ok = _lt(a.start, b.start, not a.start_included and b.start_included)
    ends_ok = _lt(b.end, a.end, b.end_included and not a.end_included)
    return starts_ok and ends_ok


@builtin("during", "point", "range")
@builtin("during", "range1", "range2")
def during(a: Any, b: Any) -> Any:
    return includes(b, a)


@builtin("starts", "point", "range")
@builtin("starts", "range1", "range2")
def starts(a: Any, b: Any) -> Any:
    if not isinstance(b, Range) or a is None:
        return None
    if not isinstance(a, Range):
        return b.start_included and ops.equal(a, b.start) is True
    return (
        a.start_included == b.start_included
        and ops.equal(a.start, b.start) is True
        and _ends_within(a, b)
    )


def _ends_within(a: Range, b: Range) -> bool:
    """``a`` ends no later than ``b`` (DMN 1.4 ``starts``: an equal open end counts)."""
    if ops.equal(a.end, b.end) is True:
        return not a.end_included or b.end_included
    return _lt(a.end, b.end, True)


@builtin("started by", "range", "point")
@builtin("started by", "range1", "range2")
def started_by(a: Any, b: Any) -> Any:
    return starts(b, a)


@builtin("finishes", "point", "range")
@builtin("finishes", "range1", "range2")
def finishes(a: Any, b: Any) -> Any:
    if not isinstance(b, Range) or a is None:
        return None
    if not isinstance(a, Range):
        return b.end_included and ops.equal(a, b.end) is True
    return (
        a.end_included == b.end_included
        and ops.equal(a.end, b.end) is True
        and ops.in_range(a.start, b) is True
    )


@builtin("finished by", "range", "point")
@builtin("finished by", "range1", "range2")
def finished_by(a: Any, b: Any) -> Any:
    return finishes(b, a)


@builtin("coincides", "point1", "point2")
@builtin("coincides", "range1", "range2")
def coincides(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    return ops.equal(a, b)

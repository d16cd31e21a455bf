"""Name scopes and function invocation, shared by the evaluator and the built-ins."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import datetime
from typing import Any

from dormant.engine_core.feel import limits
from dormant.engine_core.feel.values import FeelFunction, to_feel

__all__ = [
    "INVALID_CALL",
    "MISSING",
    "Scope",
    "id_source",
    "invoke",
    "invoke_overloads",
    "reset_id_source",
    "set_id_source",
]

MISSING: Any = object()

# Where ``uuid()`` takes its ids when the caller passes none: the engine sets it for the
# length of one trigger (deterministic ids from the instance; the core makes no random).
_IDS: ContextVar[Callable[[], str] | None] = ContextVar("feel_ids", default=None)


def set_id_source(ids: Callable[[], str]) -> Token[Callable[[], str] | None]:
    """From now on ``uuid()`` answers from ``ids`` (unless an evaluation passes its own);
    hand the token back to ``reset_id_source``."""
    return _IDS.set(ids)


def reset_id_source(token: Token[Callable[[], str] | None]) -> None:
    _IDS.reset(token)


@contextmanager
def id_source(ids: Callable[[], str]) -> Iterator[None]:
    """``uuid()`` answers from ``ids`` inside this block."""
    token = set_id_source(ids)
    try:
        yield
    finally:
        reset_id_source(token)


class Scope:
    """One level of names. The root wraps the caller's variables and converts them lazily.

    Converting on lookup (not up front) keeps an evaluation's cost proportional to the
    names the expression reads, not to the size of the process's variables.
    """

    __slots__ = ("_converted", "convert", "ids", "now", "parent", "vars")

    def __init__(
        self,
        variables: Mapping[str, Any],
        parent: Scope | None = None,
        now: datetime | None = None,
        convert: bool = False,
        ids: Callable[[], str] | None = None,
    ) -> None:
        self.vars = variables
        self.parent = parent
        self.now: datetime | None = parent.now if parent is not None else now
        self.ids: Callable[[], str] | None = (
            parent.ids if parent is not None else ids if ids is not None else _IDS.get()
        )
        self.convert = convert
        self._converted: dict[str, Any] | None = {} if convert else None

    def lookup(self, name: str) -> Any:
        scope: Scope | None = self
        while scope is not None:
            value = scope.vars.get(name, MISSING)
            if value is not MISSING:
                if scope._converted is None:
                    return value
                # Converted once per evaluation: a loop reading a large variable must not
                # pay its conversion on every iteration.
                done = scope._converted.get(name, MISSING)
                if done is MISSING:
                    done = scope._converted[name] = to_feel(value)
                return done
            scope = scope.parent
        return MISSING

    def child(self, variables: Mapping[str, Any]) -> Scope:
        return Scope(variables, self)


# What a built-in raises for arguments it cannot use (a wrong type, a value out of its
# domain, a missing key): FEEL's answer to those is null.
INVALID_CALL: tuple[type[Exception], ...] = (
    TypeError,
    ValueError,
    ArithmeticError,
    LookupError,
    AttributeError,
)


def invoke(fn: FeelFunction, args: Sequence[Any] | Mapping[str, Any]) -> Any:
    """Call ``fn``; a wrong argument count or any failure inside is FEEL null, not an error.

    Every call is charged to the evaluation's budget with the size of its list and string
    arguments (a built-in walks them), and its result is held to the size bounds.
    """
    if isinstance(args, Mapping):
        positional: list[Any] = []
        names = list(fn.params)
        for key in args:
            if key not in names:
                return None
        last = max((names.index(k) for k in args), default=-1)
        for i in range(last + 1):
            positional.append(args.get(names[i]))
        if fn.variadic and len(positional) == 1 and isinstance(positional[0], list):
            positional = list(positional[0])
        args = positional
    if not fn.variadic and (len(args) > len(fn.params) or len(args) < fn.min_args()):
        return None
    limits.charge(1 + sum(len(a) for a in args if isinstance(a, (list, str, dict))))
    try:
        result = fn.call(*args)
    except OverflowError:
        raise  # past the calendar: classified where the evaluation ends (api._bounded)
    except INVALID_CALL:
        # FEEL has no run-time exceptions: an invalid call is null. Only these: anything
        # else (a bound, the worker's soft time limit, a refusal such as a regex the
        # engine cannot run) must stop the evaluation -- as a null, an instance would go
        # on with a wrong value (issue 24, row 6).
        return None
    if isinstance(result, str):
        limits.check_string(len(result))
    elif isinstance(result, list):
        limits.check_collection(len(result))
    return result


def invoke_overloads(
    overloads: Sequence[FeelFunction], args: Sequence[Any] | Mapping[str, Any]
) -> Any:
    """Pick the built-in signature that fits the arguments (by count, or by names).

    A null result from a singleton list argument is retried with the list's item, the
    DMN conversion "from singleton list" (``upper case(xs[item = "b"])``).
    """
    result = _invoke_overloads(overloads, args)
    if result is None:
        values = args.values() if isinstance(args, Mapping) else args
        if any(isinstance(v, list) and len(v) == 1 for v in values):
            if isinstance(args, Mapping):
                return _invoke_overloads(overloads, {k: _unwrap(v) for k, v in args.items()})
            return _invoke_overloads(overloads, [_unwrap(v) for v in args])
    return result


def _unwrap(value: Any) -> Any:
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _invoke_overloads(
    overloads: Sequence[FeelFunction], args: Sequence[Any] | Mapping[str, Any]
) -> Any:
    if isinstance(args, Mapping):
        # Named arguments in a signature's own order pick it first: ``before(point: 1,
        # range: r)`` and ``before(range: r, point: 1)`` share their names.
        order = list(args)
        for fn in overloads:
            if list(fn.params[: len(order)]) == order and len(order) >= fn.min_args():
                return invoke(fn, args)
    for fn in overloads:
        if isinstance(args, Mapping):
            if all(k in fn.params for k in args) and all(
                p in args for p in fn.params[: fn.min_args()]
            ):
                return invoke(fn, args)
        elif fn.variadic or fn.min_args() <= len(args) <= len(fn.params):
            return invoke(fn, args)
    return None

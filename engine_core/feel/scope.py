"""Name scopes and function invocation, shared by the evaluator and the built-ins."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from engine_core.feel.values import FeelFunction, to_feel

__all__ = ["MISSING", "Scope", "invoke", "invoke_overloads"]

MISSING: Any = object()


class Scope:
    """One level of names. The root wraps the caller's variables and converts them lazily.

    Converting on lookup (not up front) keeps an evaluation's cost proportional to the
    names the expression reads, not to the size of the process's variables.
    """

    __slots__ = ("convert", "now", "parent", "vars")

    def __init__(
        self,
        variables: Mapping[str, Any],
        parent: Scope | None = None,
        now: datetime | None = None,
        convert: bool = False,
    ) -> None:
        self.vars = variables
        self.parent = parent
        self.now: datetime | None = parent.now if parent is not None else now
        self.convert = convert

    def lookup(self, name: str) -> Any:
        scope: Scope | None = self
        while scope is not None:
            value = scope.vars.get(name, MISSING)
            if value is not MISSING:
                return to_feel(value) if scope.convert else value
            scope = scope.parent
        return MISSING

    def child(self, variables: Mapping[str, Any]) -> Scope:
        return Scope(variables, self)


def invoke(fn: FeelFunction, args: Sequence[Any] | Mapping[str, Any]) -> Any:
    """Call ``fn``; a wrong argument count or any failure inside is FEEL null, not an error."""
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
    try:
        return fn.call(*args)
    except Exception:  # FEEL has no run-time exceptions: an invalid call is null.
        return None


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
    for fn in overloads:
        if isinstance(args, Mapping):
            if all(k in fn.params for k in args) and all(
                p in args for p in fn.params[: fn.min_args()]
            ):
                return invoke(fn, args)
        elif fn.variadic or fn.min_args() <= len(args) <= len(fn.params):
            return invoke(fn, args)
    return None

"""The entry points the engine calls: compile once, evaluate many times."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from lark import Tree

from dormant.engine_core.errors import ExpressionError, ExpressionLimitExceeded

# The fn_* modules are imported for what they do on import: each registers its
# functions in ``builtins.BUILTINS``, which the compiler reads when it compiles a call.
from dormant.engine_core.feel import (
    fn_camunda,  # noqa: F401
    fn_lists,  # noqa: F401
    fn_range,  # noqa: F401
    fn_regex,  # noqa: F401
    fn_scalars,  # noqa: F401
    fn_temporal,  # noqa: F401
    ops,
)
from dormant.engine_core.feel.compiler import Node, compile_tree
from dormant.engine_core.feel.far import FarMoment
from dormant.engine_core.feel.limits import DEFAULT_LIMITS, Budget, Limits, budget
from dormant.engine_core.feel.scope import MISSING, Scope
from dormant.engine_core.feel.syntax import (
    keyword_names,
    name_of,
    parse,
    quote_keyword_names,
    uses_input,
)
from dormant.engine_core.feel.temporal import (
    YearsMonthsDuration,
    format_date,
    format_datetime,
    format_duration,
    format_time,
    parse_duration_text,
)
from dormant.engine_core.feel.values import to_feel

__all__ = [
    "CompiledExpression",
    "compile_expression",
    "evaluate",
    "evaluate_unary_tests",
    "parse_duration",
    "to_json",
]


class CompiledExpression:
    """A parsed expression, ready to evaluate against any variables."""

    __slots__ = ("_constant", "_name", "_node", "text")

    def __init__(
        self, text: str, node: Node, constant: Any = MISSING, name: str | None = None
    ) -> None:
        self.text = text
        self._node = node
        # A literal string, boolean or null (``="PT1H"``, a timer's usual form) is its
        # value whatever the variables: no scope, no budget to set up.
        self._constant = constant
        # An expression that is one variable's name (``=approved``, a gateway's usual
        # condition): a scalar value is read straight from the variables (the steps a
        # lookup costs cannot reach a budget, nor a scalar a size bound).
        self._name = name

    def evaluate(
        self,
        context: Mapping[str, Any],
        *,
        now: datetime | None = None,
        limits: Limits | None = None,
        ids: Callable[[], str] | None = None,
    ) -> Any:
        """The value against ``context``, within ``limits`` (default: ``DEFAULT_LIMITS``);
        ``now()`` / ``today()`` answer from ``now`` and ``uuid()`` from ``ids`` (null
        without them: the core reads no clock and makes no random ids)."""
        if self._constant is not MISSING:
            return self._constant
        if self._name is not None:
            value = context.get(self._name, MISSING)
            if value is not MISSING and not isinstance(value, (list, dict, Mapping)):
                return to_feel(value)
        scope = Scope(context, now=now, convert=True, ids=ids)
        with budget(limits) as spent:
            return _bounded(self.text, lambda: _sized(self._node(scope), spent))

    def __repr__(self) -> str:
        return f"CompiledExpression({self.text!r})"


def _sized(result: Any, spent: Budget) -> Any:
    """``result``, its written-out size charged to the budget first.

    A list may hold one value many times (``for i in 1..100 return b``), so a result of a
    few hundred steps can stand for 10^8 values once stored as JSON; walking it here,
    each value one step and each string its length (``result_size``), stops such a
    result inside the evaluation, where it is the model's incident, instead of in the
    engine that writes it out.
    """
    stack = [result]
    chars = 0
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            spent.charge(len(value))
            items: Any = value
        elif isinstance(value, dict):
            spent.charge(len(value))
            items = value.values()
        else:
            continue
        for v in items:
            if isinstance(v, (list, dict)):
                stack.append(v)
            elif isinstance(v, str):
                # one big string referenced 90,000 times is 90,000 copies once written
                chars += len(v)
        spent.check_result_size(chars)
    return result


def _bounded(text: str, run: Callable[[], Any]) -> Any:
    """``run()``, with a bound it passes quoting ``text``; Python's own recursion limit (a
    path the budgets missed) and a calendar overflow are classified errors too, never a
    ``RecursionError`` or an ``OverflowError``."""
    try:
        return run()
    except ExpressionLimitExceeded as exc:
        raise exc.in_expression(text) from None
    except RecursionError:
        raise ExpressionLimitExceeded(
            "FEEL evaluation nested too deeply", text[:200], limit="nesting_depth"
        ) from None
    except OverflowError:
        # ``date + duration`` past year 9999, a duration past 999,999,999 days: Python's
        # calendar ends there, and the model's expression is what went past it.
        raise ExpressionError(
            "FEEL evaluation went out of range of dates and durations (past year 9999 or "
            "999,999,999 days)",
            text[:200],
        ) from None


@functools.lru_cache(maxsize=4096)
def compile_expression(expression: str, limits: Limits = DEFAULT_LIMITS) -> CompiledExpression:
    """Parse and compile ``expression``; raises ``ExpressionError`` on a syntax error, and
    ``ExpressionLimitExceeded`` past ``limits.expression_length`` or ``nesting_depth``."""
    tree = parse(expression, "start", limits)
    node = _bounded(expression, lambda: compile_tree(tree))
    return CompiledExpression(expression, node, _literal(tree, node), _bare_name(tree))


_LITERALS = frozenset({"string", "true", "false", "null"})


def _literal(tree: Any, node: Node) -> Any:
    """The value of an expression that is one string, boolean or null literal (an
    immutable value no variable can change), else ``MISSING``."""
    inner = tree.children[0] if isinstance(tree, Tree) and tree.data == "start" else None
    if isinstance(inner, Tree) and inner.data in _LITERALS:
        return node(Scope({}))
    return MISSING


def _bare_name(tree: Any) -> str | None:
    """The name an expression is, when it is nothing but one variable's name."""
    inner = tree.children[0] if isinstance(tree, Tree) and tree.data == "start" else None
    if isinstance(inner, Tree) and inner.data == "var":
        return name_of(inner.children[0])
    return None


def evaluate(
    expression: str,
    context: Mapping[str, Any],
    *,
    now: datetime | None = None,
    limits: Limits | None = None,
    ids: Callable[[], str] | None = None,
) -> Any:
    """Evaluate ``expression`` (no leading ``=``) against ``context``; null on run-time errors.

    Names in ``context`` that contain a keyword (``days in weekend``) are read as names here
    (``compile_expression`` alone cannot know them: write them in backticks there). Past a
    bound of ``limits`` (``engine_core.feel.limits``) it raises ``ExpressionLimitExceeded``.
    """
    odd = keyword_names(context)
    if odd:
        expression = quote_keyword_names(expression, odd)
    compiled = compile_expression(expression, limits or DEFAULT_LIMITS)
    return compiled.evaluate(context, now=now, limits=limits, ids=ids)


UnaryTests = Callable[[Any, Scope], "bool | None"]


@functools.lru_cache(maxsize=4096)
def _compile_tests(tests: str) -> UnaryTests:
    text = tests.strip()
    if text.startswith("not") and text[3:].lstrip().startswith("(") and text.endswith(")"):
        inner = _compile_tests(text[3:].lstrip()[1:-1])

        def negated(value: Any, scope: Scope) -> bool | None:
            r = inner(value, scope)
            return None if r is None else not r

        return negated
    tree = parse(tests, "unary_tests")
    if tree.data == "any_test":
        return lambda value, scope: True
    items: list[tuple[bool, Node]] = []
    for child in tree.children:
        direct = isinstance(child, Tree) and child.data != "cmp_test" and uses_input(child)
        items.append((direct, compile_tree(child)))

    def run(value: Any, scope: Scope) -> bool | None:
        inner = scope.child({"?": value})
        verdict: bool | None = False
        for direct, node in items:
            result = node(inner)
            if direct:
                r = result if isinstance(result, bool) else None  # `abs(?)` is no verdict
            elif isinstance(value, list) and isinstance(result, list):
                # a list input against a list: equal lists pass, as in feel-scala
                r = True if ops.equal(value, result) is True else ops.in_test(value, result)
            else:
                r = ops.in_test(value, result)
            if r is True:
                return True
            if r is None:
                verdict = None
        return verdict

    return run


def evaluate_unary_tests(
    tests: str, input_value: Any, context: Mapping[str, Any], *, limits: Limits | None = None
) -> bool | None:
    """Whether ``input_value`` passes DMN unary tests: ``< 10``, ``[1..5]``, ``"a","b"``, ``-``."""
    scope = Scope(context, convert=True)
    with budget(limits):
        compiled = _bounded(tests, lambda: _compile_tests(tests))
        return _bounded(tests, lambda: compiled(to_feel(input_value), scope))  # type: ignore[no-any-return]


def to_json(value: Any) -> Any:
    """A FEEL value as a JSON value, for storing as a process variable."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, Decimal):
        if value == value.to_integral_value():
            return int(value)
        return float(value)
    if isinstance(value, (int, float)):
        return value
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
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return None


def parse_duration(text: str) -> timedelta | YearsMonthsDuration:
    """An ISO 8601 duration (a timer's ``PT5M``, ``P1Y``); ``ExpressionError`` if malformed."""
    value = parse_duration_text(text.strip())
    if value is None:
        raise ExpressionError(
            f"not an ISO 8601 duration: {text!r} (expected e.g. 'PT5M', 'P1D')", expression=text
        )
    return value

"""FEEL, the expression language of DMN 1.4 and Camunda 8, evaluated purely.

``evaluate(expression, context, now=None)`` parses (once: ``compile_expression`` is
cached by text) and evaluates an expression written without Camunda's leading ``=``.
Nothing here reads a clock, the environment or a file: ``now()`` and ``today()`` answer
from the ``now`` argument, and are null without it.

Values, and what the engine can do with them:

=============================  ===============================================
FEEL                           Python
=============================  ===============================================
number                         ``decimal.Decimal`` (34 digits, half-even)
string, boolean, null          ``str``, ``bool``, ``None``
list, context                  ``list``, ``dict``
date / time / date and time    ``datetime.date`` / ``datetime.time`` / ``datetime.datetime``
days and time duration         ``datetime.timedelta`` (``moment + d`` works as is)
years and months duration      ``YearsMonthsDuration(months)`` (``d.add_to(moment)``)
range, function                ``Range``, ``FeelFunction`` (``to_json`` makes them null)
=============================  ===============================================

A run-time type error or invalid operation is null, never an exception. ``ExpressionError``
is raised for a syntax error (with the character ``position``), where feel-scala fails
rather than answering null (``assert``, a regex back-reference the linear-time engine
cannot run), for a date or duration past the calendar, and past a bound of
``limits.Limits`` (``ExpressionLimitExceeded``: steps, string length, list size, call and
nesting depth, result size; ``evaluate(..., limits=...)``). Anything else raised inside a
built-in (the worker's soft time limit) is never turned into null: it ends the evaluation.
``uuid()`` answers from the ``ids`` source the caller passes (or ``id_source``'s), as
``now()`` from ``now``.
Inputs may be JSON values: ints and floats are read as ``Decimal``; ``to_json`` turns
results back.
"""

from __future__ import annotations

from dormant.engine_core.feel.api import (
    CompiledExpression,
    compile_expression,
    evaluate,
    evaluate_unary_tests,
    parse_duration,
    to_json,
)
from dormant.engine_core.feel.limits import DEFAULT_LIMITS, Limits
from dormant.engine_core.feel.scope import id_source
from dormant.engine_core.feel.temporal import YearsMonthsDuration
from dormant.engine_core.feel.values import FeelFunction, Range

__all__ = [
    "DEFAULT_LIMITS",
    "CompiledExpression",
    "FeelFunction",
    "Limits",
    "Range",
    "YearsMonthsDuration",
    "compile_expression",
    "evaluate",
    "evaluate_unary_tests",
    "id_source",
    "parse_duration",
    "to_json",
]

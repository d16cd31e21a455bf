"""FEEL built-ins pay for their work, and a limit is never a quiet null (issue 24, row 6).

A built-in walks its arguments outside the evaluator's loops, so its work is charged to
the evaluation's budget by the built-in itself (``engine_core/feel/limits.py``):
``distinct values`` over ranges compares pairwise, ``sort`` compares n log n times. A
limit raised inside a built-in -- a bound, or the worker's soft time limit -- must stop
the evaluation: swallowed into null, the instance would go on with a wrong value
(``engine_core/feel/scope.py``, ``invoke``). A date or duration past what the calendar
holds is a classified ``ExpressionError``, never a bare ``OverflowError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from billiard.exceptions import SoftTimeLimitExceeded

from dormant.engine_core.builder import ProcessBuilder
from dormant.engine_core.errors import ExpressionError, ExpressionLimitExceeded
from dormant.engine_core.feel import evaluate
from dormant.engine_core.feel.builtins import BUILTINS, builtin
from dormant.engine_core.feel.limits import Limits
from tests.core.enginekit import Run


@pytest.mark.parametrize(
    ("builtin_call", "arguments", "steps"),
    [
        ("distinct values({})", ["for i in 1..600 return [i..i+1]"], 50_000),
        (
            "union({}, {})",
            ["for i in 1..300 return [i..i+1]", "for i in 1..300 return [i..i+2]"],
            50_000,
        ),
        ("duplicate values({})", ["for i in 1..600 return [i..i+1]"], 50_000),
        ("sort({})", ["for i in 1..20000 return modulo(i * 7919, 200003)"], 100_000),
    ],
)
def test_a_builtin_charges_its_items_to_the_step_budget(
    builtin_call: str, arguments: list[str], steps: int
) -> None:
    """The arguments fit in the budget; the built-in's own work over them does not. A
    budget scaled down from the default (1,000,000) keeps the proportions and the test
    quick: a built-in that charged nothing would answer within it."""
    limits = Limits(collection_size=300_000, steps=steps)
    for argument in arguments:
        assert evaluate(f"count({argument})", {}, limits=limits) > 0
    with pytest.raises(ExpressionLimitExceeded) as info:
        evaluate(builtin_call.format(*arguments), {}, limits=limits)
    assert info.value.limit == "steps", str(info.value)


def test_within_the_budget_the_same_builtins_answer() -> None:
    assert evaluate("count(distinct values(for i in 1..50 return [i..i+1]))", {}) == 50
    assert evaluate("sort([3, 1, 2])", {}) == [1, 2, 3]


@pytest.fixture
def raising_builtin() -> Iterator[list[BaseException]]:
    """A built-in that raises what the test puts in the list: the worker's soft time
    limit arrives as an exception inside whatever Python code runs at that moment.
    Compiled expressions are cached by text: each test calls it with its own argument."""
    raised: list[BaseException] = []

    @builtin("test raise", "x")
    def _raise(x: Any) -> Any:
        raise raised[0]

    try:
        yield raised
    finally:
        del BUILTINS["test raise"]


def test_a_time_limit_inside_a_builtin_is_never_a_null(
    raising_builtin: list[BaseException],
) -> None:
    raising_builtin.append(SoftTimeLimitExceeded())
    with pytest.raises(SoftTimeLimitExceeded):
        evaluate("test raise(2)", {})


def test_a_time_limit_inside_a_builtin_is_an_incident_not_a_completed_instance(
    raising_builtin: list[BaseException],
) -> None:
    raising_builtin.append(SoftTimeLimitExceeded())
    b = ProcessBuilder("p")
    b.start_event("s").script_task("calc", "=test raise(1)", result_variable="n").end_event("e")
    b.sequence("s", "calc", "e")
    run = Run(b.build())
    run.start()
    assert run.status == "active_incidents"
    assert run.incident("calc").cause_class == "SoftTimeLimitExceeded"


def test_an_invalid_call_is_still_null(raising_builtin: list[BaseException]) -> None:
    raising_builtin.append(ValueError("not a number"))
    assert evaluate("test raise(3)", {}) is None


@pytest.mark.parametrize(
    "expression",
    [
        'date("2020-01-01") + duration("P999999999D")',
        'date and time("2020-01-01T00:00:00") + duration("P999999999D")',
        'duration("P999999999D") + duration("P999999999D")',
        'duration("PT1S") * 100000000000000000',
        'date and time("2020-01-01T00:00:00") + duration("P1Y") * 100000000000000000000',
    ],
)
def test_a_calendar_overflow_is_a_classified_expression_error(expression: str) -> None:
    with pytest.raises(ExpressionError) as info:
        evaluate(expression, {})
    assert "out of range" in str(info.value)
    assert "\n" not in str(info.value)


def test_many_references_to_one_big_string_are_charged_by_their_size() -> None:
    """90,000 references to one 1 MB string take 0.2 s to build and 90 GB to write out."""
    with pytest.raises(ExpressionLimitExceeded) as info:
        evaluate("for i in 1..90000 return s", {"s": "x" * 1_000_000})
    assert info.value.limit == "result_size", str(info.value)
    assert len(evaluate("for i in 1..3 return s", {"s": "x" * 1_000})) == 3


def test_json_nested_past_what_python_can_read_is_a_bound_not_a_null() -> None:
    with pytest.raises(ExpressionLimitExceeded) as info:
        evaluate("from json(text)", {"text": "[" * 100_000 + "]" * 100_000})
    assert info.value.limit == "nesting_depth"
    assert evaluate('from json("[1, [2]]")', {}) == [1, [2]]
    assert evaluate('from json("[1, ")', {}) is None


def test_to_json_is_held_to_the_string_bound_before_it_writes() -> None:
    """5,000 references to one 1 MB string: 30 s and 5 GB to write out, before."""
    with pytest.raises(ExpressionLimitExceeded) as info:
        evaluate("to json(for i in 1..5000 return s)", {"s": "x" * 1_000_000})
    assert info.value.limit == "string_length"
    assert evaluate('to json({a: [1, "b"]})', {}) == '{"a":[1,"b"]}'
    # Stopped as its text grows, a few values in: written first, the same value would
    # have spent 2,000 steps (one per value) before its length was ever looked at.
    tight = Limits(steps=1_500, string_length=10_000)
    with pytest.raises(ExpressionLimitExceeded) as info:
        evaluate("to json([xs])", {"xs": ["x" * 1_000] * 2_000}, limits=tight)
    assert info.value.limit == "string_length", str(info.value)

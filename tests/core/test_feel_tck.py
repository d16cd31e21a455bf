"""The DMN TCK's FEEL cases (tests/conformance/feel) against our evaluator.

The floors sit just below today's pass counts, so a change that breaks conformance
fails here even though single TCK cases are not individual tests.
"""

from __future__ import annotations

import json
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pytest

from dormant.engine_core.errors import ExpressionError
from dormant.engine_core.feel import YearsMonthsDuration, evaluate
from dormant.engine_core.feel.temporal import (
    parse_date,
    parse_datetime,
    parse_duration_text,
    parse_time,
)
from tests.conformance import FEEL

FLOORS = {"camunda_subset.json": 2111, "tck_feel_cases.json": 3125}
NOW = datetime(2026, 1, 1, 12, 0, 0)


def decode(value: Any, t: Any) -> Any:
    if value is None:
        return None
    if isinstance(t, dict) and "list" in t:
        return [decode(v, it) for v, it in zip(value, t["list"], strict=True)]
    if isinstance(t, dict) and "context" in t:
        return {k: decode(value[k], kt) for k, kt in t["context"].items()}
    if t in ("number", "decimal"):
        return Decimal(str(value))
    if t == "date":
        return parse_date(value)
    if t == "time":
        return parse_time(value)
    if t == "date and time":
        return parse_datetime(value)
    if t in ("days and time duration", "years and months duration"):
        return parse_duration_text(value)
    return value


def same(actual: Any, expected: Any, tolerant: bool = False) -> bool:
    """Type-aware equality: a bool is never a number, offsets must match, ..."""
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, Decimal):
        if not isinstance(actual, Decimal):
            return False
        return actual == expected or (tolerant and abs(actual - expected) < Decimal("1e-8"))
    if isinstance(expected, datetime) or isinstance(actual, datetime):
        return (
            isinstance(actual, datetime)
            and isinstance(expected, datetime)
            and actual.replace(tzinfo=None) == expected.replace(tzinfo=None)
            and actual.utcoffset() == expected.utcoffset()
        )
    if isinstance(expected, date):
        return isinstance(actual, date) and actual == expected
    if isinstance(expected, time):
        return (
            isinstance(actual, time)
            and actual.replace(tzinfo=None) == expected.replace(tzinfo=None)
            and (actual.tzinfo is None) == (expected.tzinfo is None)
            and (actual.tzinfo is None or actual.utcoffset() == expected.utcoffset())
        )
    if isinstance(expected, (timedelta, YearsMonthsDuration)):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(same(a, e, tolerant) for a, e in zip(actual, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(same(actual[k], expected[k], tolerant) for k in expected)
        )
    return type(actual) is type(expected) and bool(actual == expected)


def run_case(case: dict[str, Any]) -> tuple[str, Any]:
    """One verdict: 'exact', 'tolerant', 'error-null', 'error-raised' or 'fail'."""
    variables = {k: decode(v, case["input_types"].get(k)) for k, v in case["inputs"].items()}
    try:
        for req in case["requires"]:
            variables[req["name"]] = evaluate(req["expression"], variables, now=NOW)
        actual = evaluate(case["expression"].strip(), variables, now=NOW)
    except ExpressionError as exc:
        return ("error-raised" if case["error_result"] else "fail"), exc
    expected = decode(case["expected"], case["expected_type"])
    if case["error_result"]:
        return ("error-null" if actual is None else "fail"), actual
    if same(actual, expected):
        return "exact", actual
    if same(actual, expected, tolerant=True):
        return "tolerant", actual
    return "fail", actual


def run_file(name: str) -> tuple[int, dict[str, int], list[tuple[str, str, Any, Any]]]:
    with (FEEL / name).open(encoding="utf-8") as f:
        cases = json.load(f, parse_float=Decimal, parse_int=Decimal)
    counts: dict[str, int] = {}
    failures = []
    for case in cases:
        verdict, actual = run_case(case)
        counts[verdict] = counts.get(verdict, 0) + 1
        if verdict == "fail":
            failures.append((case["id"], case["expression"].strip(), case["expected"], actual))
    return len(cases), counts, failures


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_tck_pass_count_holds(name: str) -> None:
    if not FEEL.is_dir():
        pytest.fail(f"conformance data missing at {FEEL}")
    total, counts, _ = run_file(name)
    passed = total - counts.get("fail", 0)
    print(f"{name}: {passed}/{total} pass ({counts})")
    assert passed >= FLOORS[name], f"{name}: {passed} pass, floor is {FLOORS[name]}"


if __name__ == "__main__":
    import sys

    for file_name in sys.argv[1:] or sorted(FLOORS):
        n, c, fails = run_file(file_name)
        print(file_name, n, c)
        for fail in fails:
            print("  FAIL", *fail)

"""feel-scala's own test cases (tests/core/feel_scala/cases.json) against our evaluator.

feel-scala is the FEEL engine inside Camunda 8, so its test suite says what "FEEL as
Camunda runs it" means: its extension functions, its value forms, its choice between
a null and a failure. The cases are our own extraction (tests/core/feel_scala/
extract.py) from its Apache-2.0 test sources, at the commit recorded in the file.

Verdicts: ``pass`` (the value feel-scala returns; a null where it returns null; a
raised ``ExpressionError`` where it fails), ``null-for-failure`` (feel-scala fails,
we answer null: Camunda would open an incident where we would carry a null on; counted
apart, not as a pass) and ``fail``. The floor sits just below today's pass count.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from dormant.engine_core.errors import ExpressionError
from dormant.engine_core.feel import YearsMonthsDuration, evaluate, evaluate_unary_tests
from dormant.engine_core.feel.temporal import (
    parse_date,
    parse_datetime,
    parse_duration_text,
    parse_time,
    zone_named,
)
from tests.core.test_feel_tck import same

CASES = Path(__file__).resolve().parent / "feel_scala" / "cases.json"
FLOOR = 1700
NOW = datetime(2026, 1, 1, 12, 0, 0)


def decode(tagged: Any) -> Any:
    if tagged is None:
        return None
    ((kind, value),) = tagged.items()
    if kind == "number":
        return Decimal(value)
    if kind in ("string", "boolean"):
        return value
    if kind == "list":
        return [decode(v) for v in value]
    if kind == "context":
        return {k: decode(v) for k, v in value.items()}
    if kind == "date":
        return parse_date(value)
    if kind in ("time", "offsettime"):
        return parse_time(value)
    if kind == "datetime":
        return parse_datetime(value)
    if kind == "zoned":
        m = re.fullmatch(r"(.+?)(?:\[(.+)\])?", value)
        assert m is not None
        base, zone = m.groups()
        if zone and not re.search(r"[+-]\d\d:\d\d$|Z$", base):
            return parse_datetime(f"{base}@{zone}")
        moment = parse_datetime(base)
        if zone and isinstance(moment, datetime) and zone_named(zone) is not None:
            moment = moment.astimezone(zone_named(zone))
        return moment
    if kind == "duration":
        return parse_duration_text(value)
    if kind == "period":
        m = re.fullmatch(r"(-)?P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?", value)
        assert m is not None
        months = int(m.group(2) or 0) * 12 + int(m.group(3) or 0)
        return YearsMonthsDuration(-months if m.group(1) else months)
    raise ValueError(kind)


def _ids() -> Any:
    """A deterministic id source, as the engine passes one (the core makes no random ids)."""
    counter = iter(range(1, 1_000_000))
    return lambda: str(uuid.UUID(int=next(counter)))


def run_case(case: dict[str, Any]) -> tuple[str, Any]:
    variables = {k: decode(v) for k, v in case["variables"].items()}
    try:
        if "unary_input" in case:
            actual = evaluate_unary_tests(
                case["expression"], decode(case["unary_input"]), variables
            )
        else:
            actual = evaluate(case["expression"], variables, now=NOW, ids=_ids())
    except ExpressionError as exc:
        return ("pass" if case["outcome"] == "error" else "fail"), exc
    except Exception as exc:  # a crash is a failure of the case, reported, not raised
        return "fail", exc
    if case["outcome"] == "error":
        return "null-for-failure" if actual is None else "fail", actual
    if case["outcome"] == "null":
        return ("pass" if actual is None else "fail"), actual
    expected = decode(case["expected"])
    return ("pass" if same(actual, expected, tolerant=True) else "fail"), actual


def run_all() -> tuple[dict[str, Any], dict[str, int], list[tuple[str, str, Any, Any]]]:
    data = json.loads(CASES.read_text(encoding="utf-8"))
    counts: dict[str, int] = {}
    failures = []
    for case in data["cases"]:
        verdict, actual = run_case(case)
        counts[verdict] = counts.get(verdict, 0) + 1
        if verdict != "pass":
            failures.append((case["id"], case["expression"].strip(), case["expected"], actual))
    return data, counts, failures


def test_feel_scala_pass_count_holds() -> None:
    data, counts, _ = run_all()
    total = len(data["cases"])
    passed = counts.get("pass", 0)
    print(f"feel-scala {data['commit'][:10]}: {passed}/{total} pass ({counts})")
    assert passed >= FLOOR, f"{passed} of {total} feel-scala cases pass, floor is {FLOOR}"


if __name__ == "__main__":
    d, c, fails = run_all()
    print(len(d["cases"]), c)
    for fail in fails:
        print("  FAIL", *fail)

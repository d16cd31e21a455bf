"""``distinct values``, ``union``, ``duplicate values``: FEEL equality, in linear time.

The built-ins hash items by ``equality_key``; these cases pin where FEEL equality is
not Python's, and compare the hashed result with a pairwise reference on mixed data.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from dormant.engine_core.feel import evaluate, ops
from dormant.engine_core.feel.fn_lists import distinct_values, duplicate_values, union
from dormant.engine_core.feel.temporal import YearsMonthsDuration
from dormant.engine_core.feel.values import Range

PLUS1 = timezone(timedelta(hours=1))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("distinct values([1, 1.0, 1.00, 2])", [Decimal(1), Decimal(2)]),
        ("distinct values([true, 1, false, 0])", [True, Decimal(1), False, Decimal(0)]),
        ('distinct values(["a", "a", null, null])', ["a", None]),
        (
            "distinct values([[1, 2], [1.0, 2], [2, 1]])",
            [[Decimal(1), Decimal(2)], [Decimal(2), Decimal(1)]],
        ),
        (
            "distinct values([{a: 1, b: 2}, {b: 2, a: 1.0}, {a: 1}])",
            [{"a": Decimal(1), "b": Decimal(2)}, {"a": Decimal(1)}],
        ),
        ("union([1, 2], [2.0, 3], [3])", [Decimal(1), Decimal(2), Decimal(3)]),
        (
            'distinct values(["null", null, "boolean", true, "1", 1])',
            ["null", None, "boolean", True, "1", Decimal(1)],
        ),
        ("duplicate values([1, 2, 3, 2.0, 1, 1])", [Decimal(1), Decimal(2)]),
        ("duplicate values([[1], [1.0], [2]])", [[Decimal(1)]]),
        ("count(distinct values([[1..2], [1..2], [1..3]]))", Decimal(2)),
        (
            "duplicate values([[1..2], [1..3], [1..2]])",
            [Range(Decimal(1), Decimal(2), True, True)],
        ),
    ],
)
def test_feel_equality_decides(expression: str, expected: Any) -> None:
    assert evaluate(expression, {}) == expected


def test_moments_equal_by_instant_when_zoned_never_a_zoned_to_a_local_one() -> None:
    noon_utc = datetime(2026, 1, 1, 12, tzinfo=UTC)
    one_pm_plus1 = datetime(2026, 1, 1, 13, tzinfo=PLUS1)
    local_noon = datetime(2026, 1, 1, 12)
    same_ms = datetime(2026, 1, 1, 12, 0, 0, 123_400, tzinfo=UTC)
    other_us = datetime(2026, 1, 1, 12, 0, 0, 123_900, tzinfo=UTC)
    assert distinct_values([noon_utc, one_pm_plus1, local_noon]) == [noon_utc, local_noon]
    assert distinct_values([same_ms, other_us]) == [same_ms]  # equal to the millisecond
    assert distinct_values([date(2026, 1, 1), noon_utc]) == [date(2026, 1, 1), noon_utc]
    t1, t2 = time(12, tzinfo=UTC), time(13, tzinfo=PLUS1)
    assert distinct_values([t1, t2, time(12)]) == [t1, time(12)]
    ym = YearsMonthsDuration(12)
    assert distinct_values([ym, YearsMonthsDuration(12), timedelta(days=365)]) == [
        ym,
        timedelta(days=365),
    ]


def reference_distinct(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in items:
        if not any(ops.equal(v, r) is True for r in out):
            out.append(v)
    return out


def mixed(n: int) -> list[Any]:
    kinds: list[Callable[[int], Any]] = [
        lambda i: Decimal(i % 13),
        lambda i: Decimal(f"{i % 13}.0"),
        lambda i: f"s{i % 5}",
        lambda i: i % 2 == 0,
        lambda i: None,
        lambda i: [Decimal(i % 3), f"s{i % 2}"],
        lambda i: {"k": Decimal(i % 4)},
        lambda i: datetime(2026, 1, 1, i % 3, tzinfo=UTC),
        lambda i: datetime(2026, 1, 1, i % 3 + 1, tzinfo=PLUS1),
        lambda i: Range(Decimal(i % 2), Decimal(5), True, True),
    ]
    return [kinds[(i * 7) % len(kinds)](i) for i in range(n)]


def test_hashed_results_match_the_pairwise_reference() -> None:
    items = mixed(500)
    assert distinct_values(items) == reference_distinct(items)
    assert union(items[:250], items[250:]) == reference_distinct(items)
    expected_dups = reference_distinct(
        [v for i, v in enumerate(items) if any(ops.equal(v, w) is True for w in items[i + 1 :])]
    )
    assert duplicate_values(items) == expected_dups


def test_hashable_items_are_never_compared_pairwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """What makes them linear: no item with an equality key meets ``equal`` at all (a
    pairwise version makes n²/2 calls here, 2 million)."""
    calls = 0
    real = ops.equal

    def counting(a: Any, b: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(a, b)

    monkeypatch.setattr(ops, "equal", counting)
    items = [Decimal(i) for i in range(2_000)] + [{"a": [Decimal(1)]}] * 10
    assert len(distinct_values(items)) == 2_001
    assert len(union(items, items)) == 2_001
    assert duplicate_values(items) == [{"a": [Decimal(1)]}]
    assert calls == 0

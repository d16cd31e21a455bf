#!/usr/bin/env python
"""FEEL's collection built-ins at 1k, 10k and 100k items: time per item, and its flatness.

``distinct values``, ``union`` and ``duplicate values`` hash each item by its FEEL
equality key (engine_core.feel.ops.equality_key), so their cost per item should not
grow with the list. Each is evaluated through ``engine_core.feel.evaluate`` (the path
the engine takes), on two kinds of items: numbers (half of them repeated, ``1`` and
``1.0`` both present) and small contexts ``{id: n, tag: "t<n % 7>"}``. The limits are
raised for the 100k run (the default collection bound is 100,000 items).

Targets (bench/README.md): 10k items in < 50 ms; per-item time at 100k at most twice the
per-item time at 1k ("flat"). The median of five rounds is reported, each started
after a garbage collection, the expression compiled beforehand.

    .venv/bin/python bench/bench_feel.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from dormant.engine_core.feel import evaluate
from dormant.engine_core.feel.limits import Limits

SIZES = (1_000, 10_000, 100_000)
LIMITS = Limits(steps=50_000_000, collection_size=1_000_000)
CALLS = {
    "distinct values": "distinct values(xs)",
    "union": "union(xs, ys)",
    "duplicate values": "duplicate values(xs)",
}


def numbers(n: int) -> list[Any]:
    """Half distinct: n/2 values, each twice, once as ``k`` and once as ``k.0``."""
    half = n // 2
    return [Decimal(i % half) if i < half else Decimal(f"{i % half}.0") for i in range(n)]


def contexts(n: int) -> list[Any]:
    return [{"id": Decimal(i % (n // 2)), "tag": f"t{i % 7}"} for i in range(n)]


def run_one(call: str, items: list[Any], rounds: int) -> float:
    half = len(items) // 2
    variables = {"xs": items, "ys": items[half:]} if "ys" in call else {"xs": items}
    if "ys" in call:
        variables["xs"] = items[:half]
    evaluate(call, {"xs": [], "ys": []}, limits=LIMITS)  # compiled once, outside the clock
    times = []
    for _ in range(rounds):
        gc.collect()  # each round starts from the same heap, not the previous round's garbage
        times.append(common.timed(lambda: evaluate(call, variables, limits=LIMITS)))
    return common.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one round per size")
    args = parser.parse_args()
    rounds = 1 if args.quick else 5
    common.header("bench_feel: FEEL collection built-ins, time per item")
    for kind, make in (("numbers", numbers), ("contexts", contexts)):
        for name, call in CALLS.items():
            per_item: dict[int, float] = {}
            for n in SIZES:
                seconds = run_one(call, make(n), rounds)
                per_item[n] = seconds / n
                common.line(
                    f"{name} ({kind}) {n:>7,} items",
                    f"{seconds * 1000:9.2f} ms  {per_item[n] * 1e6:6.2f} µs/item",
                )
                if n == 10_000:
                    common.ratio_line(
                        f"{name} ({kind}) 10k items, ms", seconds * 1000, "<=", 50.0, "{:.1f}"
                    )
            common.ratio_line(
                f"{name} ({kind}) per-item 100k / 1k",
                per_item[100_000] / per_item[1_000],
                "<=",
                2.0,
            )
    return common.summary()


if __name__ == "__main__":
    raise SystemExit(main())

"""The correlation plan (engine_core/correlation.py), table by table."""

from __future__ import annotations

import pytest

from engine_core.correlation import (
    JoinRunning,
    StartProcess,
    buffer_it,
    start_or_join,
    waits_to_wake,
)


def test_one_wait_per_instance_in_order_and_none_served_twice() -> None:
    holders = [("i2", "w1"), ("i1", "w7"), ("i1", "w3"), ("i3", "w2")]
    assert waits_to_wake(holders) == [("i1", "w3"), ("i2", "w1"), ("i3", "w2")]
    assert waits_to_wake(holders, served=["i1", "i3"]) == [("i2", "w1")]
    assert waits_to_wake([]) == []


@pytest.mark.parametrize(
    ("key", "running", "expected"),
    [
        (None, None, StartProcess("order", 2, "start_a", None)),
        ("k1", None, StartProcess("order", 2, "start_a", "k1")),
        ("k1", "i9", JoinRunning("order", "i9")),
        # An unkeyed message never joins: every one starts its own instance.
        (None, "i9", StartProcess("order", 2, "start_a", None)),
    ],
)
def test_a_keyed_start_joins_a_running_instance(
    key: str | None, running: str | None, expected: StartProcess | JoinRunning
) -> None:
    assert start_or_join("order", 2, ["start_a", "start_b"], key, running) == expected


@pytest.mark.parametrize(
    ("taken", "ttl", "buffered"),
    [(False, 30.0, True), (False, 0.0, False), (False, None, False), (True, 30.0, False)],
)
def test_only_a_message_nobody_took_is_buffered_and_only_with_a_ttl(
    taken: bool, ttl: float | None, buffered: bool
) -> None:
    assert buffer_it(taken, ttl) is buffered

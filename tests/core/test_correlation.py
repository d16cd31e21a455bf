"""The correlation plan (engine_core/correlation.py), table by table."""

from __future__ import annotations

import pytest

from dormant.engine_core.correlation import (
    Holder,
    JoinRunning,
    StartProcess,
    buffer_it,
    processes_to_start,
    start_or_join,
    waits_to_wake,
)


def test_once_per_process_id_the_first_holder_and_every_other_process() -> None:
    """Two instances of "order" and one of "audit" wait on the same message: the first
    "order" holder (in the order given) and the "audit" holder get it; the second
    "order" instance is a fallback only if the first one's wait went stale."""
    holders = [
        Holder("order", "i1", "w3"),
        Holder("order", "i1", "w7"),  # a second wait of the same instance: never twice
        Holder("audit", "a1", "w1"),
        Holder("order", "i2", "w1"),
    ]
    assert waits_to_wake(holders) == [
        [Holder("order", "i1", "w3"), Holder("order", "i2", "w1")],
        [Holder("audit", "a1", "w1")],
    ]
    assert waits_to_wake(holders, served=["order"]) == [[Holder("audit", "a1", "w1")]]
    assert waits_to_wake([]) == []


def test_message_starts_only_for_processes_no_holder_served() -> None:
    assert processes_to_start(["audit", "order", "ship"], served={"order"}) == ["audit", "ship"]
    assert processes_to_start([], served=()) == []


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
    ("ttl", "buffered"), [(30.0, True), (0.5, True), (0.0, False), (None, False)]
)
def test_a_message_with_a_ttl_is_buffered_taken_or_not(ttl: float | None, buffered: bool) -> None:
    """Taken at publish or not: the processes it has not reached may still subscribe."""
    assert buffer_it(ttl) is buffered

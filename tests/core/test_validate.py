"""A model the engine cannot run is refused when it is built (deploy), naming the
element: engine_core/validate.py, one malformed model per rule."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine_core.builder import (
    ProcessBuilder,
    compensate,
    error,
    escalation,
    signal,
    timer,
)
from engine_core.errors import InvalidModel
from engine_core.model import EventDefinition, EventKind, LoopSpec, RetryPolicy

Build = Callable[[ProcessBuilder], object]


def _task_then_end(b: ProcessBuilder) -> ProcessBuilder:
    b.start_event("s").user_task("t").end_event("e")
    return b.sequence("s", "t", "e")


CASES: list[tuple[str, Build, str]] = [
    (
        "flow-id-clashes-with-a-node",
        lambda b: (_task_then_end(b), b.flow("s", "e", id="t")),
        "duplicate id 't'",
    ),
    (
        "flow-into-a-start-event",
        lambda b: (_task_then_end(b), b.flow("t", "s")),
        "takes no incoming flow",
    ),
    (
        "flow-out-of-an-end-event",
        lambda b: (_task_then_end(b), b.flow("e", "t")),
        "has no outgoing flow",
    ),
    (
        "boundary-on-a-gateway",
        lambda b: (
            _task_then_end(b),
            b.exclusive_gateway("g"),
            b.boundary_event("late", "g", timer("PT1H")),
        ),
        "not an activity",
    ),
    (
        "boundary-on-nothing",
        lambda b: (_task_then_end(b), b.boundary_event("late", "ghost", timer("PT1H"))),
        "does not exist",
    ),
    (
        "receive-task-without-message",
        lambda b: (
            b.start_event("s").receive_task("r", "").end_event("e"),
            b.sequence("s", "r", "e"),
        ),
        "receiveTask 'r'",
    ),
    (
        "negative-retry-attempts",
        lambda b: (
            b.start_event("s").user_task("t", retry_policy=RetryPolicy(-1, 1.0)).end_event("e"),
            b.sequence("s", "t", "e"),
        ),
        "attempts must be >= 0",
    ),
    (
        "zero-retry-backoff",
        lambda b: (
            b.start_event("s").user_task("t", retry_policy=RetryPolicy(1, 0.0)).end_event("e"),
            b.sequence("s", "t", "e"),
        ),
        "backoff must be > 0",
    ),
    (
        "empty-timer",
        lambda b: (
            b.start_event("s").intermediate_catch_event("w", timer(" ")).end_event("e"),
            b.sequence("s", "w", "e"),
        ),
        "timer with an empty value",
    ),
    (
        "signal-without-name",
        lambda b: (
            b.start_event("s").intermediate_catch_event("w", signal("")).end_event("e"),
            b.sequence("s", "w", "e"),
        ),
        "signal has no name",
    ),
    (
        "error-end-without-code",
        lambda b: (b.start_event("s").end_event("e", error(None)), b.sequence("s", "e")),
        "needs an error with an errorCode",
    ),
    (
        "escalation-throw-without-code",
        lambda b: (
            b.start_event("s").intermediate_throw_event("x", escalation(None)).end_event("e"),
            b.sequence("s", "x", "e"),
        ),
        "needs an escalation with an escalationCode",
    ),
    (
        "link-without-name",
        lambda b: (
            b.start_event("s").intermediate_throw_event("x", EventDefinition(EventKind.LINK)),
            b.sequence("s", "x"),
        ),
        "link event has no name",
    ),
    (
        "compensation-of-a-non-activity",
        lambda b: (
            b.start_event("s").intermediate_throw_event("x", compensate("e")).end_event("e"),
            b.sequence("s", "x", "e"),
        ),
        "is not an activity",
    ),
    (
        "event-based-gateway-with-one-arm",
        lambda b: (
            b.start_event("s").event_based_gateway("g"),
            b.intermediate_catch_event("w", timer("PT1M")).end_event("e"),
            b.sequence("s", "g", "w", "e"),
        ),
        "needs at least two outgoing flows",
    ),
    (
        "multi-instance-without-collection",
        lambda b: (
            b.start_event("s").user_task("t", loop=LoopSpec(sequential=False)).end_event("e"),
            b.sequence("s", "t", "e"),
        ),
        "t",
    ),
]


@pytest.mark.parametrize(("build", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_model_the_engine_cannot_run_is_refused_naming_the_element(
    build: Build, expected: str
) -> None:
    b = ProcessBuilder("p")
    build(b)
    with pytest.raises(InvalidModel, match=expected):
        b.build()

"""A model the engine cannot run is refused when it is built (deploy), naming the
element: engine_core/validate.py, one malformed model per rule."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dormant.engine_core.builder import (
    ProcessBuilder,
    compensate,
    error,
    escalation,
    link,
    signal,
    timer,
)
from dormant.engine_core.errors import InvalidModel, UnsupportedElement
from dormant.engine_core.model import EventDefinition, EventKind, LoopSpec, NodeKind, RetryPolicy

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
    (
        "attached-but-not-a-boundary",
        lambda b: (_task_then_end(b), b.user_task("u", attached_to="t")),
        "node 'u': only a boundary event can be attached to an activity",
    ),
    (
        "boundary-outside-its-activitys-scope",
        lambda b: (
            b.start_event("s"),
            _sub_with_task(b),
            b.boundary_event("late", "inner_task", timer("PT1M")).end_event("e"),
            b.sequence("s", "inner", "e"),
            b.sequence("late", "e"),
        ),
        "boundary event 'late': not in the same scope as its activity 'inner_task'",
    ),
    (
        "compensation-handler-with-flows",
        lambda b: (
            b.start_event("s").service_task("t", "book").end_event("e"),
            b.boundary_event("tc", "t", compensate(), compensation_handler="undo"),
            b.service_task("undo", "unbook", is_for_compensation=True),
            b.sequence("s", "t", "undo", "e"),
        ),
        "compensation handler 'undo' must have no sequence flows",
    ),
    (
        "compensation-handler-not-for-compensation",
        lambda b: (
            _task_then_end(b),
            b.boundary_event("tc", "t", compensate(), compensation_handler="undo"),
            b.service_task("undo", "unbook"),
        ),
        "compensation boundary 'tc': handler 'undo' is not an activity",
    ),
    (
        "event-sub-process-with-flows",
        lambda b: (_task_then_end(b), _esp(b), b.flow("t", "esp")),
        "event sub-process 'esp' must have no sequence flows",
    ),
    (
        "message-catch-without-a-name",
        lambda b: (
            b.start_event("s").intermediate_catch_event("m", EventDefinition(EventKind.MESSAGE)),
            b.end_event("e"),
            b.sequence("s", "m", "e"),
        ),
        "intermediateCatchEvent 'm': message has no name",
    ),
    (
        "message-throw-without-message-or-job",
        lambda b: (
            b.start_event("s").end_event("e", EventDefinition(EventKind.MESSAGE)),
            b.sequence("s", "e"),
        ),
        "endEvent 'e': a message throw needs a message or a job type",
    ),
    (
        "two-link-catches-share-a-name",
        lambda b: (
            _task_then_end(b),
            b.intermediate_catch_event("l1", link("go")).intermediate_catch_event("l2", link("go")),
            b.sequence("l1", "e"),
            b.sequence("l2", "e"),
        ),
        "link catch events 'l1' and 'l2' share the name 'go'",
    ),
]


def _sub_with_task(b: ProcessBuilder) -> ProcessBuilder:
    with b.sub_process("inner"):
        b.start_event("is").user_task("inner_task").end_event("ie")
        b.sequence("is", "inner_task", "ie")
    return b


def _esp(b: ProcessBuilder) -> ProcessBuilder:
    with b.event_sub_process("esp"):
        b.start_event("es", timer("PT1M")).end_event("ee")
        b.sequence("es", "ee")
    return b


@pytest.mark.parametrize(("build", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_model_the_engine_cannot_run_is_refused_naming_the_element(
    build: Build, expected: str
) -> None:
    b = ProcessBuilder("p")
    build(b)
    with pytest.raises(InvalidModel, match=expected):
        b.build()


def test_an_event_with_several_event_definitions_is_refused_as_unsupported() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").end_event("e")
    b.node(NodeKind.INTERMEDIATE_CATCH_EVENT, "c", events=(timer("PT1M"), timer("PT2M")))
    b.sequence("s", "c", "e")
    with pytest.raises(UnsupportedElement, match="several event definitions") as refused:
        b.build()
    assert (refused.value.element_id, refused.value.element_type) == ("c", "intermediateCatchEvent")

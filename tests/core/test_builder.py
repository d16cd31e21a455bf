"""The model builder the core tests (and embedders) write processes with: the ids it
derives, and the mistakes it refuses before validation runs."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from dormant.engine_core.builder import ProcessBuilder
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.errors import InvalidModel
from tests.core.enginekit import Run


def test_parallel_flows_between_the_same_nodes_get_distinct_ids() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").parallel_gateway("fork").parallel_gateway("join").end_event("e")
    b.sequence("s", "fork")
    b.sequence("fork", "join").sequence("fork", "join").sequence("fork", "join")
    b.sequence("join", "e")
    defn = b.build()
    assert defn.nodes["fork"].outgoing == ("fork->join", "fork->join#2", "fork->join#3")
    run = Run(defn)
    run.start()
    assert run.status == "completed"  # the join waited for all three


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        pytest.param(
            lambda b: b.start_event("s").flow("ghost", "s", default=True),
            "flow 'ghost->s': default flow of unknown node 'ghost'",
            id="default-of-unknown-node",
        ),
        pytest.param(
            lambda b: b.start_event("s").start_event("s"),
            "process 'p': duplicate id 's'",
            id="duplicate-node",
        ),
    ],
)
def test_the_builder_refuses_a_mistake_naming_it(
    build: Callable[[ProcessBuilder], object], reason: str
) -> None:
    b = ProcessBuilder("p")
    with pytest.raises(InvalidModel, match=re.escape(reason)):
        build(b)


def test_building_inside_an_open_sub_process_is_refused() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").end_event("e").sequence("s", "e")
    with b.sub_process("inner"), pytest.raises(InvalidModel, match="'inner' still open"):
        b.build()


def test_a_send_task_dispatches_its_job() -> None:
    b = ProcessBuilder("p")
    b.start_event("s").send_task("mail", "send-mail").end_event("e")
    b.sequence("s", "mail", "e")
    run = Run(b.build())
    step = run.start()
    assert [j.job_type for j in run.effects_of(DispatchJob, step)] == ["send-mail"]
    run.complete_job("mail")
    assert run.status == "completed"

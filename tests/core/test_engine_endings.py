"""How a scope and an instance end while an event sub-process still runs, and what a
cancelled child tells its parent (engine_core/moving.py)."""

from __future__ import annotations

import pytest

from dormant.engine_core.builder import ProcessBuilder, signal, terminate
from dormant.engine_core.effects import NotifyParent
from dormant.engine_core.model import ProcessDefinition
from dormant.engine_core.triggers import Cancel
from tests.core.enginekit import Run


def _with_running_event_sub(*, terminate_at_end: bool) -> ProcessDefinition:
    b = ProcessBuilder("p")
    b.start_event("s").user_task("work")
    b.end_event("e", terminate() if terminate_at_end else None)
    b.sequence("s", "work", "e")
    with b.event_sub_process("esp"):
        b.start_event("es", signal("poke"), is_interrupting=False)
        b.user_task("handle").end_event("ee")
        b.sequence("es", "handle", "ee")
    return b.build()


def _poked(terminate_at_end: bool) -> Run:
    run = Run(_with_running_event_sub(terminate_at_end=terminate_at_end))
    run.start()
    run.signal("es", "poke")
    assert run.token_nodes() == ["handle:waiting", "work:waiting"]
    return run


def test_the_instance_waits_for_a_running_event_sub_process_then_completes() -> None:
    run = _poked(terminate_at_end=False)
    run.complete_task("work")
    assert run.status == "active" and run.token_nodes() == ["handle:waiting"]
    run.complete_task("handle")
    assert run.status == "completed" and run.cp.waits == {}


def test_a_terminate_end_ends_a_running_event_sub_process_too() -> None:
    run = _poked(terminate_at_end=True)
    run.complete_task("work")
    assert run.status == "completed"
    assert run.cp.tokens == {} and run.cp.waits == {}
    assert run.facts_of("Terminated", node="e")


@pytest.mark.parametrize("notify", [True, False])
def test_a_cancelled_child_tells_its_parent_unless_the_parent_cancelled_it(
    notify: bool,
) -> None:
    b = ProcessBuilder("child")
    b.start_event("s").user_task("t").end_event("e")
    b.sequence("s", "t", "e")
    parent = {"instance_id": "p-1", "wait_id": "w3", "root_instance_id": "p-1"}
    run = Run(b.build(), instance_id="p-1.w3", parent=parent)
    run.start()
    step = run.send(Cancel(notify_parent=notify))
    assert run.status == "terminated"
    notices = run.effects_of(NotifyParent, step)
    if notify:
        assert notices == [
            NotifyParent(
                parent_instance_id="p-1",
                wait_id="w3",
                completed=False,
                variables={},
                error="child instance p-1.w3 was cancelled",
                error_class="ChildCancelled",
            )
        ]
    else:
        assert notices == []

"""Migration plans in the pure core: every reason ``problems`` refuses a plan, and the
parts of a checkpoint ``migrate`` re-points besides tokens and waits (sub-process
scopes, compensation records).

A refused plan must name the element and the reason, so an operator can fix the
mapping; ``migrate`` must refuse the same plan and change nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dormant.engine_core.builder import ProcessBuilder, compensate, message, timer
from dormant.engine_core.checkpoint import encode
from dormant.engine_core.engine import Services, apply
from dormant.engine_core.errors import InvalidOperation
from dormant.engine_core.migration import problems
from dormant.engine_core.model import LoopSpec, ProcessDefinition
from dormant.engine_core.triggers import MigrateInstance
from tests.core.enginekit import Run


def review(
    *,
    key: str = "order",
    boundary_on: str = "review",
    boundary_message: bool = False,
    loop: LoopSpec | None = None,
    wrapped: bool = False,
) -> ProcessDefinition:
    """``review`` (a user task, a timer boundary ``late``) then ``e``; ``other`` is a
    spare task the boundary can be attached to instead."""
    b = ProcessBuilder(key)
    b.start_event("s")
    if wrapped:
        with b.sub_process("wrap"):
            b.start_event("ws").user_task("review", loop=loop).end_event("we")
            b.sequence("ws", "review", "we")
        b.sequence("s", "wrap", "e")
    else:
        b.user_task("review", loop=loop)
        b.sequence("s", "review", "e")
    b.user_task("other").end_event("e").end_event("late_end")
    b.boundary_event(
        "late", boundary_on, message("nudge", "=id") if boundary_message else timer("PT1H")
    )
    b.sequence("late", "late_end")
    b.sequence("other", "e")
    return b.build()


def joined(join_flow: str) -> ProcessDefinition:
    """A fork whose short branch reaches ``join`` by the flow ``join_flow``."""
    b = ProcessBuilder("order")
    b.start_event("s").parallel_gateway("fork").user_task("slow").parallel_gateway("join")
    b.end_event("e")
    b.sequence("s", "fork", "slow", "join", "e")
    b.flow("fork", "join", id=join_flow)
    return b.build()


def nested(container: str) -> ProcessDefinition:
    b = ProcessBuilder("order")
    b.start_event("s")
    with b.sub_process(container):
        b.start_event("is").user_task("work").end_event("ie")
        b.sequence("is", "work", "ie")
    b.end_event("e")
    b.sequence("s", container, "e")
    return b.build()


def compensable(first: str) -> ProcessDefinition:
    """Job ``first`` (with a compensation handler), then job ``second``."""
    b = ProcessBuilder("order")
    b.start_event("s").service_task(first, job_type="book")
    b.boundary_event("undo_comp", first, compensate(), compensation_handler="undo")
    b.service_task("undo", job_type="unbook", is_for_compensation=True)
    b.service_task("second", job_type="pay").end_event("e")
    b.sequence("s", first, "second", "e")
    return b.build()


def _started(defn: ProcessDefinition, setup: Callable[[Run], object] | None = None) -> Run:
    run = Run(defn)
    run.start()
    if setup is not None:
        setup(run)
    return run


def _migrate(run: Run, target: ProcessDefinition | None, **mapping: str) -> None:
    step = apply(
        run.defn,
        run.cp,
        MigrateInstance(version=2, mapping=mapping),
        now=run.now,
        services=Services(migration_target=target),
    )
    run.cp = step.checkpoint
    if target is not None:
        run.defn = target
    run.steps.append(step)


REFUSED = [
    pytest.param(
        review(),
        review(key="invoice"),
        {},
        "the target is process 'invoice', not 'order'",
        id="key",
    ),
    pytest.param(
        review(),
        review(),
        {"review": "nope"},
        "--map review=nope: v2 has no node 'nope'",
        id="map-target",
    ),
    pytest.param(
        review(),
        review(boundary_message=True),
        {},
        "timer wait w2 is at 'late': its event definitions (timer) differ from "
        "v2's 'late' (message)",
        id="event-definitions",
    ),
    pytest.param(
        review(),
        review(loop=LoopSpec(sequential=False, cardinality="=2")),
        {},
        "token t1 is at 'review': its multi-instance shape differs in the target",
        id="multi-instance",
    ),
    pytest.param(
        review(),
        review(wrapped=True, boundary_on="wrap"),
        {},
        "token t1 is at 'review' inside the process; v2's 'review' is inside wrap",
        id="parent",
    ),
    pytest.param(
        review(),
        review(boundary_on="other"),
        {},
        "boundary 'late' is armed on 'review'; v2's 'late' is attached to 'other'",
        id="boundary-host",
    ),
    pytest.param(
        joined("fork->join"),
        joined("shortcut"),
        {},
        "token t2 waits at join 'join' having arrived by flow 'fork->join', which does not "
        "lead there in v2",
        id="join-flow",
    ),
    pytest.param(
        nested("inner"),
        nested("box"),
        {"work": "work"},
        "scope s2 is at 'inner', which v2 does not have (map it: --map inner=NODE)",
        id="scope",
    ),
]


@pytest.mark.parametrize(("source", "target", "mapping", "reason"), REFUSED)
def test_a_refused_plan_names_the_element_and_the_reason(
    source: ProcessDefinition,
    target: ProcessDefinition,
    mapping: dict[str, str],
    reason: str,
) -> None:
    run = _started(source)
    assert reason in problems(source, target, run.cp, mapping, 2)
    before = encode(run.cp)
    with pytest.raises(InvalidOperation, match="cannot move from order v1 to v2") as refused:
        _migrate(run, target, **mapping)
    assert reason in str(refused.value)
    assert encode(run.cp) == before


def test_a_checkpoint_naming_a_node_its_source_lacks_is_refused() -> None:
    run = _started(review())
    found = problems(nested("inner"), review(), run.cp, {}, 2)
    assert "token t1 is at 'review', which v1 does not have" in found


def test_a_compensation_record_moves_with_the_mapping_or_refuses_the_plan() -> None:
    run = _started(compensable("hotel"), lambda r: r.complete_job("hotel"))
    assert [e.node_id for e in run.cp.compensation] == ["hotel"]
    target = compensable("lodging")
    assert (
        "the compensation record of 'hotel' is at 'hotel', which v2 does not have "
        "(map it: --map hotel=NODE)"
    ) in problems(run.defn, target, run.cp, {}, 2)
    _migrate(run, target, hotel="lodging")
    assert [e.node_id for e in run.cp.compensation] == ["lodging"]
    assert run.facts_of("Migrated", mapped="hotel>lodging", to_version=2)


def test_a_sub_process_scope_moves_with_the_mapping_and_the_instance_completes() -> None:
    run = _started(nested("inner"))
    _migrate(run, nested("box"), inner="box")
    assert sorted(s.node_id or "" for s in run.cp.scopes.values()) == ["", "box"]
    run.complete_task("work")
    assert run.status == "completed"


def test_a_target_version_not_loaded_is_refused() -> None:
    run = _started(review())
    before = encode(run.cp)
    with pytest.raises(InvalidOperation, match="version 2 of 'order' is not loaded"):
        _migrate(run, None)
    assert encode(run.cp) == before

"""Activities in the shapes Camunda 8 lets a model give them: input mappings as the
activity's local variables, and the elements that run as a job when they carry a job
type (a message throw, a business rule task, a script task).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dormant.engine_core.builder import ProcessBuilder, message
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.model import IoMapping, LoopSpec, ProcessDefinition
from tests.core.enginekit import Run

_INPUTS = (IoMapping("=amount * 2", "doubled"), IoMapping("=who", "order.customer"))


def _review(loop: LoopSpec | None = None) -> ProcessDefinition:
    b = ProcessBuilder("p")
    b.start_event("s").user_task("review", inputs=_INPUTS, loop=loop).end_event("e")
    b.sequence("s", "review", "e")
    return b.build()


def test_input_mappings_are_the_activitys_local_variables_and_end_with_it() -> None:
    run = Run(_review())
    run.start({"amount": 10, "who": "ann"})
    (local,) = [s for s in run.cp.scopes.values() if s.node_id == "review"]
    assert local.variables == {"doubled": 20, "order": {"customer": "ann"}}
    assert run.variables == {"amount": 10, "who": "ann"}  # the process scope is untouched
    run.complete_task("review", approved=True)
    assert run.status == "completed"
    assert "doubled" not in run.variables and "order" not in run.variables
    assert [s.node_id for s in run.cp.scopes.values() if s.node_id == "review"] == []


def test_each_multi_instance_instance_gets_the_input_mappings_in_its_own_scope() -> None:
    run = Run(_review(LoopSpec(sequential=False, cardinality="=2")))
    run.start({"amount": 3, "who": "bo"})
    instances = sorted(
        (s for s in run.cp.scopes.values() if s.node_id == "review" and s.loop_index is not None),
        key=lambda s: s.loop_index or 0,
    )
    assert [s.loop_index for s in instances] == [0, 1]
    for scope in instances:
        assert scope.variables["doubled"] == 6
        assert scope.variables["order"] == {"customer": "bo"}
    assert len(run.waits("review", "user_task")) == 2


def _message_end(b: ProcessBuilder) -> None:
    b.start_event("s").end_event("work", message("shipped"), job_type="notify")
    b.sequence("s", "work")


def _rule_task(b: ProcessBuilder) -> None:
    b.start_event("s").business_rule_task("work", job_type="notify").end_event("e")
    b.sequence("s", "work", "e")


def _script_task(b: ProcessBuilder) -> None:
    b.start_event("s").script_task("work", script="=1", job_type="notify").end_event("e")
    b.sequence("s", "work", "e")


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(_message_end, id="message-end-event"),
        pytest.param(_rule_task, id="business-rule-task"),
        pytest.param(_script_task, id="script-task"),
    ],
)
def test_an_element_with_a_job_type_runs_as_a_job(build: Callable[[ProcessBuilder], None]) -> None:
    b = ProcessBuilder("p")
    build(b)
    run = Run(b.build())
    step = run.start({"order": 7})
    (job,) = run.effects_of(DispatchJob, step)
    assert (job.node_id, job.job_type, job.attempt) == ("work", "notify", 1)
    assert job.variables == {"order": 7}
    assert run.status == "active"
    run.complete_job("work", done=True)
    assert run.status == "completed"
    assert run.variables == {"order": 7, "done": True}

"""Stored checkpoints of many shapes, for the working-state contract tests.

Every Camunda 8 conformance model started with no variables (waiting at its first
waits, or in incident where its expressions need data), plus builder scenarios for the
parts of the document the corpus does not reach: a suspended instance's held triggers,
a child's parent link, the compensation ledger, a multi-instance body, a timer cycle, a
job in its retry backoff.

``python -m tests.core.checkpoint_corpus`` rewrites ``data/stored_checkpoints.json``;
that file holds documents as an earlier dormant stored them, so regenerate it only
when a new shape is worth pinning, never to make a failing test pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.builder import ProcessBuilder, compensate, timer
from dormant.engine_core.checkpoint import encode
from dormant.engine_core.errors import DormantError
from dormant.engine_core.model import LoopSpec, TimerKind
from dormant.engine_core.services import Services
from dormant.engine_core.triggers import Resume, Start, Suspend, TaskCompleted
from tests.conformance import CAMUNDA8
from tests.core.enginekit import T0, Run

STORED = Path(__file__).resolve().parent / "data" / "stored_checkpoints.json"

__all__ = ["STORED", "live_documents"]


def _conformance() -> Iterator[tuple[str, Run]]:
    for path in sorted(CAMUNDA8.glob("*.bpmn")):
        try:
            definitions = read_bpmn(path.read_bytes())
        except DormantError:
            continue
        for definition in definitions:
            run = Run(definition, instance_id=f"i-{definition.key}")
            try:
                run.send(Start(variables={}))
            except DormantError:
                continue
            yield f"{path.stem}/{definition.key}", run


def _scenarios() -> Iterator[tuple[str, Run]]:
    b = ProcessBuilder("held")
    b.start_event("s").user_task("u").user_task("v").end_event("e")
    b.sequence("s", "u", "v", "e")
    run = Run(b.build())
    run.start({"n": 1, "nested": {"a": [1, 2.5, None, "x"]}})
    run.send(Suspend())
    run.advance(minutes=1).send(TaskCompleted(wait_id=run.wait("u").id, variables={"k": True}))
    yield "suspended-with-held-trigger", run
    run = Run(b.build())
    run.start()
    run.send(Suspend())
    run.send(Resume())
    yield "resumed", run

    b = ProcessBuilder("child")
    b.start_event("s").user_task("u").end_event("e")
    b.sequence("s", "u", "e")
    run = Run(b.build(), parent={"instance_id": "p1", "wait_id": "w3", "root_instance_id": "p1"})
    run.start({"x": "y"}, business_key="order-7")
    yield "child-with-parent", run

    b = ProcessBuilder("comp")
    b.start_event("s")
    b.service_task("hotel", job_type="book-hotel")
    b.boundary_event("hotel_comp", "hotel", compensate(), compensation_handler="undo_hotel")
    b.service_task("undo_hotel", job_type="undo-hotel", is_for_compensation=True)
    b.user_task("after").intermediate_throw_event("throw", compensate()).end_event("e")
    b.sequence("s", "hotel", "after", "throw", "e")
    run = Run(b.build())
    run.start()
    run.complete_job("hotel", booked="h-1")
    yield "compensation-ledger", run

    b = ProcessBuilder("mi")
    spec = LoopSpec(
        sequential=False,
        input_collection="=items",
        input_element="item",
        output_collection="results",
        output_element="=done",
    )
    b.start_event("s").service_task("each", job_type="ship", loop=spec).end_event("e")
    b.sequence("s", "each", "e")
    run = Run(b.build())
    run.start({"items": [1, 2, 3]})
    yield "multi-instance", run

    b = ProcessBuilder("cycle")
    b.start_event("s").user_task("u").end_event("e")
    b.boundary_event("b", "u", timer("R3/PT10M", TimerKind.CYCLE), cancel_activity=False)
    b.user_task("side").end_event("e2")
    b.sequence("s", "u", "e")
    b.sequence("b", "side", "e2")
    run = Run(b.build())
    run.start()
    run.fire("b")
    yield "timer-cycle", run

    b = ProcessBuilder("retry")
    b.start_event("s").service_task("job", job_type="flaky", job_retries="3").end_event("e")
    b.sequence("s", "job", "e")
    run = Run(b.build(), services=Services())
    run.start()
    run.fail_job("job")
    yield "job-retry-backoff", run
    run2 = Run(b.build(), now=T0)
    run2.start({"order": {"id": 7, "lines": [{"sku": "a", "qty": 2}]}})
    for _ in range(4):
        if not run2.waits("job", "job"):
            break
        run2.fail_job("job")
    yield "job-incident", run2


def live_documents() -> dict[str, str]:
    """Each scenario's current checkpoint, as the Store would write it (JSON text)."""
    docs: dict[str, str] = {}
    for name, run in [*_conformance(), *_scenarios()]:
        docs[name] = json.dumps(encode(run.cp))
    return docs


if __name__ == "__main__":
    STORED.write_text(json.dumps(live_documents(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {STORED}")

#!/usr/bin/env python
"""The pure step: dormant's decode → apply → encode beside SpiffWorkflow 3.2's
deserialize → step → serialize, on the SAME BPMN XML (bench/models.py).

Steps measured, each from a stored JSON string to a stored JSON string:

* linear model (start → user task → service task → timer → end):
  1. complete the user task, 2. complete the service task's job, 3. fire the timer;
* loop model (a user task in a loop): complete the user task (and loop back).

dormant's ``apply`` is given the stored JSON text: it decodes it in one pass (validated
straight from the text) into its private working state, and ``encode_json`` writes the
new state in one pass, as Spiff's ``deserialize_json`` and
``serialize_json`` do. The Store's path (persistence/store.py) is that step plus what
the hold and incident projections diff against: the state before the step, its waits
and incidents copied from the step's one decode (``apply(keep_holds=True)``; until
2026-12-01 evening read from the same text again by ``decode_holds``). It is measured beside,
with the same target; the Store's former path (a dict each way, psycopg parsing the
JSONB, SQLAlchemy dumping it, and a decoded ``Checkpoint`` that ``apply`` copied) is
printed for reference.

Spiff's service task waits in STARTED (completed with ``task.complete()``, the analogue
of a job result); its timer is fired by moving the stored due time into the past. Both
engines pay JSON text parsing and dumping, as each does in a real store. Rounds
alternate the engines; the median round is reported. Times are process CPU time
(``time.process_time``): the step is pure computation, and on a shared machine CPU
time does not count the moments the process waits for a core, which wall time would
charge to whichever engine happened to be running.

    .venv/bin/python bench/bench_step.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.models import LINEAR, LOOP
from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.checkpoint import decode, encode, encode_json
from dormant.engine_core.engine import apply, new_checkpoint
from dormant.engine_core.model import ProcessDefinition
from dormant.engine_core.triggers import JobCompleted, Start, TaskCompleted, TimerFired, Trigger

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


# -- dormant --------------------------------------------------------------------------


def dormant_step(defn: ProcessDefinition, stored: str, trigger: Trigger, now: datetime) -> str:
    """``apply`` given the stored text decodes it (one pass) into its private working
    state; the new state is written in one pass."""
    return encode_json(apply(defn, stored, trigger, now=now).checkpoint)


def dormant_step_store(
    defn: ProcessDefinition, stored: str, trigger: Trigger, now: datetime
) -> str:
    """The Store's path (``Store._apply``): the step on the stored text, keeping the
    state before it for the hold diff (copied from the step's one decode)."""
    step = apply(defn, stored, trigger, now=now, keep_holds=True)
    assert step.holds_before is not None
    return encode_json(step.checkpoint)


def dormant_step_dicts(
    defn: ProcessDefinition, stored: str, trigger: Trigger, now: datetime
) -> str:
    """The Store's former path: the JSON parsed to a dict first, a decoded
    ``Checkpoint`` copied by ``apply``, the document dumped from a dict."""
    step = apply(defn, decode(json.loads(stored)), trigger, now=now)
    return json.dumps(encode(step.checkpoint))


def dormant_start(defn: ProcessDefinition, variables: dict[str, Any]) -> str:
    cp = new_checkpoint(defn, "0b5e7c1e-6a1d-4f7e-9d7a-3c2b1a0f9e8d", 1, T0)
    return json.dumps(encode(apply(defn, cp, Start(variables=variables), now=T0).checkpoint))


def only_wait(stored: str) -> Any:
    (wait,) = decode(stored).waits.values()
    return wait


def dormant_linear(step: Any = None) -> list[tuple[str, Any]]:
    """(name, zero-arg step) for each of the linear model's three triggers; ``step`` is
    the decode → apply → encode function measured (default ``dormant_step``)."""
    run = step or dormant_step
    defn = read_bpmn(LINEAR)[0]
    s0 = dormant_start(defn, {"orderId": "o-1", "amount": 42})
    w_task = only_wait(s0)
    tr1 = TaskCompleted(wait_id=w_task.id, variables={"approved": True})
    s1 = dormant_step(defn, s0, tr1, T0)
    w_job = only_wait(s1)
    tr2 = JobCompleted(wait_id=w_job.id, variables={"charged": True})
    s2 = dormant_step(defn, s1, tr2, T0)
    w_timer = only_wait(s2)
    later = w_timer.due_at + timedelta(seconds=1)
    tr3 = TimerFired(wait_id=w_timer.id)
    assert json.loads(dormant_step(defn, s2, tr3, later))["status"] == "completed"
    return [
        ("complete user task", lambda: run(defn, s0, tr1, T0)),
        ("job result", lambda: run(defn, s1, tr2, T0)),
        ("timer fired", lambda: run(defn, s2, tr3, later)),
    ]


def dormant_loop(step: Any = None) -> Any:
    run = step or dormant_step
    defn = read_bpmn(LOOP)[0]
    s0 = dormant_start(defn, {"again": True, "orderId": "o-1", "amount": 42})
    tr = TaskCompleted(wait_id=only_wait(s0).id, variables={"again": True})
    return lambda: run(defn, s0, tr, T0)


# -- SpiffWorkflow 3.2 ----------------------------------------------------------------


class Spiff:
    """Parser, script engine and serializer set up once, as an application would."""

    def __init__(self) -> None:
        from lxml import etree
        from SpiffWorkflow.bpmn.parser.BpmnParser import BpmnParser
        from SpiffWorkflow.bpmn.script_engine import PythonScriptEngine
        from SpiffWorkflow.bpmn.serializer import BpmnWorkflowSerializer
        from SpiffWorkflow.bpmn.serializer.config import DEFAULT_CONFIG
        from SpiffWorkflow.bpmn.serializer.default.task_spec import BpmnTaskSpecConverter
        from SpiffWorkflow.bpmn.specs.defaults import ServiceTask
        from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
        from SpiffWorkflow.util.task import TaskState

        class FeelishEngine(PythonScriptEngine):
            """Reads ``=expr`` as Python ``expr``: the models' expressions are both."""

            def evaluate(self, task: Any, expression: str, external_context: Any = None) -> Any:
                if expression.startswith("="):
                    expression = expression[1:]
                return super().evaluate(task, expression, external_context)

        self.etree = etree
        self.BpmnParser = BpmnParser
        self.BpmnWorkflow = BpmnWorkflow
        self.TaskState = TaskState
        self.engine = FeelishEngine()
        config = dict(DEFAULT_CONFIG)
        # The plain BPMN serializer has no converter for the base ServiceTask spec
        # (Spiff's own dialects bring theirs); the generic task converter is all it needs.
        config[ServiceTask] = BpmnTaskSpecConverter
        self.serializer = BpmnWorkflowSerializer(BpmnWorkflowSerializer.configure(config))

    def spec(self, xml: str, process_id: str) -> Any:
        parser = self.BpmnParser()
        parser.add_bpmn_xml(self.etree.fromstring(xml.encode()))
        return parser.get_spec(process_id)

    def start(self, spec: Any, variables: dict[str, Any]) -> str:
        wf = self.BpmnWorkflow(spec, script_engine=self.engine)
        wf.data.update(variables)
        wf.do_engine_steps()
        return str(self.serializer.serialize_json(wf))

    def restore(self, stored: str) -> Any:
        wf = self.serializer.deserialize_json(stored)
        wf.script_engine = self.engine
        return wf

    def complete_user_task(self, stored: str, variables: dict[str, Any]) -> str:
        wf = self.restore(stored)
        (task,) = wf.get_tasks(state=self.TaskState.READY, manual=True)
        task.data.update(variables)
        task.run()
        wf.do_engine_steps()
        return str(self.serializer.serialize_json(wf))

    def complete_service_task(self, stored: str, variables: dict[str, Any]) -> str:
        wf = self.restore(stored)
        (task,) = wf.get_tasks(state=self.TaskState.STARTED)
        task.data.update(variables)
        task.complete()
        wf.do_engine_steps()
        return str(self.serializer.serialize_json(wf))

    def fire_timer(self, stored: str) -> str:
        wf = self.restore(stored)
        (task,) = wf.get_tasks(state=self.TaskState.WAITING)
        task._set_internal_data(event_value=(datetime.now(UTC) - timedelta(seconds=1)).isoformat())
        wf.refresh_waiting_tasks()
        wf.do_engine_steps()
        return str(self.serializer.serialize_json(wf))


def spiff_linear(sp: Spiff) -> tuple[list[tuple[str, Any]], str]:
    spec = sp.spec(LINEAR, "bench_linear")
    s0 = sp.start(spec, {"orderId": "o-1", "amount": 42})
    s1 = sp.complete_user_task(s0, {"approved": True})
    s2 = sp.complete_service_task(s1, {"charged": True})
    done = sp.restore(sp.fire_timer(s2))
    assert done.is_completed(), "Spiff linear model did not complete"
    return [
        ("complete user task", lambda: sp.complete_user_task(s0, {"approved": True})),
        ("job result", lambda: sp.complete_service_task(s1, {"charged": True})),
        ("timer fired", lambda: sp.fire_timer(s2)),
    ], s0


def spiff_loop(sp: Spiff) -> Any:
    spec = sp.spec(LOOP, "bench_loop")
    s0 = sp.start(spec, {"again": True, "orderId": "o-1", "amount": 42})
    return lambda: sp.complete_user_task(s0, {"again": True})


# -- measurement ----------------------------------------------------------------------


def per_call_us(fn: Any, reps: int) -> float:
    import time

    t0 = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - t0) / reps * 1e6


def compare(
    name: str, ours: Any, theirs: Any, rounds: int, reps_ours: int, reps_theirs: int
) -> tuple[float, float]:
    ours(), theirs()  # warm up
    a: list[float] = []
    b: list[float] = []
    for _ in range(rounds):
        a.append(per_call_us(ours, reps_ours))
        b.append(per_call_us(theirs, reps_theirs))
    da, sb = common.median(a), common.median(b)
    common.line(f"  {name:<22}", f"dormant {da:8.1f} us   spiff {sb:8.1f} us   ({sb / da:5.1f}x)")
    return da, sb


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a short run (fewer repetitions)")
    args = ap.parse_args()
    rounds, reps_d, reps_s = (3, 100, 20) if args.quick else (7, 500, 100)

    common.header("bench_step: pure step, dormant vs SpiffWorkflow 3.2 (same BPMN XML)")
    sp = Spiff()
    d_steps = dormant_linear()
    s_steps, spiff_waiting = spiff_linear(sp)

    common.line("linear model (start -> user task -> service task -> timer -> end), per step", "")
    d_total = s_total = 0.0
    for (name, d_fn), (_, s_fn) in zip(d_steps, s_steps, strict=True):
        da, sb = compare(name, d_fn, s_fn, rounds, reps_d, reps_s)
        d_total += da
        s_total += sb
    d_mean, s_mean = d_total / len(d_steps), s_total / len(s_steps)
    common.line("  mean of the three steps", f"dormant {d_mean:.1f} us   spiff {s_mean:.1f} us")
    common.line("loop model (a user task in a loop), per step", "")
    dl, sl = compare("complete user task", dormant_loop(), spiff_loop(sp), rounds, reps_d, reps_s)

    def store_path(step: Any) -> list[float]:
        steps = [*dormant_linear(step), ("loop", dormant_loop(step))]
        return [common.median([per_call_us(f, reps_d) for _ in range(rounds)]) for _, f in steps]

    store_us = store_path(dormant_step_store)
    store_linear, store_loop = s_mean / (sum(store_us[:3]) / 3), sl / store_us[3]
    common.line(
        "the Store's path (text each way, holds diffed), per step",
        "  ".join(f"{us:.1f} us" for us in store_us)
        + f"   (spiff / it: linear {store_linear:.1f}x, loop {store_loop:.1f}x)",
    )
    dicts_us = store_path(dormant_step_dicts)
    common.line(
        "(reference) the Store's former dict path, per step",
        "  ".join(f"{us:.1f} us" for us in dicts_us)
        + f"   (spiff / it: linear {s_mean / (sum(dicts_us[:3]) / 3):.1f}x, loop {sl / dicts_us[3]:.1f}x)",
    )

    # Sizes: the instance waiting at its user task, as each engine stores it.
    defn = read_bpmn(LINEAR)[0]
    ours = dormant_start(defn, {"orderId": "o-1", "amount": 42})
    ours_compact = json.dumps(json.loads(ours), separators=(",", ":"))
    theirs_compact = json.dumps(json.loads(spiff_waiting), separators=(",", ":"))
    common.line(
        "waiting checkpoint (linear model, at the user task)",
        f"dormant {len(ours)} B, spiff {len(spiff_waiting)} B (compact JSON: {len(ours_compact)} B vs {len(theirs_compact)} B)",
    )

    print()
    common.ratio_line(
        "speed-up, linear model (spiff / dormant, mean step)",
        s_mean / d_mean,
        ">=",
        10.0,
        "{:.1f}x",
    )
    common.ratio_line(
        "speed-up, loop model (spiff / dormant, step)", sl / dl, ">=", 10.0, "{:.1f}x"
    )
    common.ratio_line(
        "speed-up, the Store's path, linear model (mean step)", store_linear, ">=", 10.0, "{:.1f}x"
    )
    common.ratio_line(
        "speed-up, the Store's path, loop model (step)", store_loop, ">=", 10.0, "{:.1f}x"
    )
    common.ratio_line(
        "checkpoint size dormant / spiff (waiting at user task)",
        len(ours) / len(spiff_waiting),
        "<=",
        0.25,
        "{:.3f}",
    )
    return common.summary()


if __name__ == "__main__":
    sys.exit(main())

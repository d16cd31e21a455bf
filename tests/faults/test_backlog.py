"""Backlog recovery: instance starts queued while every worker is down, each starting
a fan-out (one start → 50 parallel jobs), then workers come back. Every instance
completes; the recovery rate (triggers applied per second) is printed; job runs are
counted per idempotency key, so a run beyond the at-least-once redeliveries shows.

Bounded: 40 instances x 50 jobs = 2,040 triggers (40 starts + 2,000 job results),
about a minute on a loaded CI machine. ``DORMANT_FAULT_BACKLOG_INSTANCES`` raises it
(400 is the 20,000-trigger run: 20,400 triggers drained in 256 s, once, on a shared
2-core machine).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from tests.faults.fault_jobs import runs
from tests.faults.kit import included_worker, report_line
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import end, model, start

pytestmark = [pytest.mark.faults, pytest.mark.integration]

FAN_OUT = 50
INSTANCES = int(os.environ.get("DORMANT_FAULT_BACKLOG_INSTANCES", "40"))


def fan_out_model(key: str) -> str:
    nodes = (
        start()
        + '<bpmn:serviceTask id="each"><bpmn:extensionElements>'
        + '<zeebe:taskDefinition type="fault-record"/></bpmn:extensionElements>'
        + '<bpmn:multiInstanceLoopCharacteristics isSequential="false">'
        + '<bpmn:extensionElements><zeebe:loopCharacteristics inputCollection="=items" '
        + 'inputElement="item"/></bpmn:extensionElements>'
        + "</bpmn:multiInstanceLoopCharacteristics></bpmn:serviceTask>"
        + end()
    )
    return model(key, nodes, [("start", "each"), ("each", "end")])


def completed(stack: Stack, key: str) -> int:
    return sum(1 for i in stack.client.instances(key=key) if i.status == "completed")


def test_a_backlog_queued_with_every_worker_down_drains_once(fstack: Stack, tmp_path: Path) -> None:
    s = fstack
    log = tmp_path / "jobs.log"
    s.env["DORMANT_TEST_JOB_LOG"] = str(log)
    k = f"fb_{uuid.uuid4().hex[:6]}"
    s.client.deploy(fan_out_model(k))
    items = list(range(FAN_OUT))
    ids = [s.client.start(k, {"items": items}) for _ in range(INSTANCES)]  # nobody consumes
    assert completed(s, k) == 0
    t0 = time.monotonic()
    included_worker(s), included_worker(s)
    s.beat()
    wait_for(
        lambda: completed(s, k) == INSTANCES,
        60 + INSTANCES * 3,
        0.5,
        f"{INSTANCES} fan-out instances completed",
    )
    elapsed = time.monotonic() - t0
    time.sleep(3.0)  # a late duplicate would land now
    per_key = runs(log)
    triggers = INSTANCES * (FAN_OUT + 1)
    done = completed(s, k)
    reruns = sum(n - 1 for n in per_key.values())
    c = {
        "sent": triggers,
        "applied": INSTANCES + len(per_key) if done == INSTANCES else done,
        "duplicates": 0,
        "lost": triggers - (INSTANCES + len(per_key)),
        "facts_disagree": 0,
    }
    report_line(
        f"backlog {INSTANCES} x {FAN_OUT} jobs, workers down",
        c,
        elapsed,
        f" rate={triggers / elapsed:.0f} triggers/s job_runs={sum(per_key.values())}"
        f" reruns_by_idempotency_key={reruns}",
    )
    assert len(per_key) == INSTANCES * FAN_OUT
    assert len(ids) == INSTANCES

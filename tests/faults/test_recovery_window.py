"""Worst-case recovery is bounded by configuration, not by the job timeout.

A worker is SIGKILLed (its whole process group) at an exact point of a job's path, by
a kill point in tests/faults/fault_jobs.py that the worker's environment arms:

* ``dispatch-committed`` — the trigger that dispatches the job committed, its outbox
  row is not published (shown: the row's ``published_at`` is still empty after the
  kill): the sweep publishes it (``DORMANT_OUTBOX_SWEEP_AFTER_SECONDS``, 3 s here);
* ``job-done`` — the job ran, its result was not applied: the broker hands the
  unacknowledged job to another worker (``DORMANT_REDIS_VISIBILITY_TIMEOUT``, 6 s here)
  and it runs again — the one at-least-once re-run, visible by its idempotency key;
* ``result-applied`` — the result committed, the job message not acknowledged: the
  same redelivery, a second run, its result dropped as a duplicate.

The job timeout stays at its default (300 s): every idempotency key seen ends in
attempt 1, so no recovery came from a timeout's re-dispatch. Bounded: 4 instances per
point, ~15 s per point.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.faults.fault_jobs import runs
from tests.faults.kit import included_worker, report_line
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import end, engine_of, model, start

pytestmark = [pytest.mark.faults, pytest.mark.integration]

N = 4
VISIBILITY = "6"


def job_model(key: str) -> str:
    nodes = (
        start()
        + '<bpmn:serviceTask id="job"><bpmn:extensionElements>'
        + '<zeebe:taskDefinition type="fault-record"/></bpmn:extensionElements>'
        + "</bpmn:serviceTask>"
        + end()
    )
    return model(key, nodes, [("start", "job"), ("job", "end")])


def unpublished_dispatches(stack: Stack) -> int:
    with engine_of(stack).connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM outbox WHERE published_at IS NULL")
            ).scalar_one()
        )


def _every_completed(s: Stack, ids: list[str]) -> None:
    wait_for(
        lambda: all(s.client.instance(i).status == "completed" for i in ids),
        90,
        0.2,
        "every instance completed",
    )


@pytest.mark.parametrize("point", ["dispatch-committed", "job-done", "result-applied"])
def test_a_worker_killed_inside_a_jobs_path_recovers_within_the_window(
    fstack: Stack, tmp_path: Path, point: str
) -> None:
    s = fstack
    log = tmp_path / f"jobs-{uuid.uuid4().hex[:6]}.log"
    s.env.update(DORMANT_REDIS_VISIBILITY_TIMEOUT=VISIBILITY, DORMANT_TEST_JOB_LOG=str(log))
    s.beat()
    # One process in the victim's pool: with one message in hand and a prefetch of one,
    # its main process is not popping a second job off Redis when the kill lands. A
    # message popped but not yet recorded as unacknowledged (kombu's Redis transport
    # records it a moment after the pop) would die with the process and come back only
    # by the job timeout (docs/waits.md): a separate, narrower window than the ones
    # this test bounds.
    victim = included_worker(s, concurrency=1, DORMANT_TEST_KILL_AT=point)
    k = f"fw_{uuid.uuid4().hex[:6]}"
    s.client.deploy(job_model(k))
    ids = [s.client.start(k, {}) for _ in range(N)]
    marker = Path(str(log) + f".killed-{point}")
    wait_for(marker.exists, 60, 0.05, f"the kill at {point}")
    t_kill = time.monotonic()
    assert victim.popen is not None
    wait_for(lambda: victim.popen.poll() is not None, 10, 0.05, "the worker dead")
    landed = unpublished_dispatches(s) if point == "dispatch-committed" else -1
    if point == "dispatch-committed":
        assert landed >= 1, "the kill did not land between the commit and the publish"
    included_worker(s)
    _every_completed(s, ids)
    if point != "dispatch-committed":
        # After ``result-applied`` the instance is complete at once; what must come
        # back is the unacknowledged job message (its loss would leave no trace but a
        # job that never reruns): wait for its second run.
        wait_for(
            lambda: any(n > 1 for n in runs(log).values()), 60, 0.2, "the killed job run again"
        )
    recovery = time.monotonic() - t_kill
    time.sleep(3.0)  # a late duplicate would land now
    per_key = runs(log)
    assert all(key.endswith(":1") for key in per_key), per_key  # no timeout re-dispatch
    reruns = sum(n - 1 for n in per_key.values())
    completed = sum(1 for i in ids if s.client.instance(i).status == "completed")
    c = {
        "sent": N,
        "applied": completed,
        "duplicates": 0,  # a second result of one attempt is dropped by its trigger id
        "lost": N - completed,
        "facts_disagree": 0,
    }
    report_line(
        f"worker SIGKILL at {point}",
        c,
        recovery,
        f" job_runs={sum(per_key.values())} at_least_once_reruns={reruns}"
        + (f" unpublished_at_kill={landed}" if landed >= 0 else ""),
    )
    assert len(per_key) == N, per_key
    if point != "dispatch-committed":
        assert reruns >= 1, "the killed attempt was not run again"


def test_a_worker_killed_inside_an_eager_job_loses_no_job(fstack: Stack, tmp_path: Path) -> None:
    """An eager job (run in place by the worker whose start dispatched it) leaves no job
    message behind when its worker dies. A start's first job runs before the start is
    written, so the start itself comes back (the inbox sweep sends it again, Redis
    restores it after the visibility timeout) and runs the job again; a redelivered
    start writes its job's wait first, and that job comes back from the sweep (its
    outbox row not yet deleted) or from its timeout. Either way every instance
    completes."""
    s = fstack
    log = tmp_path / f"jobs-{uuid.uuid4().hex[:6]}.log"
    eager = '{"fault-record": {"eager": true, "timeout_seconds": 4}}'
    s.env.update(
        DORMANT_REDIS_VISIBILITY_TIMEOUT=VISIBILITY,
        DORMANT_TEST_JOB_LOG=str(log),
        DORMANT_JOB_TYPES=eager,
    )
    s.beat()
    victim = included_worker(s, concurrency=1, DORMANT_TEST_KILL_AT="job-done")
    k = f"fe_{uuid.uuid4().hex[:6]}"
    s.client.deploy(job_model(k))
    ids = [s.client.start(k, {}) for _ in range(N)]
    wait_for(Path(str(log) + ".killed-job-done").exists, 60, 0.05, "the kill in the job")
    t_kill = time.monotonic()
    assert victim.popen is not None
    wait_for(lambda: victim.popen.poll() is not None, 10, 0.05, "the worker dead")
    assert "job run in place" in victim.text()  # the killed job ran in the start's task
    included_worker(s)
    _every_completed(s, ids)
    recovery = time.monotonic() - t_kill
    per_key = runs(log)
    by_instance = {key.split(":", 1)[0] for key in per_key}
    reruns = sum(per_key.values()) - N
    report_line(
        "worker SIGKILL inside an eager job",
        {"sent": N, "applied": N, "duplicates": 0, "lost": 0, "facts_disagree": 0},
        recovery,
        f" job_runs={sum(per_key.values())} reruns={reruns}",
    )
    assert by_instance == set(ids), per_key  # every instance's job ran
    assert reruns >= 1, "the killed job was not run again"

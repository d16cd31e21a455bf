"""The worker survives its jobs (issue 24, row 7; docs/jobs.md "What a job may
return"): a job that runs out of memory, or returns what cannot be encoded, is a job
failure whose incident names the cause, and the worker that ran it keeps running jobs.
The pool process a job ran out of memory in is replaced (tasks/job_task.py), without a
lost worker: the worker's process stays, that child exits and a fresh one serves on.

On PostgreSQL + Redis with a real ``dormant worker``, and on the embedded default with a
real ``dormant dev`` (worker and beat in one process), each loading
tests/faults/fault_jobs.py; the job types are sent on ``job.<type>`` to the ``dormant``
queue that process reads.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.faults.kit import included_worker
from tests.integration.conftest import JOBS_MODULE, WORKER_READY, Proc, Stack, _urls, wait_for
from tests.integration.test_incidents import flaky, linear, the_incident

pytestmark = pytest.mark.integration

CASES = {
    # model key: (job type, its ``what`` variable, expected words of the incident's cause)
    "surv-set": ("fault-unencodable", "set", "is a set, not a JSON value"),
    "surv-big": ("fault-unencodable", "big", "more than the limit"),
    "surv-object": ("fault-unencodable", "object", "is a object, not a JSON value"),
    "surv-bare": ("fault-unencodable", "bare", "more than the limit"),
    "surv-oom": ("fault-oom", "-", "ran out of memory"),
}


def test_memory_and_unencodable_results_are_job_failures_and_the_worker_stays_up(
    fstack: Stack, tmp_path: Path
) -> None:
    log = tmp_path / "jobs.log"
    worker = included_worker(fstack, DORMANT_TEST_JOB_LOG=str(log))
    fstack.beat()  # fires the engine's retry of the job that ran out of memory
    _each_case_is_an_incident_and_the_process_runs_on(fstack, worker)
    _each_pool_process_that_ran_out_of_memory_is_replaced(log, worker)


@pytest.mark.timeout(300)
def test_dormant_dev_on_the_embedded_default_survives_the_same_jobs(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with _urls("embedded", tmp_path, request) as urls:
        stack = Stack(*urls, tmp_path)
        log = tmp_path / "jobs.log"
        stack.env["DORMANT_TEST_JOB_LOG"] = str(log)
        try:
            dev = Proc(
                "dev",
                stack.dormant(
                    "dev",
                    "--include",
                    JOBS_MODULE + ",tests.faults.fault_jobs",
                    "--concurrency",
                    "1",
                ),
                stack.env,
                tmp_path,
            )
            stack.procs.append(dev)
            dev.start(ready=WORKER_READY)
            _each_case_is_an_incident_and_the_process_runs_on(stack, dev)
            _each_pool_process_that_ran_out_of_memory_is_replaced(log, dev)
        finally:
            stack.close()


def _each_case_is_an_incident_and_the_process_runs_on(stack: Stack, proc: Proc) -> None:
    c = stack.client
    for key, (job_type, _, _) in CASES.items():
        # The memory failure gets two attempts: the engine's usual retry runs between.
        retries = "2" if job_type == "fault-oom" else "1"
        c.deploy(linear(key, flaky(job_type=job_type, retries=retries)))
    c.deploy(linear("surv-after", flaky(job_type="fault-record")))

    started = {key: c.start(key, {"what": what}) for key, (_, what, _) in CASES.items()}
    for key, iid in started.items():
        job_type, _, words = CASES[key]
        expected = "JobOutOfMemory" if job_type == "fault-oom" else "UnencodableJobResult"
        inc = the_incident(stack, iid, state="open")
        assert inc.cause_class == expected, (key, inc.cause_class, inc.cause)
        assert words in inc.cause, (key, inc.cause)
        tries = 2 if job_type == "fault-oom" else 1
        assert f"failed after {tries} attempt(s)" in inc.cause, (key, inc.cause)

    # The same process, never restarted, still runs jobs to completion.
    assert proc.popen is not None and proc.popen.poll() is None, proc.tail()
    after = c.start("surv-after", {})
    stack.wait_status(after, "completed")
    assert proc.popen.poll() is None, proc.tail()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _each_pool_process_that_ran_out_of_memory_is_replaced(log: Path, proc: Proc) -> None:
    pids = {int(p) for p in Path(str(log) + ".oom-pids").read_text().split()}
    assert len(pids) == 2, pids  # two attempts, each in a process of its own
    assert proc.popen is not None and proc.popen.pid not in pids
    wait_for(lambda: all(_gone(p) for p in pids), 60, 0.2, f"pool processes {pids} replaced")
    text = proc.text()
    assert "exits after reporting it and is replaced" in text, proc.tail()
    assert "WorkerLostError" not in text, proc.tail()
    assert proc.popen.poll() is None, proc.tail()

"""A pool process that dies mid-batch gives the triggers it took back at once, on Redis
too (tasks/drain.py, "What a crash costs"; issue 24: one poison trigger never stalls
the others).

A poison trigger is queued first, twelve one-step starts behind it, while no worker
runs; then a worker starts. The poison's task takes the twelve into its batch
(persistence/savepoints.py) and dies, and the batch's transaction with it. Redis gives
unacknowledged messages back only after its visibility timeout, set long here (two
minutes), so the twelve complete well inside it only if they are given back:

* a start that hangs past the hard time limit: Celery ends its pool process with
  SIGTERM, then SIGKILL; on the SIGTERM the process gives back what it holds;
* a message whose apply SIGKILLs its own pool process (the OOM killer's stand-in): no
  code of it runs, so the pool process that replaces it gives back what the dead one
  listed (``restore_orphans``).
"""

from __future__ import annotations

import time

import pytest

from tests.faults.kit import included_worker, instance_status
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import end, model, script, start

pytestmark = [pytest.mark.faults, pytest.mark.integration]

VISIBILITY = 120
CANARIES = 12
KEY = "held"


def _canaries_complete_behind(s: Stack, send_poison: object) -> str:
    """Queue the poison (``send_poison(stack)``) and the canaries, start a worker, wait
    for every canary well inside the visibility timeout; the worker's log."""
    s.env["DORMANT_REDIS_VISIBILITY_TIMEOUT"] = str(VISIBILITY)
    s.env["DORMANT_TRIGGER_SOFT_TIME_LIMIT_SECONDS"] = "3"
    s.env["DORMANT_TRIGGER_TIME_LIMIT_SECONDS"] = "4"
    fault = s.tmp / "poison-on"
    fault.touch()
    flows = [("start", "calc"), ("calc", "end")]
    s.client.deploy(model(KEY, start() + script("calc", "=1 + 1", "r") + end(), flows))
    assert callable(send_poison)
    send_poison(s)  # first in the queue: its task runs the batch
    canaries = [s.client.start(KEY, {"n": n}) for n in range(CANARIES)]
    began = time.monotonic()
    worker = included_worker(s, concurrency=1, DORMANT_TEST_POISON=str(fault))

    def completed() -> int:
        return sum(1 for iid in canaries if instance_status(s, iid) == "completed")

    try:
        wait_for(lambda: completed() == CANARIES, VISIBILITY / 3, 0.5, "every canary completed")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {completed()} of {CANARIES}\n{s.diagnostics()}") from None
    assert time.monotonic() - began < VISIBILITY / 3
    return worker.text()


def test_a_batch_ended_by_the_hard_time_limit_gives_its_triggers_back(fstack: Stack) -> None:
    log = _canaries_complete_behind(fstack, lambda s: s.client.start(KEY, {"poison": "hang"}))
    assert "Hard time limit" in log, log[-3000:]  # the batch's process was ended


def test_a_batch_whose_process_was_killed_is_given_back_by_the_next(fstack: Stack) -> None:
    log = _canaries_complete_behind(
        fstack, lambda s: s.client.send_message("nobody-waits", "k", {"poison": "kill"})
    )
    assert "signal 9 (SIGKILL)" in log, log[-3000:]
    assert "which ended mid-batch" in log, log[-3000:]  # given back by its successor

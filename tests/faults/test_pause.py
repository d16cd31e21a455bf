"""Process pause: a worker SIGSTOPped while it applies triggers (it holds row locks and
unacknowledged messages) for longer than the broker's redelivery window, then
SIGCONT; beat and a claiming worker SIGSTOPped while timers come due.

What must hold: nothing applied twice (the paused worker's late commit against the
redelivered copy: trigger ids), nothing lost, and the other instances keep flowing on
the second worker while the first is frozen.

Bounded: the Redis visibility timeout is shortened to 6 s
(``DORMANT_REDIS_VISIBILITY_TIMEOUT``) so a 12 s pause outlasts it; 12 instances x 20
messages, 40 timers; each test takes ~40 s.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.faults.kit import (
    applied_total,
    counts,
    freeze,
    loop_instances,
    report_line,
    settle,
    thaw,
)
from tests.faults.test_faults import Sender, all_still_held, timer_model
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import holds

pytestmark = [pytest.mark.faults, pytest.mark.integration]

VISIBILITY = 6.0
PAUSE = 12.0


def test_sigstop_a_worker_past_the_redelivery_window(fstack: Stack) -> None:
    s = fstack
    s.env["DORMANT_REDIS_VISIBILITY_TIMEOUT"] = str(VISIBILITY)
    paused, other = s.worker(), s.worker()
    s.beat()
    name, ids = loop_instances(s, 12)
    sender = Sender(s.client, name, list(ids), 20)
    sender.thread.start()
    wait_for(lambda: sender.progress() >= 60, 60, 0.05, "60 sent")
    before = dict(sender.sent)
    t_freeze = time.monotonic()
    freeze(paused)
    at_freeze = applied_total(s, ids, "n")
    time.sleep(PAUSE)
    flowed = applied_total(s, ids, "n") - at_freeze
    thaw(paused)
    # Recovery: from the freeze until everything sent before it is applied.
    wait_for(
        lambda: all(
            int(s.client.instance(iid).variables.get("n", 0)) >= before[k] for k, iid in ids.items()
        ),
        90,
        0.2,
        "everything sent before the pause applied",
    )
    recovery = time.monotonic() - t_freeze
    sender.thread.join(120)
    settle(s, ids, sender.sent, "n")
    c = counts(s, ids, sender.sent, "n", "message")
    report_line(
        "worker SIGSTOP 12s > visibility 6s",
        c,
        recovery,
        f" applied_while_paused={flowed}",
    )
    assert flowed > 0, "nothing was applied while one of two workers was paused"
    all_still_held(s, ids)
    assert other.popen is not None and other.popen.poll() is None


def test_sigstop_beat_and_the_claiming_worker_while_timers_come_due(fstack: Stack) -> None:
    """Beat frozen: no scans; on SIGCONT it rings again. A worker frozen after claiming
    deadlines: its claims expire (4 s here) and the other worker claims and fires them;
    when it wakes, its own late fires find the trigger id applied."""
    s = fstack
    s.env["DORMANT_REDIS_VISIBILITY_TIMEOUT"] = str(VISIBILITY)
    first, second = s.worker(), s.worker()
    beat = s.beat()
    k = f"fz_{uuid.uuid4().hex[:6]}"
    s.client.deploy(timer_model(k, f"after-{k}", "PT6S"))
    ids = {f"{k}-{i}": s.client.start(k, {"id": f"{k}-{i}", "fired": 0}) for i in range(40)}
    t0 = time.monotonic()
    for iid in ids.values():
        wait_for(lambda iid=iid: holds(s, iid)["deadlines"] == 1, 30, what="timer armed")
    time.sleep(max(0.0, 5.8 - (time.monotonic() - t0)))
    freeze(beat)
    time.sleep(3.0)  # timers come due with nobody ringing
    thaw(beat)
    time.sleep(0.8)  # the scan runs: a worker claims
    t_fault = time.monotonic()
    freeze(first)
    time.sleep(PAUSE)
    thaw(first)
    expected = {key: 1 for key in ids}
    settle(s, ids, expected, "fired", timeout=90)
    recovery = time.monotonic() - t_fault - 3.0  # settle's quiet tail is not recovery
    c = counts(s, ids, expected, "fired", "timer")
    report_line("beat SIGSTOP 3s + claiming worker SIGSTOP 12s", c, recovery)
    all_still_held(s, ids)
    for iid in ids.values():
        assert holds(s, iid)["deadlines"] == 0
    assert second.popen is not None and second.popen.poll() is None

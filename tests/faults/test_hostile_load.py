"""Hostile load: a model that never waits runs while other instances are served.

No service is restarted here (this file is safe beside other users of the machine's
PostgreSQL and Redis). A loop with no wait state (script → gateway ``=true`` → script)
runs for the whole test on the same worker as twelve message-counting instances and a
batch of instances that start and complete. Counts are printed like the fault suite's
and asserted: sent == applied, 0 duplicates, 0 lost; every quick instance completed;
the loop was continued many times and is cancelled at the end.
"""

from __future__ import annotations

import pytest

from tests.faults.test_faults import Sender, counts, loop_instances, report, settle
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import end, model, script, start, xor

pytestmark = [pytest.mark.faults, pytest.mark.integration]

SPIN = model(
    "hostile_spin",
    start() + script("inc", "=i + 1", "i") + xor("gw", default="fl3") + end(),
    [("start", "inc"), ("inc", "gw"), ("gw", "inc", "=true"), ("gw", "end")],
)
QUICK = model(
    "hostile_quick",
    start() + script("s", "=n + 1", "m") + end(),
    [("start", "s"), ("s", "end")],
)


def test_a_loop_model_runs_while_other_instances_complete(fstack: Stack) -> None:
    s = fstack
    s.env["DORMANT_STEP_BUDGET"] = "50"
    s.worker_and_beat()
    s.client.deploy(SPIN)
    s.client.deploy(QUICK)
    spinning = s.client.start("hostile_spin", {"i": 0})
    wait_for(
        lambda: s.client.instance(spinning).variables.get("i", 0) > 100, 30, what="loop running"
    )

    def loop_steps() -> int:
        return sum(1 for f in s.client.history(spinning) if f.kind == "StepBudgetReached")

    before = loop_steps()
    name, ids = loop_instances(s, 12)
    sender = Sender(s.client, name, list(ids), 20)
    sender.thread.start()
    quick = [s.client.start("hostile_quick", {"n": k}) for k in range(30)]
    sender.thread.join(120)
    settle(s, ids, sender.sent, "n")
    completed = sum(1 for iid in quick if s.wait_status(iid, "completed", 60))

    c = counts(s, ids, sender.sent, "n", "message")
    spun = s.client.instance(spinning)
    continuations = loop_steps()
    report(
        "loop model running while others complete",
        c,
        f" completed={completed}/{len(quick)} loop_steps={continuations} "
        f"loop_iterations={spun.variables['i']}",
    )
    assert completed == len(quick)
    assert spun.status == "active"
    # Still going, in budget-sized steps, after all the other work was served.
    wait_for(lambda: loop_steps() > max(before, continuations), 60, what="the loop to go on")

    s.client.cancel(spinning)
    s.wait_status(spinning, "terminated", 60)

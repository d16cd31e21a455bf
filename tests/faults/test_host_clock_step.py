"""One worker's HOST clock steps (+2 h, then -10 min) while the rest of the fleet and
the database keep the right time.

The fleet's time is the database's (persistence/clock.py), so what must hold is:

* no timer is armed or fired early by the database's clock, whichever worker applied
  its start, scanned or fired it: every ``due_at`` is at least its delay after the
  database's time before the start, the PT4S / PT3S timers fire once each, and the
  PT1H ones stay held while the stepped worker takes its share of the scans;
* nothing is lost or applied twice (the stepped worker's Redis transport restores
  "expired" unacknowledged messages of the others by its own clock: those are
  redeliveries, applied once by trigger id).

Before the engine read the database's clock, the stepped worker armed a PT4S timer two
hours late and claimed the PT1H ones at once. Bounded: 3 x 20 timers, ~40 s.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.faults.kit import counts, report_line, settle, worker_with
from tests.faults.test_clock_jump import db_now, fired
from tests.faults.test_faults import all_still_held, timer_model
from tests.host_clock import stepped_host_clock
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import deadline_rows, holds

pytestmark = [pytest.mark.faults, pytest.mark.integration]

N = 20


def start_group(stack: Stack, delay: str) -> tuple[dict[str, str], datetime]:
    """``N`` instances of a fresh timer model; the database's time before the starts."""
    k = f"hc_{uuid.uuid4().hex[:6]}"
    stack.client.deploy(timer_model(k, f"after-{k}", delay))
    before = db_now(stack)
    ids = {f"{k}-{i}": stack.client.start(k, {"id": f"{k}-{i}", "fired": 0}) for i in range(N)}
    return ids, before


def armed_not_early(stack: Stack, ids: dict[str, str], before: datetime, delay: timedelta) -> None:
    """Every timer of ``ids`` is armed, each due no earlier than its delay allows."""
    for iid in ids.values():
        wait_for(
            lambda iid=iid: holds(stack, iid)["deadlines"] == 1 or fired(stack, {iid: iid}) > 0,
            30,
            what="timer armed",
        )
    for iid in ids.values():
        for row in deadline_rows(stack, iid):
            assert row.due_at >= before + delay, (
                f"{iid}: due {row.due_at}, but armed after {before} with a {delay} delay"
            )


def test_one_worker_whose_host_clock_steps_fires_nothing_early(
    fstack: Stack, tmp_path: Path
) -> None:
    s = fstack
    step = tmp_path / "host-clock-step"
    s.worker()
    stepped = worker_with(s, **stepped_host_clock(step, "+2h"))
    s.beat()

    # +2 h on one worker: it applies some of the starts and takes its share of scans.
    soon, soon_before = start_group(s, "PT4S")
    later, later_before = start_group(s, "PT1H")
    armed_not_early(s, soon, soon_before, timedelta(seconds=4))
    armed_not_early(s, later, later_before, timedelta(hours=1))
    t0 = time.monotonic()
    settle(s, soon, {k: 1 for k in soon}, "fired", timeout=60)
    forward_recovery = time.monotonic() - t0
    time.sleep(6)  # several scans more, some of them on the stepped worker
    assert stepped.popen is not None and stepped.popen.poll() is None, "stepped worker died"
    assert fired(s, later) == 0, "a PT1H timer fired within seconds"
    c_fwd = counts(s, soon, {k: 1 for k in soon}, "fired", "timer")
    report_line("host clock +2 h on one worker", c_fwd, forward_recovery)

    # -10 min on the same worker: timers it arms are not due ten minutes early.
    step.write_text("-10m\n")
    back, back_before = start_group(s, "PT3S")
    armed_not_early(s, back, back_before, timedelta(seconds=3))
    t0 = time.monotonic()
    settle(s, back, {k: 1 for k in back}, "fired", timeout=60)
    c_back = counts(s, back, {k: 1 for k in back}, "fired", "timer")
    report_line("host clock -10 min on one worker", c_back, time.monotonic() - t0)

    assert fired(s, later) == 0
    for iid in later.values():
        assert holds(s, iid)["deadlines"] == 1
    all_still_held(s, {**soon, **back})

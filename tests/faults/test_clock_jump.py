"""Clock jumps on the workers and beat, through the shell's one clock
(``DORMANT_CLOCK_OFFSET_FILE``, persistence/clock.py): the host's clock stepped back
10 minutes, then forward 2 hours, with timers armed, due and claimed.

What must hold:

* backward -10 min: no timer fires before its ``due_at`` by the database's clock (they
  are late by the jump, never early, never lost); when the clock comes back they fire
  once each;
* forward +2 h: claims taken just before the jump look expired at once and may be
  claimed again — the second fire is the same trigger (claim + due instant) and is
  applied once; timers the jump made overdue fire once; timers beyond the jump do not
  fire.

Bounded: 20 timers per group, ~45 s in all.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.faults.kit import counts, report_line, settle
from tests.faults.test_faults import all_still_held, timer_model
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import deadline_rows, engine_of, holds

pytestmark = [pytest.mark.faults, pytest.mark.integration]

N = 20


def db_now(stack: Stack) -> datetime:
    with engine_of(stack).connect() as conn:
        value: datetime = conn.execute(text("SELECT now()")).scalar_one()
    return value


def arm(stack: Stack, delay: str, n: int = N) -> dict[str, str]:
    k = f"fc_{uuid.uuid4().hex[:6]}"
    stack.client.deploy(timer_model(k, f"after-{k}", delay))
    ids = {f"{k}-{i}": stack.client.start(k, {"id": f"{k}-{i}", "fired": 0}) for i in range(n)}
    for iid in ids.values():
        wait_for(lambda iid=iid: holds(stack, iid)["deadlines"] == 1, 30, what="timer armed")
    return ids


def fired(stack: Stack, ids: dict[str, str]) -> int:
    return sum(int(stack.client.instance(i).variables.get("fired", 0)) for i in ids.values())


def test_clock_jumps_back_and_forward_on_the_workers_and_beat(
    fstack: Stack, tmp_path: Path
) -> None:
    s = fstack
    offset = tmp_path / "clock-offset"
    offset.write_text("0")
    s.env["DORMANT_CLOCK_OFFSET_FILE"] = str(offset)
    s.worker(), s.worker(), s.beat()

    # Backward: armed for 6 s of real time, then the clock steps back 10 minutes.
    back = arm(s, "PT6S")
    due = max(r.due_at for iid in back.values() for r in deadline_rows(s, iid))
    offset.write_text("-600")
    wait_for(lambda: (db_now(s) - due).total_seconds() > 5, 30, 0.2, "past due by the database")
    assert fired(s, back) == 0, "a timer fired while the workers' clock said it was not due"
    offset.write_text("0")
    t_restore = time.monotonic()
    settle(s, back, {k: 1 for k in back}, "fired", timeout=60)
    back_recovery = time.monotonic() - t_restore - 3.0
    c_back = counts(s, back, {k: 1 for k in back}, "fired", "timer")
    report_line("clock jump -10 min (workers + beat)", c_back, back_recovery)

    # Forward: PT4S timers come due and are claimed; then +2 h makes every claim look
    # expired, the PT1H timers overdue, and leaves the PT3H ones in the future.
    claimed = arm(s, "PT4S")
    overdue = arm(s, "PT1H")
    future = arm(s, "PT3H")
    wait_for(
        lambda: (
            any(
                r.claimed_until is not None
                for iid in claimed.values()
                for r in deadline_rows(s, iid)
            )
            or fired(s, claimed) > 0
        ),
        30,
        0.05,
        "the first claims taken",
    )
    offset.write_text(str(2 * 3600))
    t_jump = time.monotonic()
    both = {**claimed, **overdue}
    settle(s, both, {k: 1 for k in both}, "fired", timeout=90)
    fwd_recovery = time.monotonic() - t_jump - 3.0
    c_fwd = counts(s, both, {k: 1 for k in both}, "fired", "timer")
    early = fired(s, future)
    report_line(
        "clock jump +2 h (workers + beat)", c_fwd, fwd_recovery, f" beyond_jump_fired={early}"
    )
    assert early == 0
    offset.write_text("0")
    all_still_held(s, {**back, **both})
    for iid in future.values():
        assert holds(s, iid)["deadlines"] == 1

"""Database failover stand-in: the machine's PostgreSQL STOPPED for 60 s under load
(messages streaming in, timers coming due), then started. The Client's sends fail and
are retried with the same message id; workers' triggers retry with backoff; beat's
scans skip. After the start every trigger is applied once and every timer fired once.

This stops the shared PostgreSQL: run it only where nothing else uses it (the fault
run is serial, after the rest of the suite). Bounded: 60 s down + ~60 s recovery.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.faults.conftest import stop_postgresql_for
from tests.faults.kit import counts, loop_instances, report_line, settle
from tests.faults.test_faults import Sender, all_still_held, revive_dead, timer_model
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import holds

pytestmark = [pytest.mark.faults, pytest.mark.integration]

DOWN = 60.0


@pytest.mark.restarts_services
def test_postgresql_stopped_for_a_minute_under_load(fstack: Stack) -> None:
    s = fstack
    s.worker(), s.worker(), s.beat()
    name, ids = loop_instances(s, 8)
    k = f"fo_{uuid.uuid4().hex[:6]}"
    s.client.deploy(timer_model(k, f"after-{k}", "PT20S"))
    tids = {f"{k}-{i}": s.client.start(k, {"id": f"{k}-{i}", "fired": 0}) for i in range(10)}
    for iid in tids.values():
        wait_for(lambda iid=iid: holds(s, iid)["deadlines"] == 1, 30, what="timer armed")
    sender = Sender(s.client, name, list(ids), 30)
    sender.thread.start()
    wait_for(lambda: sender.progress() >= 40, 60, 0.05, "40 sent")
    down = stop_postgresql_for(DOWN)
    t_up = time.monotonic()
    revived = revive_dead(s)
    sender.thread.join(180)
    settle(s, ids, sender.sent, "n", timeout=180)
    recovery = time.monotonic() - t_up - 3.0
    c = counts(s, ids, sender.sent, "n", "message")
    report_line(
        "PostgreSQL stopped 60 s under load",
        c,
        recovery,
        f" down={down:.1f}s client_retries={sender.errors} processes_restarted={revived}",
    )
    expected = {key: 1 for key in tids}
    settle(s, tids, expected, "fired", timeout=90)
    report_line(
        "PostgreSQL stopped 60 s (timers)", counts(s, tids, expected, "fired", "timer"), 0.0
    )
    all_still_held(s, ids)
    all_still_held(s, tids)

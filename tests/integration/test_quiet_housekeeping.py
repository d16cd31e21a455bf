"""``dormant dev`` writes a housekeeping line only when a sweep did something (issue 28:
an idle dev process wrote 1.1 MB of "Sending due task" / "received" / "succeeded: 0"
lines in 17 minutes). A real ``dormant dev`` on the embedded default: a timer fires
(so scans that found work are logged), and no line names an idle sweep."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import JOBS_MODULE, WORKER_READY, Proc, Stack, _urls
from tests.integration.test_tasks import TIMER, linear

pytestmark = pytest.mark.integration

SWEEPS = ("dormant.scan_deadlines", "dormant.relay_outbox", "dormant.batches.sweep")


@pytest.mark.timeout(300)
def test_dev_logs_housekeeping_only_when_it_did_something(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with _urls("embedded", tmp_path, request) as urls:
        stack = Stack(*urls, tmp_path)
        try:
            dev = Proc(
                "dev",
                stack.dormant("dev", "--include", JOBS_MODULE, "--concurrency", "1"),
                stack.env,
                tmp_path,
            )
            stack.procs.append(dev)
            dev.start(ready=WORKER_READY)
            stack.client.deploy(linear("quiet-timer", TIMER))
            first = stack.client.start("quiet-timer")
            stack.wait_status(first, "completed")
            # A second timer after the first: between them the scans found nothing.
            second = stack.client.start("quiet-timer")
            stack.wait_status(second, "completed")
            log = dev.text()
            records = [line for line in log.splitlines() if line.startswith("[")]
            # log records only (the start-up banner lists the tasks by name)
            swept = [line for line in records if any(name in line for name in SWEEPS)]
            for line in swept:
                assert "received" not in line and "Sending due task" not in line, line
            due = [line for line in records if "scan_deadlines: " in line and " due" in line]
            scans = [line for line in swept if "dormant.scan_deadlines" in line]
            assert due, log  # the scans ran and found the timers
            # a scan's success is logged only when it claimed something, which it says
            assert len(scans) == len(due), "\n".join(scans + due)
        finally:
            stack.close()

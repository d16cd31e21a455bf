"""A lock timeout while a trigger is applied is transient (tasks/transient.py): the test
holds the instance's row lock, the worker's wait for it is cancelled by its statement
timeout again and again, and once the lock is released the same trigger is applied —
no failed trigger, nothing for an operator (issue 24, row 3). The same for a job's
result, under the retry budget the settings give (``DORMANT_TRANSIENT_*``)."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest

from tests.faults.kit import included_worker, worker_with
from tests.faults.test_faults import loop_instances
from tests.integration.conftest import Stack, wait_for
from tests.integration.test_incidents import flaky, linear

pytestmark = [pytest.mark.faults, pytest.mark.integration]


def test_a_held_instance_lock_heals_by_itself(fstack: Stack) -> None:
    s = fstack
    worker = worker_with(s, DORMANT_DB_STATEMENT_TIMEOUT_SECONDS="0.3")
    name, ids = loop_instances(s, 1)
    ((key, iid),) = ids.items()
    url = s.database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as holder:
        holder.execute("SELECT id FROM instances WHERE id = %s FOR UPDATE", (iid,))
        s.client.send_message(name, key, message_id="held-1", ttl=300)
        wait_for(
            lambda: "transient failure, retrying" in worker.text(),
            60,
            0.1,
            "the worker's lock wait cancelled and retried",
        )
        assert s.client.failed_triggers(iid) == []
        holder.rollback()
    wait_for(
        lambda: int(s.client.instance(iid).variables.get("n", 0)) == 1,
        60,
        0.2,
        "the held trigger applied once the lock is free",
    )
    assert s.client.failed_triggers(iid) == [], s.diagnostics(iid)


def test_a_job_result_held_off_by_a_lock_heals_under_the_settings_budget(
    fstack: Stack, tmp_path: Path
) -> None:
    """The result of a job finds its instance locked: two short retries in the job's
    process, then ``dormant.apply_trigger`` retries it under DORMANT_TRANSIENT_RETRIES
    (40 here, past the default 8, so the lock is held through more than 8 retries)."""
    s = fstack
    log = tmp_path / "jobs.log"
    worker = included_worker(
        s,
        DORMANT_TEST_JOB_LOG=str(log),
        DORMANT_DB_STATEMENT_TIMEOUT_SECONDS="0.3",
        DORMANT_TRANSIENT_RETRIES="40",
        DORMANT_TRANSIENT_BACKOFF_SECONDS="0.05",
        DORMANT_TRANSIENT_BACKOFF_MAX_SECONDS="0.2",
    )
    key = f"gate_{uuid.uuid4().hex[:6]}"
    s.client.deploy(linear(key, flaky(job_type="fault-gate")))
    iid = s.client.start(key, {})
    wait_for(lambda: log.exists() and log.read_text().strip(), 60, 0.1, "the gated job running")
    url = s.database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as holder:
        holder.execute("SELECT id FROM instances WHERE id = %s FOR UPDATE", (iid,))
        Path(str(log) + ".open").touch()
        wait_for(
            lambda: worker.text().count("transient failure, retrying") > 10,
            90,
            0.1,
            "the deferred result retried past the default budget",
        )
        assert f"job result for instance {iid}: OperationalError, retrying" in worker.text()
        assert s.client.failed_triggers(iid) == []
        holder.rollback()
    s.wait_status(iid, "completed", 60)
    assert s.client.failed_triggers(iid) == [], s.diagnostics(iid)

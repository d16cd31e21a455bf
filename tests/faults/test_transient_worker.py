"""A lock timeout while a trigger is applied is transient (tasks/transient.py): the test
holds the instance's row lock, the worker's wait for it is cancelled by its statement
timeout again and again, and once the lock is released the same trigger is applied —
no failed trigger, nothing for an operator (issue 24, row 3). The same for a job's
result, under the retry budget the settings give (``DORMANT_TRANSIENT_*``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import insert

from dormant.persistence import clock
from dormant.persistence.tables import processed_triggers
from dormant.tasks import wire
from tests.faults.conftest import FAULT_ENV
from tests.faults.kit import included_worker
from tests.faults.test_faults import loop_instances
from tests.integration.conftest import Proc, Stack, _urls, wait_for
from tests.integration.test_incidents import flaky, linear

pytestmark = [pytest.mark.faults, pytest.mark.integration]


@pytest.fixture(scope="module")
def held(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Stack, Proc, Path]]:
    """One stack and one worker for the module: a lock wait is cancelled after 0.3 s,
    and a transient failure is retried up to 40 times, 0.05 s to 0.2 s apart."""
    tmp = tmp_path_factory.mktemp("transient-worker")
    with _urls("pg_redis", tmp, request) as urls:
        s = Stack(*urls, tmp)
        s.env.update(FAULT_ENV)
        log = tmp / "jobs.log"
        try:
            worker = included_worker(
                s,
                DORMANT_TEST_JOB_LOG=str(log),
                DORMANT_DB_STATEMENT_TIMEOUT_SECONDS="0.3",
                DORMANT_TRANSIENT_RETRIES="40",
                DORMANT_TRANSIENT_BACKOFF_SECONDS="0.05",
                DORMANT_TRANSIENT_BACKOFF_MAX_SECONDS="0.2",
            )
            yield s, worker, log
        finally:
            s.close()


def _retries_since(worker: Proc, mark: int) -> int:
    return worker.text()[mark:].count("transient failure, retrying")


def test_a_held_instance_lock_heals_by_itself(held: tuple[Stack, Proc, Path]) -> None:
    s, worker, _ = held
    mark = len(worker.text())
    name, ids = loop_instances(s, 1)
    ((key, iid),) = ids.items()
    url = s.database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as holder:
        holder.execute("SELECT id FROM instances WHERE id = %s FOR UPDATE", (iid,))
        s.client.send_message(name, key, message_id="held-1", ttl=300)
        wait_for(
            lambda: _retries_since(worker, mark) > 0,
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
    held: tuple[Stack, Proc, Path],
) -> None:
    """The result of a job finds its instance locked: two short retries in the job's
    process, then ``dormant.apply_trigger`` retries it under DORMANT_TRANSIENT_RETRIES
    (40 here, past the default 8, so the lock is held through more than 8 retries)."""
    s, worker, log = held
    mark = len(worker.text())
    key = f"gate_{uuid.uuid4().hex[:6]}"
    s.client.deploy(linear(key, flaky(job_type="fault-gate")))
    iid = s.client.start(key, {})
    wait_for(lambda: log.exists() and log.read_text().strip(), 60, 0.1, "the gated job running")
    url = s.database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as holder:
        holder.execute("SELECT id FROM instances WHERE id = %s FOR UPDATE", (iid,))
        Path(str(log) + ".open").touch()
        wait_for(
            lambda: _retries_since(worker, mark) > 10,
            90,
            0.1,
            "the deferred result retried past the default budget",
        )
        assert f"job result for instance {iid}: OperationalError, retrying" in worker.text()
        assert s.client.failed_triggers(iid) == []
        holder.rollback()
    s.wait_status(iid, "completed", 60)
    assert s.client.failed_triggers(iid) == [], s.diagnostics(iid)


def test_an_overtaken_failed_trigger_is_listed_but_no_longer_flags(
    held: tuple[Stack, Proc, Path],
) -> None:
    """A failed trigger flags its instance until the instance moves on (a later trigger
    applied) or its own trigger id is applied after all; then it stays listed, marked
    overtaken, droppable, and the instance is no longer flagged."""
    s, _, _ = held
    name, ids = loop_instances(s, 1)
    ((key, iid),) = ids.items()

    def fail(tid: str) -> Any:
        s.client._send(
            wire.Send(
                wire.APPLY_TRIGGER,
                "trigger.nonsense",
                {"instance_id": iid, "trigger_json": {"kind": "nonsense"}, "trigger_id": tid},
            )
        )
        return wait_for(
            lambda: [f for f in s.client.failed_triggers(iid) if f.trigger_id == tid],
            30,
            0.1,
            f"failed trigger {tid} kept",
        )[0]

    first = fail("bad-1")
    assert not first.overtaken and s.client.instance(iid).failed_triggers == 1
    # The same trigger id applied after all (as a redelivery that succeeded records it).
    with s.client._store.engine.begin() as conn:
        conn.execute(
            insert(processed_triggers).values(instance_id=iid, trigger_id="bad-1", at=clock.now())
        )
    assert s.client.failed_triggers(iid)[0].overtaken
    assert s.client.instance(iid).failed_triggers == 0

    second = fail("bad-2")
    assert not second.overtaken and s.client.instance(iid).failed_triggers == 1
    s.client.send_message(name, key, message_id="after-1", ttl=300)
    wait_for(lambda: int(s.client.instance(iid).variables.get("n", 0)) == 1, 60, 0.2, "moved on")
    listed = s.client.failed_triggers(iid)
    assert {f.trigger_id: f.overtaken for f in listed} == {"bad-1": True, "bad-2": True}
    assert s.client.instance(iid).failed_triggers == 0
    assert "no: overtaken" in s.run_cli("triggers", "list", "--failed", "--instance", iid).stdout
    s.client.drop_trigger(second.id)
    assert [f.trigger_id for f in s.client.failed_triggers(iid)] == ["bad-1"]

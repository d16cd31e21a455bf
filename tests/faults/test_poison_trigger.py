"""A poison trigger: a start whose work passes the hard time limit ends its pool process
at every delivery. Its deliveries are counted before it is applied (persistence/inbox.py
``count_delivery``), so past ``DORMANT_MAX_DELIVERIES`` it is kept as a failed trigger
classified ``PoisonTrigger`` and acknowledged, while the other instances keep applying
their triggers; once the fault is fixed (a worker without it), retrying the failed
trigger starts the instance (issue 24, row 1; docs/limits.md, "What an operator sees:
poison triggers")."""

from __future__ import annotations

import psycopg
import pytest

from tests.faults.kit import included_worker, worker_with
from tests.faults.test_faults import loop_instances
from tests.integration.conftest import Stack, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.integration]

MAX = 2


def _deliveries(s: Stack, iid: str) -> int:
    url = s.database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT deliveries FROM inbox WHERE payload->'kwargs'->>'instance_id' = %s",
            (iid,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_trigger_that_ends_its_worker_becomes_a_poison_trigger(fstack: Stack) -> None:
    s = fstack
    s.env["DORMANT_MAX_DELIVERIES"] = str(MAX)
    s.env["DORMANT_OUTBOX_REDELIVER_AFTER_SECONDS"] = "2"
    s.env["DORMANT_TRIGGER_SOFT_TIME_LIMIT_SECONDS"] = "3"
    s.env["DORMANT_TRIGGER_TIME_LIMIT_SECONDS"] = "4"
    worker = included_worker(s, DORMANT_TEST_POISON_START="poison")
    s.beat()
    name, ids = loop_instances(s, 3)
    key = next(iter(ids)).rsplit("-", 1)[0]
    poisoned = s.client.start(key, {"id": "poisoned", "n": 0, "poison": True})

    # Other instances keep applying their triggers while the poison one is in flight.
    for i, (corr, iid) in enumerate(ids.items()):
        s.client.send_message(name, corr, message_id=f"canary-{i}", ttl=300)
        wait_for(
            lambda iid=iid: int(s.client.instance(iid).variables.get("n", 0)) == 1,
            60,
            0.2,
            f"canary {iid} applied beside the poison trigger",
        )

    wait_for(
        lambda: s.client.failed_triggers(poisoned) != [],
        120,
        0.5,
        "the poison trigger kept as a failed trigger",
    )
    (failed,) = s.client.failed_triggers(poisoned)
    assert failed.error_class == "PoisonTrigger", failed
    assert f"delivery {MAX + 1} refused" in failed.error, failed
    assert "hard time limit" in failed.error, failed
    assert _deliveries(s, poisoned) == MAX + 1
    assert "Hard time limit" in worker.text() or "WorkerLostError" in worker.text()

    # Fixed: a worker without the fault; the kept trigger is sent again and applies.
    worker.stop()
    s.worker()
    s.client.retry_trigger(failed.id)
    wait_for(
        lambda: s.client.instance(poisoned).status != "queued",
        60,
        0.2,
        "the retried start applied",
    )
    assert s.client.failed_triggers(poisoned) == []


def test_transient_retries_are_not_counted_as_deliveries_that_ended_the_worker(
    fstack: Stack,
) -> None:
    """A delivery that ends by itself with a transient retry is uncounted
    (persistence/inbox.py ``release_delivery``): with one delivery allowed, a trigger
    retried many times behind a held row lock still applies, never a poison trigger."""
    s = fstack
    s.env["DORMANT_MAX_DELIVERIES"] = "1"
    worker = worker_with(s, DORMANT_DB_STATEMENT_TIMEOUT_SECONDS="0.3")
    name, ids = loop_instances(s, 1)
    ((key, iid),) = ids.items()
    url = s.database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as holder:
        holder.execute("SELECT id FROM instances WHERE id = %s FOR UPDATE", (iid,))
        s.client.send_message(name, key, message_id="held-1", ttl=300)
        wait_for(
            lambda: worker.text().count("transient failure, retrying") >= 2,
            60,
            0.1,
            "the worker's lock wait cancelled and retried twice",
        )
        holder.rollback()
    wait_for(
        lambda: int(s.client.instance(iid).variables.get("n", 0)) == 1,
        60,
        0.2,
        "the held trigger applied once the lock is free",
    )
    assert s.client.failed_triggers(iid) == [], s.diagnostics(iid)

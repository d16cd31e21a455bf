"""A lock timeout while a trigger is applied is transient (tasks/transient.py): the test
holds the instance's row lock, the worker's wait for it is cancelled by its statement
timeout again and again, and once the lock is released the same trigger is applied —
no failed trigger, nothing for an operator (issue 24, row 3)."""

from __future__ import annotations

import psycopg
import pytest

from tests.faults.kit import worker_with
from tests.faults.test_faults import loop_instances
from tests.integration.conftest import Stack, wait_for

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

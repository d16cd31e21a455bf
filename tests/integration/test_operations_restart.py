"""A bulk batch survives its worker being killed in the middle (issue 12): the batch
completes on a new worker with exact counts, and re-running it changes nothing.

Its own PostgreSQL + Redis stack: the test kills and starts workers.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from dormant.persistence import batches, clock
from dormant.persistence.selection import Selector
from tests.integration.conftest import Stack, wait_for
from tests.integration.opskit import pg_redis_stack
from tests.integration.waitkit import end, model, user_task

pytestmark = pytest.mark.integration

COUNT = 250


@pytest.fixture
def rstack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    with pg_redis_stack(request, tmp_path_factory.mktemp("ops-restart")) as stack:
        yield stack


def test_a_worker_killed_in_the_middle_of_a_batch_and_the_batch_completes_exactly(
    rstack: Stack,
) -> None:
    client = rstack.client
    client.deploy(
        model(
            "held",
            '<bpmn:startEvent id="s"/>' + user_task("t") + end("e"),
            [("s", "t"), ("t", "e")],
        )
    )
    ids = {client.start("held", business_key=f"bk-{i}") for i in range(COUNT)}
    wait_for(lambda: len(client.user_tasks()) == COUNT, 120, what=f"{COUNT} instances waiting")
    worker = rstack.procs[0]
    view = client.bulk("cancel", Selector(key="held", business_key_like="bk-%"))
    assert view.selected == COUNT
    progressed = wait_for(
        lambda: (v := client.batch(view.id)).done >= 10 and v, 60, interval=0.02, what="progress"
    )
    worker.stop(sig=signal.SIGKILL)
    at_kill = client.batch(view.id)
    assert at_kill.state == "running" and at_kill.done < COUNT, at_kill.report()
    assert progressed.done <= at_kill.done

    rstack.worker("worker-after-kill")
    done = client.wait_batch(view.id, timeout=120)
    assert done.state == "completed", done.report()
    assert done.report() == f"selected {COUNT}, cancelled {COUNT}, refused 0"
    terminated = client.instances(status="terminated", key="held")
    assert {v.id for v in terminated} == ids
    items = client.batch_items(view.id)
    assert [i.outcome for i in items] == ["applied"] * COUNT
    # Each instance got exactly one cancel, whatever the kill interrupted.
    for iid in list(ids)[:25]:
        assert [f.kind for f in client.history(iid)].count("Terminated") == 1

    # Re-running the completed batch, or its items' triggers again, changes nothing.
    assert batches.run(client._store, view.id, clock.now, claim_seconds=3) is False
    with client._store.transaction() as conn:
        from sqlalchemy import update

        from dormant.persistence.tables import batch_items
        from dormant.persistence.tables import batches as batch_table

        conn.execute(
            update(batch_items).where(batch_items.c.batch_id == view.id).values(outcome=None)
        )
        conn.execute(
            update(batch_table)
            .where(batch_table.c.id == view.id)
            .values(state="running", applied=0, refused=0)
        )
    assert batches.run(client._store, view.id, clock.now, claim_seconds=3) is False
    again = client.batch(view.id)
    assert again.report() == f"selected {COUNT}, cancelled {COUNT}, refused 0"
    assert {v.id for v in client.instances(status="terminated", key="held")} == ids

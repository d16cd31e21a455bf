"""A published job's outbox row costs no write transaction of its own (PostgreSQL).

In process, against the real PostgreSQL: the id of a published job's row waits in the
Store (``published_jobs``) until the next write transaction carries its DELETE in its
one write statement — a start, a job's result — or, in an idle process, until the
timer deletes it alone; a transaction that rolls back gives the ids back. Counted and
polled, never timed.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import func, select

from bench import sqlcount
from bench.models import SERVICE
from dormant.engine_core.triggers import JobCompleted
from dormant.persistence.published_jobs import PublishedJobs
from dormant.persistence.settings import Settings
from dormant.persistence.store import NewInstance, Store
from dormant.persistence.tables import outbox
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    store = Store(settings=Settings(database_url=pg_url, broker_url="memory://"))
    store.deployments.deploy(SERVICE, datetime.now(UTC))
    try:
        yield store
    finally:
        store.close()


def _job_row(store: Store, instance_id: str) -> int:
    """Start ``instance_id``: the id of the job row its start wrote."""
    (row_id,) = store.start(
        NewInstance("bench_service", instance_id, {}), now=datetime.now(UTC)
    ).outbox_ids
    return row_id


def _exists(store: Store, row_id: int) -> bool:
    with store.read() as conn:
        found = conn.execute(select(func.count()).where(outbox.c.id == row_id)).scalar_one()
    return bool(found)


def test_an_idle_process_deletes_its_published_job_rows_without_another_trigger(
    pg_store: Store,
) -> None:
    tag = uuid.uuid4().hex[:6]
    rows = [_job_row(pg_store, f"idle-{tag}-{i}") for i in range(3)]
    counter = sqlcount.TxCounter(pg_store.engine)
    try:
        for row_id in rows:
            pg_store.outbox.job_published(row_id)  # as tasks/outbox.py does after the send
        assert all(_exists(pg_store, r) for r in rows)  # not deleted by the publish
        wait_for(lambda: not any(_exists(pg_store, r) for r in rows), 30, 0.1, "the rows deleted")
        counts = counter.snapshot()
    finally:
        counter.close()
    assert pg_store.outbox.published_jobs.pending() == []
    # The timer's own transactions (usually one for all three; never one per trigger
    # more than the rows it had to delete).
    assert 1 <= counts.write_transactions <= len(rows), counts


def test_the_next_write_carries_the_delete_and_a_rollback_gives_the_ids_back(
    pg_store: Store,
) -> None:
    pg_store.outbox.published_jobs.bound_seconds = 600  # no timer before this test is done
    tag = uuid.uuid4().hex[:6]
    first = _job_row(pg_store, f"ride-{tag}-a")
    pg_store.outbox.job_published(first)

    # A redelivered start: its write statement meets the instance and rolls back.
    again = pg_store.start(NewInstance("bench_service", f"ride-{tag}-a", {}), now=datetime.now(UTC))
    assert again.duplicate
    assert pg_store.outbox.published_jobs.pending() == [first]  # given back by the rollback
    assert _exists(pg_store, first)

    # The next start carries the DELETE: one write transaction, no second one.
    counter = sqlcount.TxCounter(pg_store.engine)
    try:
        second = _job_row(pg_store, f"ride-{tag}-b")
        counts = counter.snapshot()
    finally:
        counter.close()
    assert counts.write_transactions == 1, counts
    assert pg_store.outbox.published_jobs.pending() == []
    assert not _exists(pg_store, first)
    assert _exists(pg_store, second)  # its own job row, written by the same statement

    # A job's result carries it as well (Store.apply, the job's own task).
    pg_store.outbox.job_published(second)
    [job] = pg_store.queries.holds(f"ride-{tag}-b")["deadlines"]
    applied = pg_store.apply(
        f"ride-{tag}-b",
        JobCompleted(wait_id=job["wait_id"], variables={}),
        datetime.now(UTC),
        trigger_id=f"ride-{tag}-b:done",
    )
    assert applied.status == "completed"
    assert pg_store.outbox.published_jobs.pending() == []
    assert not _exists(pg_store, second)


def test_a_forked_child_starts_with_nothing_pending(pg_store: Store) -> None:
    pg_store.outbox.published_jobs.bound_seconds = 600
    row_id = _job_row(pg_store, f"fork-{uuid.uuid4().hex[:6]}")
    pg_store.outbox.job_published(row_id)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it has pending, and leave at once
        os.write(write, repr(pg_store.outbox.published_jobs.pending()).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        seen = pipe.read()
    os.waitpid(pid, 0)
    assert seen == "[]"
    assert pg_store.outbox.published_jobs.pending() == [row_id]  # still the parent's to delete


def test_the_timer_waits_for_the_oldest_id_s_bound_not_for_its_own_schedule() -> None:
    """In a busy process every id is taken by the next trigger milliseconds after its
    publish; a timer that fired on the schedule it was armed with would delete, in a
    transaction of its own, the one id the next trigger was about to carry (measured:
    ~0.01 write transactions more per instance in bench_triggers). The timer's own
    callback is called here, so no clock decides the outcome."""
    deleted: list[list[int]] = []
    jobs = PublishedJobs(deleted.append, bound_seconds=600)
    jobs.add(1)
    jobs._due()  # fired while the oldest id is younger than its bound
    assert deleted == [] and jobs.pending() == [1]
    jobs.bound_seconds = 0
    jobs._due()  # now it has waited its bound
    assert deleted == [[1]] and jobs.pending() == []


def test_a_failed_delete_keeps_the_ids_pending() -> None:
    def refused(ids: list[int]) -> None:
        raise ConnectionError("the database is away")

    jobs = PublishedJobs(refused, bound_seconds=600)
    jobs.add(7)
    jobs.add(3)
    jobs.flush()
    assert jobs.pending() == [3, 7]  # the timer tries again

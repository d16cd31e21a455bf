"""What one trigger costs PostgreSQL, counted (never timed), through the public surface.

A real ``dormant worker`` (prefork x2) logs every commit of its pool processes
(bench/sqlcount.py, armed by ``DORMANT_BENCH_SQL_LOG`` and ``--include bench.jobs``);
this process counts the Client's own. No beat runs, so nothing but the triggers under
test writes. The counts are exact, so each is pinned at its target:

* a message trigger through the Client: 2 write transactions (the inbox row; the apply,
  which also records the message and marks the inbox row), the apply two statements
  (the holders lookup that locks the first holder, one write statement);
* an instance start → job → end: 2 write transactions from a bare ``dormant.start``
  (the start; the job's result, whose write statement also deletes the job's outbox
  row, published since: persistence/published_jobs.py), 3 through the Client (its inbox
  row). The row's DELETE rides the next write of the pool process that published it —
  the next start, or a job's result. Only a process whose last published job the other
  process ran leaves a row for the timer that deletes rows no write took: one write
  transaction more, at most one per pool process, which the counts allow (the ride
  itself is pinned by tests/integration/test_published_jobs.py);
* a job's result is applied in the job's own Celery task: no ``dormant.apply_trigger``
  message is ever received for it;
* an instance start → eager job → end: ONE write transaction from a bare
  ``dormant.start`` (the job ran before the start was written: ``Store.start``'s
  ``job_first``), once the pool process has loaded the model; no outbox row left;
* a message with two holders: two write transactions (the record and the inbox mark
  ride the last holder's).

Triggers the worker finds queued together may be applied in one batch (tasks/drain.py):
one commit for several, each trigger adding a SAVEPOINT and its RELEASE. The counts
below are the single trigger's as upper bounds, so a batch keeps or lowers them.

And the duplicate check answered under the lock from an older snapshot (a delivery that
waited for the row lock while another delivery of the same trigger committed) is caught
at the write and answered 'duplicate', never applied twice, never an error.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from bench import sqlcount
from bench.harness import EAGER_JOB_TYPES
from bench.models import MESSAGE, SERVICE, SERVICE_EAGER
from dormant.engine_core.triggers import MessageReceived
from tests.integration.conftest import Proc, Stack, _urls, wait_for

pytestmark = pytest.mark.integration

N = 10


@pytest.fixture(scope="module")
def counted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Stack, Path, Proc]]:
    tmp = tmp_path_factory.mktemp("counted")
    log = tmp / "sql.log"
    with _urls("pg_redis", tmp, request) as urls:
        s = Stack(*urls, tmp)
        s.env[sqlcount.ENV_LOG] = str(log)
        s.env["DORMANT_JOB_TYPES"] = EAGER_JOB_TYPES
        worker = Proc(
            "counted-worker",
            s.dormant(
                "worker", "--include", "bench.jobs", "--concurrency", "2", "--loglevel", "INFO"
            ),
            s.env,
            tmp,
        )
        s.procs.append(worker)
        try:
            worker.start()
            s.client.deploy(MESSAGE)
            s.client.deploy(SERVICE)
            s.client.deploy(SERVICE_EAGER)
            yield s, log, worker
        finally:
            s.close()


def _count(s: Stack, key: str, status: str, ids: list[str]) -> int:
    with s.client._store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM instances WHERE key = :k AND status = :s "
                    "AND id = ANY(:ids)"
                ),
                {"k": key, "s": status, "ids": ids},
            ).scalar_one()
        )


def _job_rows(s: Stack, ids: list[str]) -> int:
    """Outbox rows still kept for these instances' jobs."""
    with s.client._store.engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM outbox WHERE payload->>'instance_id' = ANY(:ids)"),
                {"ids": ids},
            ).scalar_one()
        )


def _publish_starts(s: Stack, key: str, ids: list[str]) -> None:
    """Bare ``dormant.start`` tasks (no inbox row), as a plain Celery producer sends."""
    from dormant.tasks.app import pooled_producer, publish

    with pooled_producer(s.broker_url) as producer:
        for instance_id in ids:
            publish(
                "dormant.start",
                "trigger.start",
                {"key": key, "instance_id": instance_id, "variables": {}},
                producer=producer,
            )


def _settled(log: Path) -> sqlcount.Counts:
    """The worker's counts once its last commit is in the log (a pool process appends
    it right after the commit that made our condition true)."""
    last = sqlcount.read_log(log)
    while True:
        time.sleep(0.5)
        now = sqlcount.read_log(log)
        if now == last:
            return now
        last = now


def test_a_message_trigger_through_the_client_costs_two_write_transactions(
    counted: tuple[Stack, Path, Proc],
) -> None:
    s, log, _ = counted
    tag = uuid.uuid4().hex[:6]
    ids = [s.client.start("bench_message", {"orderId": f"{tag}-{i}"}) for i in range(N)]
    wait_for(lambda: _count(s, "bench_message", "active", ids) == N, 60, 0.1, "instances wait")
    before = _settled(log)
    client = sqlcount.TxCounter(s.client._store.engine)
    try:
        for i in range(N):
            s.client.send_message("bench-go", correlation_key=f"{tag}-{i}")
        wait_for(lambda: _count(s, "bench_message", "completed", ids) == N, 60, 0.1, "done")
        worker = _settled(log) - before
        ours = client.snapshot()
    finally:
        client.close()
    assert ours.write_transactions == N  # the inbox rows, one each
    # The apply (lock, record, inbox mark): one transaction per trigger on its own, one
    # per batch when the worker took several queued together (tasks/drain.py).
    assert 1 <= worker.write_transactions <= N, worker
    # The lookup that locks, then one write statement; and in each pool process's first
    # message, the read of the deployments' message starts (once per process and deploy).
    # A trigger applied in a batch adds its SAVEPOINT and RELEASE to those two.
    assert 2 * N + 1 <= worker.write_statements <= 4 * N + 2, worker
    assert (ours.write_transactions + worker.write_transactions) / N <= 2


def test_an_instance_start_job_end_through_the_client_costs_three_write_transactions(
    counted: tuple[Stack, Path, Proc],
) -> None:
    s, log, worker_proc = counted

    tag = uuid.uuid4().hex[:6]
    bare = [f"bare-{tag}-{i}" for i in range(N)]
    before = _settled(log)
    ran_before = _jobs_succeeded(worker_proc)
    _publish_starts(s, "bench_service", bare)
    wait_for(lambda: _count(s, "bench_service", "completed", bare) == N, 60, 0.1, "done")
    worker = _settled(log) - before
    # The start; the result (+ job row). A pool process whose last published job is run
    # by the other one deletes that row by its timer: one transaction more, at most one
    # per pool process (without the ride it would be one per job).
    # (fewer when starts queued together were applied in one batch, tasks/drain.py, and
    # when the results of fast jobs queued together were: tasks/job_batches.py)
    assert 2 <= worker.write_transactions <= 2 * N + 2, worker
    assert _job_rows(s, bare) == 0  # every job row deleted, none left for the sweep

    client = sqlcount.TxCounter(s.client._store.engine)
    try:
        via_client = [s.client.start("bench_service", {}) for _ in range(N)]
        wait_for(lambda: _count(s, "bench_service", "completed", via_client) == N, 60, 0.1)
        worker2 = _settled(log) - before - worker
        ours = client.snapshot()
    finally:
        client.close()
    assert ours.write_transactions == N  # the inbox rows
    # The inbox mark rides the start's own transaction: no write more than the bare start
    # (a mark of its own would be one per start; the timer's, as above, at most two).
    assert 2 <= worker2.write_transactions <= 2 * N + 2, (worker, worker2)
    # Three per instance, and the timer's at most two in all (the bound just above).
    assert ours.write_transactions + worker2.write_transactions <= 3 * N + 2
    assert _job_rows(s, via_client) == 0

    # Each job's result was applied inside the task that ran the job: no result message.
    assert _jobs_succeeded(worker_proc) - ran_before == 2 * N
    assert "dormant.apply_trigger[" not in worker_proc.text()


def _jobs_succeeded(worker: Proc) -> int:
    """The worker's log lines of a ``bench-noop-job`` that ran (one each, whether its
    task ran it or took it behind another: tasks/job_batches.py)."""
    return sum(
        1
        for line in worker.text().splitlines()
        if "bench-noop-job[" in line and "] succeeded in " in line
    )


def test_an_instance_start_eager_job_end_costs_one_write_transaction(
    counted: tuple[Stack, Path, Proc],
) -> None:
    s, log, worker_proc = counted

    tag = uuid.uuid4().hex[:6]
    ids = [f"eager-{tag}-{i}" for i in range(N)]
    before = _settled(log)
    _publish_starts(s, "bench_service_eager", ids)
    wait_for(lambda: _count(s, "bench_service_eager", "completed", ids) == N, 60, 0.1, "done")
    worker = _settled(log) - before
    # The start, its job's result with it; the first start of the key in each of the
    # two pool processes loads the model and goes the ordinary way (two transactions).
    assert 1 <= worker.write_transactions <= N + 2, worker
    assert _job_rows(s, ids) == 0
    ran = worker_proc.text()
    assert sum(ran.count(f"job run in place instance={i} ") for i in ids) == N


def test_a_duplicate_seen_from_an_older_snapshot_is_caught_at_the_write(
    pg_url: str,
) -> None:
    from dormant.persistence.store import NewInstance, Store

    store = Store(pg_url)
    now = datetime.now(UTC)
    try:
        store.deployments.deploy(MESSAGE, now)
        iid = f"dup-{uuid.uuid4().hex[:6]}"
        store.start(NewInstance("bench_message", iid, {"orderId": iid}), now=now)
        with store.read() as conn:
            (wait_id,) = conn.execute(
                text("SELECT wait_id FROM subscriptions WHERE instance_id = :i"), {"i": iid}
            ).scalars()
        trigger = MessageReceived(
            wait_id=wait_id, name="bench-go", correlation_key=iid, variables={}, message_id="m"
        )
        results: list[object] = []
        with store.engine.connect() as holder:
            holder.execute(text("SELECT 1 FROM instances WHERE id = :i FOR UPDATE"), {"i": iid})

            def second() -> None:
                try:
                    results.append(store.apply(iid, trigger, now, trigger_id="t-1"))
                except Exception as exc:  # the assertion below names it
                    results.append(exc)

            thread = threading.Thread(target=second)
            thread.start()

            def waiting() -> bool:
                with store.engine.connect() as c:
                    return bool(
                        c.execute(
                            text(
                                "SELECT count(*) FROM pg_stat_activity WHERE "
                                "datname = current_database() AND wait_event_type = 'Lock'"
                            )
                        ).scalar_one()
                    )

            wait_for(waiting, 20, 0.02, "the second delivery waiting for the row lock")
            # The first delivery commits the same trigger id while the second waits.
            holder.execute(
                text("INSERT INTO processed_triggers VALUES (:i, 't-1', now())"), {"i": iid}
            )
            holder.execute(
                text("UPDATE instances SET updated_at = now() WHERE id = :i"), {"i": iid}
            )
            holder.commit()
            thread.join(20)
        (outcome,) = results
        assert not isinstance(outcome, Exception), outcome
        assert getattr(outcome, "duplicate", False) is True
        with store.read() as conn:
            still = conn.execute(
                text("SELECT count(*) FROM subscriptions WHERE instance_id = :i"), {"i": iid}
            ).scalar_one()
        assert still == 1  # not applied: the wait is still held
    finally:
        store.close()


def test_a_message_with_two_holders_costs_one_write_transaction_per_holder(
    pg_url: str,
) -> None:
    """The message record rides the last holder's transaction for every holder count:
    two holders, two write transactions (the Client's inbox row is marked in the
    second), and the message is recorded as consumed. The holders are instances of two
    processes: a message correlates once per process id."""
    from dormant.persistence import inbox
    from dormant.persistence.routing import Router
    from dormant.persistence.store import NewInstance, Store
    from dormant.tasks.wire import redelivery

    store = Store(pg_url)
    now = datetime.now(UTC)
    try:
        store.deployments.deploy(MESSAGE, now)
        store.deployments.deploy(MESSAGE.replace('id="bench_message"', 'id="bench_message_b"'), now)
        key = f"two-{uuid.uuid4().hex[:6]}"
        for i, process in enumerate(("bench_message", "bench_message_b")):
            store.start(NewInstance(process, f"{key}-{i}", {"orderId": key}), now=now)
        inbox_id = inbox.record(store.engine, "dormant.message", "message.bench-go", {})
        counter = sqlcount.TxCounter(store.engine)
        try:
            out = Router(store, redelivery).message(
                "bench-go", key, {}, message_id=key, ttl_seconds=None, now=now, inbox_id=inbox_id
            )
            counts = counter.snapshot()
        finally:
            counter.close()
        assert sorted(out.delivered_to) == [f"{key}-0", f"{key}-1"]
        assert out.inbox_marked
        assert counts.write_transactions == 2, counts
        with store.read() as conn:
            consumed = conn.execute(
                text("SELECT consumed_at IS NOT NULL FROM messages WHERE message_id = :m"),
                {"m": key},
            ).scalar_one()
            processed = conn.execute(
                text("SELECT processed_at IS NOT NULL FROM inbox WHERE id = :i"), {"i": inbox_id}
            ).scalar_one()
        assert consumed and processed
    finally:
        store.close()

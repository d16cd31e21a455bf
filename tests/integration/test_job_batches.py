"""Several jobs per task (tasks/job_batches.py), against the real PostgreSQL and Redis,
counted, never timed.

Each instance is start → one service task → end. A job's result applied twice, or
lost, shows in its instance: exactly one ``job_completed`` trigger woke each one.

* fast jobs queued behind one run in that one's task, and their results commit
  together; a type not yet proven fast, or a slow one, runs one job per task;
* one result the database refuses rolls back its own savepoint only and goes the
  single way; the others commit;
* the broker script takes only a plain first delivery of a named task, records it as
  kombu records a delivery (kombu's own restore puts it back), and leaves anything
  else where it is;
* a pool process killed in the middle of a batch loses no job and applies no result
  twice: its successor gives back what it took, well inside the visibility timeout.
"""

from __future__ import annotations

import logging
import signal
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

import tests.integration.test_tasks_jobs  # noqa: F401  (the jobs this process runs)
from dormant.persistence import clock
from dormant.persistence.store import NewInstance
from tests.faults.kit import instance_status, worker_with
from tests.integration.conftest import Stack, _urls, wait_for
from tests.integration.test_trigger_batches import _deliver_here, _here, _queue_empty, _sql
from tests.integration.waitkit import end, model, start, woken_by

pytestmark = pytest.mark.integration


def _service(key: str, job_type: str) -> str:
    task = (
        f'<bpmn:serviceTask id="work"><bpmn:extensionElements>'
        f'<zeebe:taskDefinition type="{job_type}" retries="1"/>'
        f"</bpmn:extensionElements></bpmn:serviceTask>"
    )
    return model(key, start() + task + end(), [("start", "work"), ("work", "end")])


FAST, SLOW = "job_batch_fast", "job_batch_slow"
# A loaded machine must not decide a test: a job of a millisecond is proven fast under
# a bound of a second, and a batch may take for a minute. The slow type's test sets
# the bound it is judged by.
ROOMY = {"DORMANT_JOB_BATCH_FAST_SECONDS": "1", "DORMANT_JOB_BATCH_SECONDS": "60"}


@pytest.fixture(autouse=True)
def _roomy_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process (``_here`` reads the environment) and in the workers started."""
    for name, value in ROOMY.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def jobs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("job-batches")
    with _urls("pg_redis", tmp, request) as urls:
        s = Stack(*urls, tmp)
        try:
            s.client.deploy(_service(FAST, "test-batch-fast"))
            s.client.deploy(_service(SLOW, "test-batch-slow"))
            yield s
        finally:
            s.close()


def _queued(s: Stack, key: str, count: int, **variables: Any) -> list[str]:
    """``count`` instances started in this process, their jobs queued on the broker."""
    from dormant.tasks.outbox import publish_rows

    tag = uuid.uuid4().hex[:6]
    ids = [f"{tag}-{i}" for i in range(count)]
    with _here(s):
        for n, instance_id in enumerate(ids):
            applied = s.client._store.start(
                NewInstance(key, instance_id, {"n": n, **variables}), now=clock.now()
            )
            publish_rows(applied.outbox_rows)
    return ids


def _proven(s: Stack, key: str) -> None:
    """Run three jobs of ``key``'s type one at a time: its type is then proven fast in
    this process, or proven slow."""
    for _ in range(3):
        _queued(s, key, 1)
        assert _deliver_here(s) == 1


def _each_completed_once(s: Stack, ids: list[str]) -> None:
    assert {i: instance_status(s, i) for i in ids} == {i: "completed" for i in ids}
    assert {i: woken_by(s, i, "job_completed") for i in ids} == {i: 1 for i in ids}


def test_fast_jobs_queued_behind_one_run_in_its_task_and_commit_together(
    jobs: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    s = jobs
    caplog.set_level(logging.INFO, "dormant.jobs")
    first = _queued(s, FAST, 3)
    # Not proven yet: each of the first three runs as its own delivery.
    assert _deliver_here(s) == 3
    ids = _queued(s, FAST, 12)
    assert _deliver_here(s) == 1, "one delivery ran the eleven jobs queued behind it"
    assert "batch of 12 job results applied in one transaction" in caplog.text
    _each_completed_once(s, first + ids)
    assert _queue_empty(s), "every taken job acknowledged"


def test_a_slow_job_type_is_never_taken_ahead(jobs: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its job sleeps 30 ms, three times the default bound."""
    s = jobs
    monkeypatch.setenv("DORMANT_JOB_BATCH_FAST_SECONDS", "0.01")
    _proven(s, SLOW)
    ids = _queued(s, SLOW, 5)
    assert _deliver_here(s) == 5, "each slow job its own delivery"
    _each_completed_once(s, ids)


def test_a_refused_result_rolls_back_only_its_own_savepoint(
    jobs: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    s = jobs
    caplog.set_level(logging.INFO, "dormant.jobs")
    _proven(s, FAST)
    ids = _queued(s, FAST, 6)
    bad = ids[3]
    _sql(
        s,
        "CREATE FUNCTION refuse_bad_job() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF NEW.id = '{bad}' AND NEW.status = 'completed' THEN "
        "RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$",
    )
    _sql(
        s,
        "CREATE TRIGGER refuse_bad_job BEFORE UPDATE ON instances FOR EACH ROW "
        "EXECUTE FUNCTION refuse_bad_job()",
    )
    try:
        deliveries = _deliver_here(s)
    finally:
        _sql(s, "DROP TRIGGER refuse_bad_job ON instances")
        _sql(s, "DROP FUNCTION refuse_bad_job()")
    assert deliveries >= 1
    assert "batch of 6 job results applied in one transaction" in caplog.text
    good = [i for i in ids if i != bad]
    _each_completed_once(s, good)
    assert instance_status(s, bad) == "active", "its result was not applied"
    with s.client._store.engine.connect() as conn:
        kept = conn.execute(
            text("SELECT error FROM failed_triggers WHERE body LIKE :k"), {"k": f"%{bad}%"}
        ).all()
    assert len(kept) == 1 and "refused by the test" in kept[0].error, kept
    assert _queue_empty(s)


def test_the_broker_script_takes_only_a_plain_first_delivery_of_a_named_task(
    jobs: Stack,
) -> None:
    from dormant.tasks.redis_transport import take_next_if

    s = jobs
    name = "test-batch-fast"
    with _here(s) as app_module, app_module.app.connection_for_write() as conn:
        channel = conn.default_channel
        app, queue = app_module.app, app_module.QUEUE
        client = channel.client

        def send(task: str, **options: Any) -> None:
            app.send_task(
                task,
                kwargs={"n": 1},
                queue=queue,
                routing_key=f"job.{task}",
                exchange=queue.exchange.name,
                **options,
            )

        def depth() -> int:
            return int(client.llen(queue.name))

        assert take_next_if(channel, queue.name, [name]) is None, "an empty queue"
        send(name)
        message = take_next_if(channel, queue.name, [name])
        assert message is not None and message.headers["task"] == name
        tag = message.delivery_tag
        assert client.hexists("unacked", tag) and client.zscore("unacked_index", tag)
        # Recorded as kombu records a delivery: kombu's own restore gives it back.
        channel.qos.restore_by_tag(tag, leftmost=True)
        assert depth() == 1 and not client.hexists("unacked", tag)
        # Given back, it is a redelivery: never taken ahead, left where it is.
        assert take_next_if(channel, queue.name, [name]) is None and depth() == 1
        client.delete(queue.name)
        for other in (
            lambda: send("test-batch-slow"),  # a task not named
            lambda: send(name, countdown=60),  # an ETA of its own
            lambda: send(name, expires=60),  # an expiry of its own
            lambda: send(name, time_limit=5),  # a time limit of its own
        ):
            other()
            assert take_next_if(channel, queue.name, [name]) is None and depth() == 1
            client.delete(queue.name)
        # The next message decides: one behind it is never looked at.
        send("test-batch-slow")
        send(name)
        assert take_next_if(channel, queue.name, [name]) is None and depth() == 2
        client.delete(queue.name)
        assert client.hlen("unacked") == 0


def test_a_pool_process_killed_mid_batch_loses_no_job_and_applies_no_result_twice(
    jobs: Stack,
) -> None:
    """A real worker, one pool process, a visibility timeout of two minutes: its first
    three jobs prove the type, the fourth takes the rest, and the ninth kills the pool
    process. Every instance completes well inside the timeout, each result once."""
    s = jobs
    visibility = 120
    marker = s.tmp / "kill-job"
    marker.touch()
    ids = _queued(s, FAST, 14, kill_at=8)
    began = time.monotonic()
    worker = worker_with(
        s,
        concurrency=1,
        DORMANT_REDIS_VISIBILITY_TIMEOUT=str(visibility),
        DORMANT_TEST_JOB_KILL=str(marker),
        **ROOMY,
    )
    try:
        wait_for(
            lambda: all(instance_status(s, i) == "completed" for i in ids) or None,
            visibility / 3,
            0.5,
            "every instance completed",
        )
        assert time.monotonic() - began < visibility / 3
        assert not marker.exists(), "the ninth job killed its pool process"
        log = worker.text()
        assert "signal 9 (SIGKILL)" in log, log[-3000:]
        assert "which ended mid-batch" in log, log[-3000:]
        _each_completed_once(s, ids)
        wait_for(lambda: _queue_empty(s) or None, 30, 0.2, "the queue drained")
    finally:
        worker.stop(sig=signal.SIGKILL)


def test_taken_messages_are_acknowledged_in_one_round_trip(
    jobs: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis

    from dormant.tasks.redis_transport import ack_together, take_next_if

    s = jobs
    name = "test-batch-fast"
    with _here(s) as app_module, app_module.app.connection_for_write() as conn:
        channel, queue = conn.default_channel, app_module.QUEUE
        for n in range(3):
            app_module.app.send_task(name, kwargs={"n": n}, queue=queue, routing_key=f"job.{name}")
        taken = [take_next_if(channel, queue.name, [name]) for _ in range(3)]
        assert all(m is not None for m in taken) and channel.client.hlen("unacked") == 3
        executed: list[int] = []
        real = redis.client.Pipeline.execute

        def counted(pipe: Any, *args: Any, **kwargs: Any) -> Any:
            executed.append(len(pipe.command_stack))
            return real(pipe, *args, **kwargs)

        monkeypatch.setattr(redis.client.Pipeline, "execute", counted)
        assert ack_together(taken) == []
        assert executed == [6], "two removals each, one pipeline"
        assert all(m.acknowledged for m in taken)
        assert channel.client.hlen("unacked") == 0 and channel.client.zcard("unacked_index") == 0

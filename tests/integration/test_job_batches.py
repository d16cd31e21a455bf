"""Several jobs per task (tasks/job_batches.py), against the real PostgreSQL and Redis,
counted, never timed.

Each instance is start → one service task → end. A job's result applied twice, or
lost, shows in its instance: exactly one ``job_completed`` trigger woke each one.

* fast jobs queued behind one run in that one's task, and their results commit
  together; a trigger task runs the fast jobs its batch just published; a type not
  yet proven fast, or a slow one, runs one job per task;
* one result the database refuses rolls back its own savepoint only and goes the
  single way; the others commit;
* the broker script takes only a plain first delivery of a named task, records it as
  kombu records a delivery (kombu's own restore puts it back), and leaves anything
  else where it is;
* a pool process killed in the middle of a batch loses no job and applies no result
  twice: its successor gives back what it took, well inside the visibility timeout.
"""

from __future__ import annotations

import base64
import json
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


FAST, SLOW, FOUR = "job_batch_fast", "job_batch_slow", "job_batch_four"


def _four_in_parallel(key: str) -> str:
    """Four fast jobs of one instance at once, joined: four results for one row."""
    tasks = "".join(
        f'<bpmn:serviceTask id="w{i}"><bpmn:extensionElements>'
        f'<zeebe:taskDefinition type="test-batch-fast" retries="1"/>'
        f"</bpmn:extensionElements></bpmn:serviceTask>"
        for i in range(4)
    )
    gateways = '<bpmn:parallelGateway id="fork"/><bpmn:parallelGateway id="join"/>'
    flows = [("start", "fork"), ("join", "end")]
    flows += [("fork", f"w{i}") for i in range(4)] + [(f"w{i}", "join") for i in range(4)]
    return model(key, start() + gateways + tasks + end(), flows)


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
            s.client.deploy(_four_in_parallel(FOUR))
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


def test_a_batch_of_starts_runs_the_fast_jobs_it_published_in_its_own_task(
    jobs: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    """Under load the jobs a trigger task just published are still queued when it ends:
    it takes them (through the broker, as a batch of jobs takes), runs them and applies
    their results together, where each would have waited its turn at the worker."""
    s = jobs
    _proven(s, FAST)
    caplog.set_level(logging.INFO, "dormant.jobs")
    ids = [s.client.start(FAST, {"n": n}) for n in range(5)]
    assert _deliver_here(s) == 1, "one delivery: four starts taken, then their five jobs"
    assert "batch of 5 job results applied in one transaction" in caplog.text
    _each_completed_once(s, ids)
    assert _queue_empty(s), "every taken start and job acknowledged"


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
    from dormant.tasks.redis_transport import LOOK_AHEAD, LOOK_AHEAD_BYTES, take_queued

    s = jobs
    name = "test-batch-fast"
    with _here(s) as app_module, app_module.app.connection_for_write() as conn:
        channel = conn.default_channel
        app, queue = app_module.app, app_module.QUEUE
        client = channel.client

        def send(task: str, n: int = 1, pad: str = "", **options: Any) -> None:
            app.send_task(
                task,
                kwargs={"n": n, "pad": pad},
                queue=queue,
                routing_key=f"job.{task}",
                exchange=queue.exchange.name,
                **options,
            )

        def take(most: int = 1) -> list[Any]:
            return take_queued(channel, queue.name, [name], most)

        def left() -> list[tuple[str, Any]]:
            """What is queued, next first: each message's task and its n."""
            out = []
            for raw in reversed(client.lrange(queue.name, 0, -1)):
                payload = json.loads(raw)
                _, kwargs, _ = json.loads(base64.b64decode(payload["body"]))
                out.append((payload["headers"]["task"], kwargs.get("n")))
            return out

        assert take() == [], "an empty queue"
        send(name)
        [message] = take()
        assert message.headers["task"] == name
        tag = message.delivery_tag
        assert client.hexists("unacked", tag) and client.zscore("unacked_index", tag)
        # Recorded as kombu records a delivery: kombu's own restore gives it back.
        channel.qos.restore_by_tag(tag, leftmost=True)
        assert left() == [(name, 1)] and not client.hexists("unacked", tag)
        # Given back, it is a redelivery: never taken, left where it is.
        assert take() == [] and left() == [(name, 1)]
        client.delete(queue.name)
        for other in (
            lambda: send("test-batch-slow"),  # a task not named
            lambda: send(name, countdown=60),  # an ETA of its own
            lambda: send(name, expires=60),  # an expiry of its own
            lambda: send(name, time_limit=5),  # a time limit of its own
            lambda: send(name, pad="x" * LOOK_AHEAD_BYTES),  # too large to decode there
        ):
            other()
            assert take() == [] and len(left()) == 1
            client.delete(queue.name)
        # What it does not take keeps its place; the oldest of the others come first.
        send("test-batch-slow", n=1)
        send(name, n=2)
        send("test-batch-slow", n=3)
        send(name, n=4)
        send(name, n=5)
        taken = take(most=2)
        assert [m.payload[1]["n"] for m in taken] == [2, 4]
        assert left() == [("test-batch-slow", 1), ("test-batch-slow", 3), (name, 5)]
        for m in taken:
            m.ack()
        client.delete(queue.name)
        # It looks LOOK_AHEAD messages deep, no deeper.
        for n in range(LOOK_AHEAD):
            send("test-batch-slow", n=n)
        send(name, n=LOOK_AHEAD)
        assert take() == [] and len(left()) == LOOK_AHEAD + 1
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

    from dormant.tasks.redis_transport import ack_together, take_queued

    s = jobs
    name = "test-batch-fast"
    with _here(s) as app_module, app_module.app.connection_for_write() as conn:
        channel, queue = conn.default_channel, app_module.QUEUE
        for n in range(3):
            app_module.app.send_task(name, kwargs={"n": n}, queue=queue, routing_key=f"job.{name}")
        taken = take_queued(channel, queue.name, [name], 3)
        assert len(taken) == 3 and channel.client.hlen("unacked") == 3
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


def test_two_workers_batching_results_of_the_same_instances_apply_each_once(
    jobs: Stack,
) -> None:
    """Twenty instances, each with four jobs queued at once, drained by two workers of
    two pool processes: results of one instance land in different batches at once, and
    each batch locks its instances in the same order. Every result applied once, every
    join passed once."""
    s = jobs
    ids = _queued(s, FOUR, 20)
    workers = [worker_with(s, concurrency=2, **ROOMY) for _ in range(2)]
    try:
        wait_for(
            lambda: all(instance_status(s, i) == "completed" for i in ids) or None,
            90,
            0.5,
            "every instance completed",
        )
        assert {i: woken_by(s, i, "job_completed") for i in ids} == {i: 4 for i in ids}
        wait_for(lambda: _queue_empty(s) or None, 30, 0.2, "the queue drained")
        batches = sum(w.text().count("job results applied in one transaction") for w in workers)
        assert batches > 0, "the jobs were run in batches"
    finally:
        for w in workers:
            w.stop(sig=signal.SIGKILL)

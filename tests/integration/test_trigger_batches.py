"""Several triggers per task (tasks/drain.py, persistence/savepoints.py), against the
real PostgreSQL and Redis, counted, never timed.

Every instance here waits for message ``batch-tick`` in a loop: each message applied
moves its revision up by exactly one, so a trigger applied twice, or two applies that
did not see each other (a lost update), shows in the revision.

* one instance's failure inside a batch rolls back its own savepoint only, and is kept
  as a failed trigger as on its own; the others commit;
* two workers batching messages for the same instances apply every one exactly once;
* a worker killed in the middle of a batch (before its commit, or during it) loses no
  trigger and applies none twice: the broker delivers the batch again, and what
  committed is recognised by its trigger ids.

The database's own triggers (a PL/pgSQL function on ``instances``) stand in for the
failure and for the slow statement a kill lands in: a real refusal and a real wait.
"""

from __future__ import annotations

import json
import logging
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import text

from dormant.persistence import clock
from dormant.persistence.settings import Settings
from dormant.persistence.store import NewInstance
from tests.integration.conftest import Proc, Stack, _urls, wait_for

pytestmark = pytest.mark.integration

LOOP = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
                  xmlns:zeebe="http://camunda.org/schema/zeebe/1.0"
                  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
                  id="d" targetNamespace="http://dormant.dev/test">
  <bpmn:process id="batch_loop" isExecutable="true">
    <bpmn:startEvent id="start"><bpmn:outgoing>f1</bpmn:outgoing></bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="merge" />
    <bpmn:exclusiveGateway id="merge">
      <bpmn:incoming>f1</bpmn:incoming><bpmn:incoming>f_back</bpmn:incoming>
      <bpmn:outgoing>f2</bpmn:outgoing>
    </bpmn:exclusiveGateway>
    <bpmn:sequenceFlow id="f2" sourceRef="merge" targetRef="tick" />
    <bpmn:intermediateCatchEvent id="tick">
      <bpmn:incoming>f2</bpmn:incoming><bpmn:outgoing>f3</bpmn:outgoing>
      <bpmn:messageEventDefinition id="tick-def" messageRef="msg-tick" />
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f3" sourceRef="tick" targetRef="more" />
    <bpmn:exclusiveGateway id="more" default="f_back">
      <bpmn:incoming>f3</bpmn:incoming>
      <bpmn:outgoing>f_back</bpmn:outgoing><bpmn:outgoing>f_end</bpmn:outgoing>
    </bpmn:exclusiveGateway>
    <bpmn:sequenceFlow id="f_back" sourceRef="more" targetRef="merge" />
    <bpmn:sequenceFlow id="f_end" sourceRef="more" targetRef="end">
      <bpmn:conditionExpression xsi:type="bpmn:tFormalExpression">=false</bpmn:conditionExpression>
    </bpmn:sequenceFlow>
    <bpmn:endEvent id="end"><bpmn:incoming>f_end</bpmn:incoming></bpmn:endEvent>
  </bpmn:process>
  <bpmn:message id="msg-tick" name="batch-tick">
    <bpmn:extensionElements>
      <zeebe:subscription correlationKey="=orderId" />
    </bpmn:extensionElements>
  </bpmn:message>
</bpmn:definitions>
"""


@pytest.fixture(scope="module")
def batched(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """A PostgreSQL + Redis stack with no process running: each test starts the
    workers it needs once its messages are queued, so they meet a backlog. Redis gives
    a dead worker's messages back after 2 s (not a minute)."""
    tmp = tmp_path_factory.mktemp("batches")
    with _urls("pg_redis", tmp, request) as urls:
        s = Stack(*urls, tmp)
        s.env["DORMANT_REDIS_VISIBILITY_TIMEOUT"] = "2"
        try:
            s.client.deploy(LOOP)
            yield s
        finally:
            s.close()


def _instances(s: Stack, count: int) -> list[str]:
    """``count`` instances waiting for their first tick, started in this process."""
    tag = uuid.uuid4().hex[:6]
    ids = [f"{tag}-{i}" for i in range(count)]
    for instance_id in ids:
        s.client._store.start(
            NewInstance("batch_loop", instance_id, {"orderId": instance_id}), now=clock.now()
        )
    return ids


def _revisions(s: Stack, ids: list[str]) -> dict[str, int]:
    with s.client._store.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id, revision FROM instances WHERE id = ANY(:ids)"), {"ids": ids}
        ).all()
    return {row.id: int(row.revision) for row in rows}


def _ticks(s: Stack, ids: list[str], rounds: int) -> None:
    """``rounds`` ticks for every instance, interleaved, queued in one go."""
    s.client.send_messages(
        [{"name": "batch-tick", "correlation_key": i} for _ in range(rounds) for i in ids]
    )


def _sql(s: Stack, statement: str) -> None:
    with s.client._store.engine.begin() as conn:
        conn.execute(text(statement))


def _worker(s: Stack, name: str, concurrency: int = 1) -> Proc:
    proc = Proc(
        f"{name}-{len(s.procs)}",
        s.dormant("worker", "--concurrency", str(concurrency), "--loglevel", "INFO"),
        s.env,
        s.tmp,
    )
    s.procs.append(proc)
    return proc.start()


def _queue_empty(s: Stack) -> bool:
    """Nothing queued and nothing held unacknowledged (kombu's Redis keys)."""
    import redis

    client = redis.Redis.from_url(s.broker_url)
    try:
        return bool(client.llen("dormant") == 0 and client.hlen("unacked") == 0)
    finally:
        client.close()


@contextmanager
def _here(s: Stack) -> Iterator[Any]:
    """This process as a worker of ``s``: its app and Store point at the stack."""
    from dormant.tasks import app as app_module
    from dormant.tasks import triggers

    assert triggers.message.name == "dormant.message"  # the tasks this process runs
    # Put back what was there: ``configure`` writes its URLs to the environment, so
    # ``Settings.from_env()`` afterwards would read this stack's again.
    previous = app_module.settings
    app_module.configure(
        Settings.from_env(
            database_url=s.database_url, broker_url=s.broker_url, redis_visibility_timeout=2
        )
    )
    try:
        yield app_module
    finally:
        app_module.configure(previous)


def _deliver_here(s: Stack, most: int | None = None) -> int:
    """Take the queued messages one at a time (at most ``most``) and run each as a
    worker runs a delivery (Celery's tracer, acknowledged after), first handing back
    what a dead worker held past the visibility timeout (kombu's own restore); how many
    deliveries ran."""
    from celery.app.trace import trace_task

    from dormant.tasks import drain

    ran = 0
    with _here(s) as app_module, app_module.app.connection_for_read() as conn:
        channel = conn.default_channel
        channel.qos.restore_visible(num=1000, interval=1)
        queue = app_module.QUEUE.bind(channel)
        while ran != most and (message := queue.get(no_ack=False, accept=["json"])) is not None:
            name, args, kwargs, req = drain._decode(message, "test@batches")
            trace_task(app_module.app.tasks[name], req["id"], args, kwargs, req, app=app_module.app)
            message.ack()
            ran += 1
    return ran


def test_a_failing_trigger_rolls_back_only_its_own_savepoint(batched: Stack) -> None:
    """Run in this process, as a worker runs a delivery: the first message's task takes
    the other four queued behind it into its batch."""
    s = batched
    ids = _instances(s, 5)
    bad = ids[2]
    _sql(
        s,
        "CREATE FUNCTION refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF NEW.id = '{bad}' THEN RAISE EXCEPTION 'refused by the test'; END IF; "
        "RETURN NEW; END $$",
    )
    _sql(
        s,
        "CREATE TRIGGER refuse_bad BEFORE UPDATE ON instances FOR EACH ROW "
        "EXECUTE FUNCTION refuse_bad()",
    )
    before = _revisions(s, ids)
    _ticks(s, ids, 1)
    try:
        assert _deliver_here(s) == 1, "one delivery took the other four into its batch"
    finally:
        _sql(s, "DROP TRIGGER refuse_bad ON instances")
    after = _revisions(s, ids)
    assert {i: after[i] - before[i] for i in ids} == {i: 0 if i == bad else 1 for i in ids}
    with s.client._store.engine.connect() as conn:
        kept = conn.execute(
            text("SELECT error FROM failed_triggers WHERE body LIKE :k"),
            {"k": f"%{bad}%"},
        ).all()
    assert len(kept) == 1 and "refused by the test" in kept[0].error
    assert _queue_empty(s), "every trigger of the batch acknowledged, the failed one too"


def test_a_connection_lost_mid_batch_is_a_transient_failure_of_every_trigger(
    batched: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    """The batch's connection ends in the middle of it (the server ends the session at
    the third instance's write, once): the triggers after it would only meet the
    invalidated connection, and nothing of the batch can commit. The task that led it
    retries as on a lost connection, the taken ones go back, and each tick is applied
    once: no failed trigger is kept for a person."""
    s = batched
    ids = _instances(s, 5)
    cut = ids[2]
    seq = f"cut_{uuid.uuid4().hex[:6]}"
    _sql(s, f"CREATE SEQUENCE {seq}")
    _sql(
        s,
        f"CREATE FUNCTION {seq}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF NEW.id = '{cut}' AND nextval('{seq}') = 1 THEN "
        "PERFORM pg_terminate_backend(pg_backend_pid()); END IF; RETURN NEW; END $$",
    )
    _sql(
        s,
        f"CREATE TRIGGER {seq} BEFORE UPDATE ON instances FOR EACH ROW EXECUTE FUNCTION {seq}()",
    )
    before = _revisions(s, ids)
    _ticks(s, ids, 1)
    caplog.set_level(logging.INFO, logger="dormant.triggers")
    try:
        _deliver_here(s)
    finally:
        _sql(s, f"DROP TRIGGER {seq} ON instances")
    with s.client._store.engine.connect() as conn:
        kept = conn.execute(
            text("SELECT error FROM failed_triggers WHERE body LIKE :k"),
            {"k": f"%{ids[0][:6]}%"},
        ).all()
    assert kept == [], kept
    assert _revisions(s, ids) == {i: before[i] + 1 for i in ids}
    assert _queue_empty(s)
    # The loss itself is what the batch reports and retries on, not what the triggers
    # after it would have met on the invalidated connection.
    retried = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert retried and not [m for m in retried if "PendingRollbackError" in m], retried


def test_a_message_the_batch_cannot_take_is_left_where_it_is(batched: Stack) -> None:
    """A signal queued between two ticks keeps its place in the queue (Redis:
    tasks/redis_transport.py ``take_queued`` looks before it takes): the first tick's
    task takes the second from behind it, and the signal runs next, as a task of its
    own."""
    import redis

    s = batched
    ids = _instances(s, 2)
    before = _revisions(s, ids)
    s.client.send_message("batch-tick", correlation_key=ids[0])
    s.client.signal("batch-nobody-listens")
    s.client.send_message("batch-tick", correlation_key=ids[1])
    assert _deliver_here(s, most=1) == 1
    assert _revisions(s, ids) == {i: before[i] + 1 for i in ids}, "both ticks in one batch"
    client = redis.Redis.from_url(s.broker_url)
    try:
        queued = [json.loads(raw)["headers"]["task"] for raw in client.lrange("dormant", 0, -1)]
    finally:
        client.close()
    assert queued == ["dormant.signal"]
    assert _deliver_here(s) == 1
    assert _queue_empty(s)
    with s.client._store.engine.connect() as conn:
        inbox_left = conn.execute(
            text("SELECT count(*) FROM inbox WHERE kind = :k AND processed_at IS NULL"),
            {"k": "dormant.signal"},
        ).scalar_one()
    assert inbox_left == 0, "the signal was applied as a task of its own"


def test_two_workers_batching_the_same_instances_apply_each_trigger_once(batched: Stack) -> None:
    s = batched
    ids = _instances(s, 3)
    rounds = 30
    before = _revisions(s, ids)
    _ticks(s, ids, rounds)
    workers = [_worker(s, "a", 2), _worker(s, "b", 2)]
    try:
        wait_for(
            lambda: _revisions(s, ids) == {i: before[i] + rounds for i in ids} or None,
            90,
            0.2,
            f"{rounds} ticks applied to each instance: {_revisions(s, ids)} from {before}",
        )
        wait_for(lambda: _queue_empty(s) or None, 30, 0.2, "the queue drained")
        assert _revisions(s, ids) == {i: before[i] + rounds for i in ids}
        batches = sum(w.text().count("triggers applied in one transaction") for w in workers)
        assert batches > 0, "the backlog was taken in batches"
    finally:
        for w in workers:
            w.stop(sig=signal.SIGKILL)


@pytest.mark.parametrize("when", ["before_commit", "at_commit"])
def test_a_worker_killed_mid_batch_loses_nothing_and_applies_nothing_twice(
    batched: Stack, when: str
) -> None:
    """The batch stalls in the database at one instance's write (``before_commit``:
    its row trigger sleeps, later rows not yet written; ``at_commit``: a deferred
    trigger sleeps in the COMMIT, which the server completes after the kill); the
    worker is killed there. Redis hands every message back, and this process applies
    them as a worker would."""
    s = batched
    ids = _instances(s, 6)
    slow = ids[2]
    seq = f"slow_{uuid.uuid4().hex[:6]}"
    constraint = "CONSTRAINT " if when == "at_commit" else ""
    deferred = "DEFERRABLE INITIALLY DEFERRED " if when == "at_commit" else ""
    _sql(s, f"CREATE SEQUENCE {seq}")
    _sql(
        s,
        f"CREATE FUNCTION {seq}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"IF NEW.id = '{slow}' AND nextval('{seq}') = 1 THEN PERFORM pg_sleep(3); END IF; "
        "RETURN NEW; END $$",
    )
    _sql(
        s,
        f"CREATE {constraint}TRIGGER {seq} AFTER UPDATE ON instances {deferred}"
        f"FOR EACH ROW EXECUTE FUNCTION {seq}()",
    )
    before = _revisions(s, ids)
    _ticks(s, ids, 1)
    doomed = _worker(s, "doomed")
    try:
        armed = wait_for(lambda: _stalled(s), 30, 0.05, "the batch to stall in the database")
        doomed.stop(sig=signal.SIGKILL)
        # Each tick applied re-arms its instance's subscription, which takes a
        # transaction-scoped advisory lock (persistence/holds.py lock_message_key): the
        # stalled transaction had applied the ticks sorted before the slow one's.
        assert armed >= 3, f"the kill landed in a batch ({armed} ticks applied in it)"
        time.sleep(2.5)  # Redis hands a dead worker's messages back after 2 s (the fixture)
        _deliver_here(s)
        assert _queue_empty(s), "every message taken back and acknowledged"
        assert _revisions(s, ids) == {i: before[i] + 1 for i in ids}
    finally:
        _sql(s, f"DROP TRIGGER {seq} ON instances")
        for proc in s.procs:
            proc.stop(sig=signal.SIGKILL)


def _stalled(s: Stack) -> int:
    """The advisory locks (one per subscription armed) held by the transaction asleep
    in the test's trigger; 0 while none sleeps."""
    with s.client._store.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE a.datname = current_database() AND a.wait_event = 'PgSleep' "
                    "AND l.locktype = 'advisory'"
                )
            ).scalar_one()
        )

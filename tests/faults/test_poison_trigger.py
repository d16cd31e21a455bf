"""Poison triggers (issue 24, row 1): a trigger that ends its worker at every delivery is
refused past ``DORMANT_MAX_DELIVERIES`` and kept as a failed trigger classified
``PoisonTrigger``, while other instances keep applying their triggers.

Both ways a delivery that may follow a dead one is counted (persistence/deliveries.py):

- a Client's start that passes the hard time limit: Celery puts it back on its queue,
  flagged as redelivered, and the worker counts it on its inbox row (were the message
  lost, the inbox sweep would count the re-send in the write that marks it);
- a plain Celery producer's message (no inbox row) that kills its pool process: the
  broker requeues it flagged as redelivered, and the worker counts it on a row keyed by
  its trigger id;
- a plain producer's start that passes the hard time limit: Celery puts it back on its
  queue instead of acknowledging it (``acks_on_timeout`` off, tasks/app.py), so it comes
  again flagged as redelivered and is counted like the killed one. Acknowledged, with no
  inbox row for the sweep, it would be lost.

Then the fault fixed: an operator's retry gives each its deliveries again and
it applies (docs/limits.md, "What an operator sees: poison triggers").
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from celery import Celery

from dormant.tasks import wire
from tests.faults.kit import included_worker, loop_instances
from tests.integration.conftest import Stack, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.integration]

MAX = 2


def _one(s: Stack, sql: str, *params: str) -> int | None:
    url = s.database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as conn:
        row = conn.execute(sql, params).fetchone()
    return int(row[0]) if row else None


def test_triggers_that_end_their_worker_become_poison_triggers(fstack: Stack) -> None:
    s = fstack
    s.env["DORMANT_MAX_DELIVERIES"] = str(MAX)
    s.env["DORMANT_OUTBOX_REDELIVER_AFTER_SECONDS"] = "1"
    # Short, yet room for a fresh pool process's first trigger on a loaded machine.
    s.env["DORMANT_TRIGGER_SOFT_TIME_LIMIT_SECONDS"] = "3"
    s.env["DORMANT_TRIGGER_TIME_LIMIT_SECONDS"] = "4"
    # A poison trigger's first delivery may share a batch (tasks/drain.py) and take it
    # down once; the batch's other triggers, a canary among them, come back from Redis
    # after the visibility timeout (docs/operations.md, "Several triggers per task"):
    # 8 s here, not a minute, so the canary's waits below stay what they measure.
    s.env["DORMANT_REDIS_VISIBILITY_TIMEOUT"] = "8"
    fault = s.tmp / "poison-on"
    fault.touch()
    worker = included_worker(s, DORMANT_TEST_POISON=str(fault))
    s.beat()
    name, ids = loop_instances(s, 2)
    key = next(iter(ids)).rsplit("-", 1)[0]
    (canary, canary_id), (target, target_id) = ids.items()

    hung = s.client.start(key, {"id": "hung", "n": 0, "poison": "hang"})
    producer = Celery(broker=s.broker_url)
    killer = producer.send_task(
        "dormant.message",
        kwargs={"name": name, "correlation_key": target, "variables": {"poison": "kill"}},
    ).id
    plain_hung = "plain-hung-" + killer[:8]
    hanger = producer.send_task(
        "dormant.start",
        kwargs=wire.start(key, plain_hung, {"id": "plain", "n": 0, "poison": "hang"}).kwargs,
    ).id

    # The others keep flowing while the poison triggers come and go.
    for i in range(3):
        s.client.send_message(name, canary, message_id=f"canary-{i}", ttl=300)
        wait_for(
            lambda i=i: int(s.client.instance(canary_id).variables.get("n", 0)) == i + 1,
            60,
            0.2,
            f"canary message {i} applied beside the poison triggers",
        )

    def kept() -> tuple[list[Any], list[Any], list[Any]]:
        every = s.client.failed_triggers()
        return (
            [f for f in every if f.instance_id == hung],
            [f for f in every if f.trigger_id == killer],
            [f for f in every if f.trigger_id == hanger],
        )

    try:
        wait_for(lambda: all(kept()), 120, 0.5, "the three poison triggers kept")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {kept()}\n{s.diagnostics()}") from None
    ((started,), (killed,), (plain,)) = kept()
    for failed in (started, killed, plain):
        assert failed.error_class == "PoisonTrigger", failed
        assert f"delivery {MAX + 1} refused" in failed.error, failed
    # The last error known: the hard time limit, as the worker's main process kept it;
    # a pool process killed outright returns none, so its ending is named.
    assert "last error: TimeLimitExceeded: past the hard time limit (4" in started.error, started
    assert "last error: TimeLimitExceeded" in plain.error, plain
    assert "last error: the worker process ended" in killed.error, killed
    # The counts are durable rows, not the worker's memory.
    assert (
        _one(s, "SELECT redeliveries FROM inbox WHERE payload->'kwargs'->>'instance_id' = %s", hung)
        == MAX
    )
    counted = "SELECT redeliveries FROM trigger_redeliveries WHERE trigger_id = %s"
    assert _one(s, counted, killer) == MAX
    assert _one(s, counted, hanger) == MAX
    log = worker.text()
    assert "Hard time limit" in log and "WorkerLostError" in log, log[-3000:]
    assert int(s.client.instance(target_id).variables.get("n", 0)) == 0

    # Fixed: the retries apply, their counts from zero.
    fault.unlink()
    s.client.retry_trigger(started.id)
    s.client.retry_trigger(killed.id)
    s.client.retry_trigger(plain.id)
    assert _one(s, counted, killer) is None
    s.wait_status(hung, "active", 60)
    s.wait_status(plain_hung, "active", 60)
    wait_for(
        lambda: int(s.client.instance(target_id).variables.get("n", 0)) == 1,
        60,
        0.2,
        "the retried message applied",
    )
    assert s.client.failed_triggers() == []

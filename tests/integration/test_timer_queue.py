"""Timers on a queue of their own: a backlog in ``dormant`` never stands in front of a
timer (tasks/app.py, docs/waits.md).

The routing checks need no services: the keys beat's scan and the scan's fires are
published with are matched by kombu's own topic matcher against each queue's
bindings. The backlog test runs a real ``dormant worker --concurrency 1`` (the default
queues) and a real beat on PostgreSQL + Redis, with hundreds of triggers queued in
``dormant`` before the worker starts: the timer's instance completes while most of
them are still queued, which it could not if the scan and the fire waited in
``dormant`` behind them.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from kombu.entity import Queue
from kombu.transport.virtual.exchange import TopicExchange

from dormant.tasks import app as tasks_app
from dormant.tasks import lanes, timers, wire
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import end, model, start, timer_catch

pytestmark = pytest.mark.integration


def _routed(queue: Queue, routing_key: str) -> bool:
    """Would the ``dormant`` topic exchange deliver ``routing_key`` to ``queue``?"""
    topic = TopicExchange(None)
    table = [
        topic.prepare_bind(queue.name, tasks_app.EXCHANGE.name, b.routing_key, None)
        for b in queue.bindings
    ]
    return bool(topic.lookup(table, tasks_app.EXCHANGE.name, routing_key, None))


def _scan_publishes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Run the scan task in-process on one fake claim; the (task, routing key) it sends."""
    from dormant.scheduler.deadlines import Claim, ClaimKind

    claim = Claim(
        instance_id="i-1",
        wait_id="w-1",
        claim_token="c-1",
        due_at=datetime(2026, 1, 1, tzinfo=UTC),
        kind=ClaimKind.DEADLINE,
    )
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(timers, "claim_due", lambda *_a, **_k: [claim])
    monkeypatch.setattr(timers, "store", lambda: None)
    monkeypatch.setattr(timers, "publish", lambda task, key, *_a, **_k: sent.append((task, key)))
    assert timers.scan_deadlines.run() == 1
    return sent


def test_scan_and_fire_keys_reach_the_timer_queue_only(monkeypatch: pytest.MonkeyPatch) -> None:
    scan = tasks_app.app.conf.beat_schedule["dormant.scan_deadlines"]["options"]
    assert scan["queue"] == tasks_app.TIMER_QUEUE.name
    fires = _scan_publishes(monkeypatch)
    assert fires == [("dormant.fire_deadlines", tasks_app.TIMER_FIRE_KEY)]  # one batch
    for key in (scan["routing_key"], tasks_app.TIMER_FIRE_KEY):
        assert _routed(tasks_app.TIMER_QUEUE, key), key
        # Never also the dormant queue: a fire delivered to both would run twice.
        assert not _routed(tasks_app.QUEUE, key), key
        assert tasks_app.queue_for(key) is tasks_app.TIMER_QUEUE
    # Messages queued under the keys of earlier releases still reach the dormant queue
    # (same task names), and none of the dormant queue's own keys reach the timers'.
    for old in ("trigger.timer", "trigger.scan_deadlines"):
        assert _routed(tasks_app.QUEUE, old) and not _routed(tasks_app.TIMER_QUEUE, old)
    for key in ("trigger.start", "message.paid", "signal.go", "job.charge-card"):
        assert not _routed(tasks_app.TIMER_QUEUE, key), key


def test_a_worker_reads_the_timer_queue_first_by_default() -> None:
    assert tasks_app.WORKER_QUEUES.split(",") == [
        tasks_app.TIMER_QUEUE.name,
        tasks_app.QUEUE.name,
        tasks_app.PLAIN_QUEUE.name,
        tasks_app.QUARANTINE_QUEUE.name,  # the lanes (tasks/lanes.py): last
    ]
    assert tasks_app.MAIN_LANE_QUEUES.split(",") == tasks_app.WORKER_QUEUES.split(",")[:3]
    assert tasks_app.app.conf.task_queues[0] is tasks_app.TIMER_QUEUE


def test_the_quarantine_lane_has_a_queue_no_other_key_reaches() -> None:
    moved = lanes.quarantine_key("trigger.start")
    assert tasks_app.queue_for(moved) is tasks_app.QUARANTINE_QUEUE
    assert _routed(tasks_app.QUARANTINE_QUEUE, moved)
    assert not _routed(tasks_app.QUEUE, moved) and not _routed(tasks_app.TIMER_QUEUE, moved)
    for key in ("trigger.start", "message.paid", "timer.fire", "job.charge-card"):
        assert not _routed(tasks_app.QUARANTINE_QUEUE, key), key


@pytest.mark.parametrize(
    ("queues", "warned"),
    [
        ("dormant,celery", True),  # the whole default of earlier releases
        ("dormant", True),
        (None, False),
        ("dormant.timers,dormant,celery", False),
        ("dormant.timers", False),
        ("payments", False),
    ],
)
def test_a_queue_list_without_the_timers_is_named_at_start(
    queues: str | None, warned: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    from dormant.tasks.cli import _warn_without_timers

    _warn_without_timers(queues)
    assert ("timers fire only if another worker reads" in capsys.readouterr().err) is warned


BACKLOG = 400


@pytest.mark.parametrize("stack_urls", ["pg_redis"], indirect=True)
def test_a_backlog_in_dormant_does_not_delay_a_timer(bare_stack: Stack) -> None:
    import redis

    from dormant.persistence.settings import Settings
    from dormant.persistence.store import NewInstance, Store

    stack = bare_stack
    r: Any = redis.Redis.from_url(stack.broker_url)
    key = f"tq_{uuid.uuid4().hex[:8]}"
    stack.client.deploy(
        model(key, start() + timer_catch("tm", "PT1S") + end(), [("start", "tm"), ("tm", "end")])
    )
    # Parked in-process (a start through the broker would queue behind the backlog too).
    store = Store(
        settings=Settings.from_env(database_url=stack.database_url, broker_url=stack.broker_url)
    )
    try:
        store.start(NewInstance(key, "timed", {}), now=datetime.now(UTC))
    finally:
        store.close()
    # The backlog: messages nobody waits for, cheap to apply, queued before any worker.
    stack.client.send_messages(
        [{"name": f"nobody-{key}", "correlation_key": str(i)} for i in range(BACKLOG)]
    )
    assert r.llen(tasks_app.QUEUE.name) == BACKLOG
    stack.beat()
    wait_for(lambda: r.llen(tasks_app.TIMER_QUEUE.name) >= 1, what="beat's scan in dormant.timers")
    # Beat's scan did not go to dormant (its sweeps of other tables do, behind the backlog).
    queued = [json.loads(m)["headers"]["task"] for m in r.lrange(tasks_app.QUEUE.name, 0, -1)]
    assert wire.SCAN_DEADLINES not in queued and queued.count(wire.MESSAGE) == BACKLOG

    stack.worker(concurrency=1)  # the default queues: dormant.timers, dormant, celery
    stack.wait_status("timed", "completed")
    left = r.llen(tasks_app.QUEUE.name)
    assert left >= BACKLOG // 2, f"the timer fired only after {BACKLOG - left} backlog triggers"
    # The same worker drains the backlog too (it reads both queues).
    wait_for(lambda: r.llen(tasks_app.QUEUE.name) < left, what="the backlog shrinking")


def test_the_shipped_process_lists_run_a_timer_worker() -> None:
    """compose.yaml and the Procfile each run a worker on the timer queue alone."""
    from tests.integration.conftest import REPO

    procfile = (REPO / "Procfile").read_text().splitlines()
    assert any(
        "dormant worker" in ln and "--queues dormant.timers " in ln
        for ln in procfile
        if not ln.startswith("#")
    )
    compose = (REPO / "compose.yaml").read_text()
    assert '"worker", "--queues", "dormant.timers"' in compose


def test_the_sweeps_queued_behind_a_backlog_expire() -> None:
    """Every periodic sweep beat sends to the dormant queue expires after a few of its
    periods (a minute at least), so workers coming back to a backlog discard the stale
    ones unrun."""
    schedule = tasks_app.app.conf.beat_schedule
    behind = {n: e for n, e in schedule.items() if e["options"]["queue"] == tasks_app.QUEUE.name}
    assert behind, schedule
    for name, entry in behind.items():
        every = float(entry["schedule"])
        expires = entry["options"].get("expires")
        assert expires == max(4 * every, 60.0), name  # a minute at least: host clocks differ

"""The jobs a batch of triggers dispatched go out in one Redis round trip
(tasks/app.py ``publishing_together``; tasks/drain.py): nothing is sent before the
block ends, everything is sent when it does, and what must follow a send (a published
job's outbox row deleted) runs only once it is sent."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from dormant.persistence.settings import Settings
from dormant.tasks import app as tasks_app
from tests.integration.conftest import _redis_db

pytestmark = pytest.mark.integration


@pytest.fixture
def broker_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    yield from _configured(monkeypatch)


def _configured(monkeypatch: pytest.MonkeyPatch, **urls: str) -> Iterator[str]:
    gen = _redis_db()
    url = next(gen)
    previous = tasks_app.settings
    for var in ("DORMANT_DATABASE_URL", "DORMANT_BROKER_URL"):
        monkeypatch.setenv(var, os.environ.get(var, ""))
    tasks_app.configure(Settings.from_env({}, broker_url=url, **urls))
    try:
        yield url
    finally:
        if tasks_app._store is not None:
            tasks_app._store.close()
        tasks_app.configure(previous)
        gen.close()


def _job(n: int, *, together: bool = True) -> None:
    tasks_app.publish(
        "bench-noop-job", "job.noop", {"n": n}, queue=tasks_app.QUEUE, together=together
    )


def test_a_blocks_jobs_are_sent_together_when_it_ends(broker_url: str) -> None:
    r = redis.Redis.from_url(broker_url)
    sent: list[int] = []
    with tasks_app.publishing_together():
        for n in range(5):
            _job(n)
            tasks_app.after_publishing(lambda n=n: sent.append(n))  # type: ignore[misc]
        _job(99, together=False)  # one that may not wait goes at once
        assert r.llen("dormant") == 1
        assert sent == []
    assert r.llen("dormant") == 6
    assert sent == [0, 1, 2, 3, 4]
    _job(7)  # outside a block: at once
    tasks_app.after_publishing(lambda: sent.append(7))
    assert r.llen("dormant") == 7 and sent[-1] == 7
    r.close()


def test_a_block_that_fails_sends_nothing_and_runs_nothing_after(broker_url: str) -> None:
    r = redis.Redis.from_url(broker_url)
    sent: list[Any] = []
    with pytest.raises(RuntimeError), tasks_app.publishing_together():
        _job(1)
        tasks_app.after_publishing(lambda: sent.append(1))
        raise RuntimeError("the replays broke")
    assert r.llen("dormant") == 0  # the outbox rows stay: the sweep sends them
    assert sent == []
    r.close()


def test_a_batch_the_broker_refuses_is_left_to_the_sweep(
    broker_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kombu.transport import redis as kombu_redis

    def refused(self: Any) -> None:
        raise ConnectionError("the broker went away")

    monkeypatch.setattr(kombu_redis.PublishBatch, "flush", refused)
    sent: list[int] = []
    with tasks_app.publishing_together():  # no exception out of the block
        _job(1)
        tasks_app.after_publishing(lambda: sent.append(1))
    assert sent == []  # its outbox row is not deleted: the sweep sends the job


def test_a_late_job_row_published_by_two_publishers_goes_once(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's row written late (a slow transaction: its time is its start's) is old
    enough for the sweep the moment it commits. Its trigger's shell and the sweep (or
    two ticks of it) may then both publish it; whoever takes the row first sends the
    job, the other sends nothing (tasks/outbox.py ``publish_row``)."""
    from datetime import UTC, datetime, timedelta

    from bench.models import SERVICE
    from dormant.persistence.store import NewInstance
    from dormant.tasks.outbox import publish_rows
    from tests.conftest import _truncate

    _truncate(pg_url)
    configured = _configured(monkeypatch, database_url=pg_url)
    broker = next(configured)
    try:
        store = tasks_app.store()
        store.deployments.deploy(SERVICE, datetime.now(UTC))
        after = tasks_app.settings.outbox_sweep_after_seconds
        late = datetime.now(UTC) - timedelta(seconds=after)
        applied = store.start(NewInstance("bench_service", "late-1", {}), now=late)
        [row] = applied.outbox_rows
        r = redis.Redis.from_url(broker)
        assert publish_rows([row]) == 1  # the trigger's shell
        assert publish_rows(store.outbox.pending_outbox(0)) == 0  # the sweep: nothing left
        publish_rows([row])  # a second tick, with the row it listed before: not sent
        assert r.llen("dormant") == 1
        r.close()
    finally:
        configured.close()

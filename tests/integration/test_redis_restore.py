"""A dead worker's unacknowledged message, restored by a fresh connection before it
declared any queue (what kombu does when a worker connects), lands in the ``dormant``
queue instead of being dropped: tasks/redis_transport.py."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer

from persistence.settings import Settings
from tasks.app import EXCHANGE, QUEUE, _conf
from tests.integration.conftest import _redis_db

pytestmark = pytest.mark.integration


@pytest.fixture
def broker_url() -> Any:
    gen = _redis_db()
    url = next(gen)
    try:
        yield url
    finally:
        gen.close()


def test_a_restore_before_any_declaration_keeps_the_message(broker_url: str) -> None:
    opts = {"visibility_timeout": 1, "unacked_restore_interval": 1}
    dead = Connection(broker_url, transport_options=opts)
    channel = dead.channel()
    QUEUE(channel).declare()
    dead.Producer(channel).publish(
        {"job": 1}, exchange=EXCHANGE, routing_key="job.charge-card", declare=[QUEUE]
    )
    got: list[Any] = []
    Consumer(channel, queues=[QUEUE], callbacks=[lambda _b, m: got.append(m)]).consume()
    dead.drain_events(timeout=5)
    assert len(got) == 1  # delivered, never acknowledged: the worker "dies" here
    r = redis.Redis.from_url(broker_url)
    assert r.hlen("unacked") == 1
    time.sleep(1.5)  # past the visibility timeout
    transport = _conf(Settings(broker_url=broker_url))["broker_transport"]
    assert transport == "tasks.redis_transport:Transport"
    fresh = Connection(broker_url, transport_options=opts, transport=transport)
    fresh.channel().qos.restore_visible(num=10, interval=1)
    assert r.hlen("unacked") == 0
    assert r.llen("dormant") == 1, "the restored message was dropped"
    r.close()

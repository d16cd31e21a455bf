"""A dead worker's unacknowledged message, restored by a fresh connection before it
declared any queue (what kombu does when a worker connects), lands in the ``dormant``
queue instead of being dropped: tasks/redis_transport.py."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer

from dormant.persistence.settings import Settings
from dormant.tasks import redis_transport
from dormant.tasks.app import EXCHANGE, QUEUE, _conf, pooled_producer
from dormant.tasks.redis_transport import BINDINGS_TTL_SECONDS
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
    assert transport == "dormant.tasks.redis_transport:Transport"
    fresh = Connection(broker_url, transport_options=opts, transport=transport)
    fresh.channel().qos.restore_visible(num=10, interval=1)
    assert r.hlen("unacked") == 0
    assert r.llen("dormant") == 1, "the restored message was dropped"
    r.close()


def test_a_publish_after_redis_lost_its_bindings_still_reaches_the_queue(
    broker_url: str,
) -> None:
    """A pooled producer (the Client's, any broker URL) declared the queue once (kombu's
    ``maybe_declare`` remembers it per connection); Redis then loses everything (a
    restart without persistence: here the test's own database emptied). The next
    publish must land in ``dormant``."""

    def publish(n: int) -> None:
        with pooled_producer(broker_url) as producer:
            producer.publish(
                {"n": n}, exchange=EXCHANGE, routing_key="trigger.start", declare=[QUEUE]
            )

    publish(1)
    r = redis.Redis.from_url(broker_url)
    assert r.llen("dormant") == 1
    r.flushdb()  # our own locked database (tests/redis_lock.py)
    assert not r.exists("_kombu.binding.dormant")
    publish(2)
    assert r.llen("dormant") == 1, "the publish after the bindings were lost was dropped"
    time.sleep(BINDINGS_TTL_SECONDS + 0.1)  # what the channel read is stale now
    publish(3)
    assert r.llen("dormant") == 2, "the publish after the bindings were lost was dropped"
    assert r.exists("_kombu.binding.dormant")  # bound again, for every later publish
    r.close()


def test_a_channel_reads_the_bindings_once_a_second_not_at_every_publish(
    broker_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kombu reads an exchange's bindings (SMEMBERS, a round trip) before every publish;
    ours route by what they read for a second, and read again when it is stale."""
    reads: list[str] = []
    smembers = redis.Redis.smembers

    def counted(self: redis.Redis, name: str) -> Any:
        reads.append(name)
        return smembers(self, name)

    monkeypatch.setattr(redis.Redis, "smembers", counted)
    # The channel's clock, moved by hand (a slow machine changes nothing), past anything
    # a pooled channel of an earlier test kept.
    clock = [time.monotonic() + 3600.0]
    monkeypatch.setattr(redis_transport, "monotonic", lambda: clock[0])
    r = redis.Redis.from_url(broker_url)
    with pooled_producer(broker_url) as producer:
        try:
            # Read once (twice, with the bindings written again between, when a pooled
            # connection of an earlier test declared the queue in a database since emptied).
            producer.publish(
                {"n": 0}, exchange=EXCHANGE, routing_key="trigger.start", declare=[QUEUE]
            )
            assert reads, "the first publish read no bindings"
            reads.clear()
            for n in range(1, 21):
                producer.publish({"n": n}, exchange=EXCHANGE, routing_key="trigger.start")
            assert reads == []
            clock[0] += BINDINGS_TTL_SECONDS
            producer.publish({"n": 21}, exchange=EXCHANGE, routing_key="trigger.start")
        finally:
            producer.channel._tables.clear()  # stamped by the hand clock: not for later tests
    assert reads == ["_kombu.binding.dormant"]  # stale: read again
    assert r.llen("dormant") == 22  # every message routed
    r.close()

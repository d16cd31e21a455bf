"""Message and signal routing against real PostgreSQL and SQLite."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest

from dormant.engine_core.errors import InvalidMessage, InvalidVariables
from dormant.engine_core.triggers import MessageReceived
from dormant.persistence.routing import Router
from dormant.persistence.store import NewInstance, Store
from dormant.tasks.wire import redelivery
from tests.integration.test_store import msg_wait, proc, task_wait

MSG_START = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
  xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">
  <bpmn:message id="m1" name="order-placed">
    <bpmn:extensionElements><zeebe:subscription correlationKey="=orderId"/></bpmn:extensionElements>
  </bpmn:message>
  <bpmn:process id="order" isExecutable="true">
    <bpmn:startEvent id="ms"><bpmn:messageEventDefinition messageRef="m1"/></bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="ms" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>
"""


@pytest.fixture
def router(store: Store, now: datetime, fake_core: None) -> Router:
    store.deployments.deploy(proc(), now)
    return Router(store, redelivery)


def test_key_match_and_mismatch(store: Store, router: Router, now: datetime) -> None:
    store.start(NewInstance("p", "i1", {"_arm": [msg_wait("w1", "paid", "o-1")]}), now=now)
    store.start(NewInstance("p", "i2", {"_arm": [msg_wait("w1", "paid", "o-2")]}), now=now)
    out = router.message("paid", "o-1", {"amount": 3}, message_id="m-1", ttl_seconds=None, now=now)
    assert out.delivered_to == ["i1"] and not out.buffered
    assert store.queries.instance("i1").status == "completed"
    assert store.queries.instance("i2").status == "active"
    miss = router.message("paid", "o-9", {}, message_id="m-2", ttl_seconds=None, now=now)
    assert (miss.delivered_to, miss.started, miss.buffered) == ([], [], False)


def test_message_id_is_idempotent(store: Store, router: Router, now: datetime) -> None:
    store.start(
        NewInstance(
            "p", "i1", {"_arm": [msg_wait("w1", "paid", "o-1"), msg_wait("w2", "paid", "o-1")]}
        ),
        now=now,
    )
    router.message("paid", "o-1", {}, message_id="m-1", ttl_seconds=None, now=now)
    again = router.message("paid", "o-1", {}, message_id="m-1", ttl_seconds=None, now=now)
    assert again.duplicate and again.delivered_to == []
    assert len(store.queries.checkpoint("i1").waits) == 1  # one message wakes one wait per instance


def test_bad_messages(router: Router, now: datetime) -> None:
    with pytest.raises(InvalidMessage):
        router.message("  ", None, {}, message_id=None, ttl_seconds=None, now=now)
    with pytest.raises(InvalidVariables):
        router.message("x", None, [1, 2], message_id=None, ttl_seconds=None, now=now)  # type: ignore[arg-type]


def test_buffered_message_is_delivered_to_a_later_subscription(
    store: Store, router: Router, now: datetime
) -> None:
    out = router.message("paid", "o-1", {"amount": 5}, message_id="m-1", ttl_seconds=60, now=now)
    assert out.buffered
    later = now + timedelta(seconds=30)
    a = store.start(NewInstance("p", "i1", {"_arm": [msg_wait("w1", "paid", "o-1")]}), now=later)
    [row] = store.outbox.outbox_rows(a.outbox_ids)
    assert row.kind == "DeliverBuffered"
    assert (row.payload["instance_id"], row.payload["wait_id"], row.payload["message_id"]) == (
        "i1",
        "w1",
        "m-1",
    )
    # A second subscriber does not get the same message: delivered exactly once.
    b = store.start(NewInstance("p", "i2", {"_arm": [msg_wait("w1", "paid", "o-1")]}), now=later)
    assert b.outbox_ids == []
    # The relay applies it (twice, as a redelivery would): once only.
    p = row.payload
    trigger = MessageReceived(
        wait_id=p["wait_id"],
        name=p["name"],
        correlation_key=p["correlation_key"],
        variables=p["variables"],
        message_id=p["message_id"],
    )
    assert store.apply("i1", trigger, later, trigger_id=p["trigger_id"]).changed
    assert store.apply("i1", trigger, later, trigger_id=p["trigger_id"]).duplicate
    assert store.queries.instance("i1").variables == {"amount": 5}


def test_expired_buffered_message_is_not_delivered(
    store: Store, router: Router, now: datetime
) -> None:
    router.message("paid", "o-1", {}, message_id="m-1", ttl_seconds=10, now=now)
    a = store.start(
        NewInstance("p", "i1", {"_arm": [msg_wait("w1", "paid", "o-1")]}),
        now=now + timedelta(seconds=11),
    )
    assert a.outbox_ids == []


def test_no_ttl_is_not_buffered(store: Store, router: Router, now: datetime) -> None:
    out = router.message("paid", "o-1", {}, message_id="m-1", ttl_seconds=0, now=now)
    assert not out.buffered
    a = store.start(NewInstance("p", "i1", {"_arm": [msg_wait("w1", "paid", "o-1")]}), now=now)
    assert a.outbox_ids == []


def test_keyed_message_start_joins_never_duplicates(
    store: Store, router: Router, now: datetime
) -> None:
    store.deployments.deploy(MSG_START, now)
    # The fake core keeps the instance running (one user task) so a join is observable.
    first = router.message(
        "order-placed",
        "o-1",
        {"_arm": [task_wait("w1")]},
        message_id="m-1",
        ttl_seconds=None,
        now=now,
    )
    assert len(first.started) == 1
    second = router.message(
        "order-placed",
        "o-1",
        {"_arm": [task_wait("w1")]},
        message_id="m-2",
        ttl_seconds=None,
        now=now,
    )
    assert (second.started, second.joined) == ([], first.started)
    assert "DuplicateStart" in [f.kind for f in store.queries.history(first.started[0])]
    other = router.message(
        "order-placed",
        "o-2",
        {"_arm": [task_wait("w1")]},
        message_id="m-3",
        ttl_seconds=None,
        now=now,
    )
    assert len(other.started) == 1 and other.started != first.started
    assert len(store.queries.instances(key="order")) == 2


def test_racing_keyed_starts_make_one_instance(store: Store, router: Router, now: datetime) -> None:
    store.deployments.deploy(MSG_START, now)
    outs = []

    def send(k: int) -> None:
        outs.append(
            Router(store, redelivery).message(
                "order-placed",
                "o-1",
                {"_arm": [task_wait("w1")]},
                message_id=f"m-{k}",
                ttl_seconds=None,
                now=now,
            )
        )

    threads = [threading.Thread(target=send, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.queries.instances(key="order")) == 1
    assert sum(len(o.started) for o in outs) == 1
    assert sum(len(o.joined) for o in outs) == 7


def test_signal_broadcast(store: Store, router: Router, now: datetime) -> None:
    sig = {"id": "w1", "kind": "signal", "role": "node", "node_id": "s", "signal_name": "go"}
    store.start(NewInstance("p", "i1", {"_arm": [sig]}), now=now)
    store.start(NewInstance("p", "i2", {"_arm": [sig]}), now=now)
    out = router.signal("go", {}, signal_id="s-1", now=now)
    assert sorted(out.delivered_to) == ["i1", "i2"]
    assert store.queries.counts()["subscriptions"] == 0


def test_a_message_start_deployed_after_a_message_was_routed_is_seen_by_the_next(
    store: Store, now: datetime
) -> None:
    """The Store's index of message starts is rebuilt when a deployment is added: a
    process deployed after a message was routed (nothing started it) is started by the
    next message."""
    router = Router(store, redelivery)
    first = router.message("order-placed", "o-1", {}, message_id="m-a", ttl_seconds=None, now=now)
    assert first.started == [] and not first.buffered
    store.deployments.deploy(MSG_START, now)
    second = router.message("order-placed", "o-2", {}, message_id="m-b", ttl_seconds=None, now=now)
    assert len(second.started) == 1
    assert store.queries.instance(second.started[0]).status == "completed"

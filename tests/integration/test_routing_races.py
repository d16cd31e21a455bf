"""A message routed to a wait that was replaced before it got the lock still lands.

A loop re-arms its message catch with a fresh wait id on every turn. A message whose
subscription lookup happened just before another trigger moved the loop on finds its
wait gone under the lock; it must be correlated again with the instance's current
wait, not dropped as stale."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from dormant.engine_core.correlation import Holder
from dormant.persistence.routing import Router
from dormant.persistence.store import NewInstance, Store
from dormant.tasks.wire import redelivery

LOOP = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
  xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">
  <bpmn:message id="m" name="tick"><bpmn:extensionElements>
    <zeebe:subscription correlationKey="=key"/></bpmn:extensionElements></bpmn:message>
  <bpmn:process id="loop" isExecutable="true">
    <bpmn:startEvent id="s"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:messageEventDefinition messageRef="m"/>
    </bpmn:intermediateCatchEvent>
    <bpmn:scriptTask id="count"><bpmn:extensionElements>
      <zeebe:script expression="=hits + 1" resultVariable="hits"/></bpmn:extensionElements>
    </bpmn:scriptTask>
    <bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="wait"/>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="count"/>
    <bpmn:sequenceFlow id="f3" sourceRef="count" targetRef="wait"/>
  </bpmn:process>
</bpmn:definitions>"""


class LaggingRouter(Router):
    """Answers the first holder lookup with what it saw before the loop moved on."""

    def __init__(self, store: Store, stale: list[Holder]) -> None:
        super().__init__(store, redelivery)
        self.stale: list[Holder] | None = stale

    def _lagging(self, fresh: list[Holder]) -> list[Holder]:
        if self.stale is None:
            return fresh
        answer, self.stale = self.stale, None
        return answer

    def _first_holders(self, rows: Any) -> list[Holder]:  # type: ignore[override]
        return self._lagging(Router._first_holders(rows))

    def _holders_in(  # type: ignore[override]
        self, conn: Any, kind: str, name: str, key: str | None, tenant: str
    ) -> list[Holder]:
        return self._lagging(Router._holders_in(conn, kind, name, key, tenant))


def test_a_message_whose_wait_was_replaced_is_correlated_again(store: Any, now: datetime) -> None:
    store.deployments.deploy(LOOP, now)
    store.start(NewInstance("loop", "i-1", {"key": "k", "hits": 0}), now=now)
    (old_wait,) = store.queries.checkpoint("i-1").waits
    Router(store, redelivery).message("tick", "k", {}, message_id="m-1", ttl_seconds=None, now=now)
    assert store.queries.instance("i-1").variables["hits"] == 1  # the loop re-armed a new wait
    lagging = LaggingRouter(store, [Holder("loop", "i-1", old_wait)])
    outcome = lagging.message("tick", "k", {}, message_id="m-2", ttl_seconds=None, now=now)
    assert lagging.stale is None, "the stale answer was never given"
    assert outcome.delivered_to == ["i-1"]
    assert store.queries.instance("i-1").variables["hits"] == 2


def test_a_crash_between_two_holders_is_healed_by_the_producers_retry(
    store: Any, now: datetime, monkeypatch: Any
) -> None:
    """With several holders (instances of two processes: a message correlates once
    per process id) the message is recorded only after all of them: a crash after the
    first leaves it unrecorded, and the retry serves the rest, once each. (A process
    going down, not an exception of one holder's delivery: that one is kept for its
    holder alone, tests/security/test_fanout.py.)"""
    store.deployments.deploy(LOOP, now)
    store.deployments.deploy(LOOP.replace('id="loop"', 'id="loop2"'), now)
    store.start(NewInstance("loop", "a", {"key": "k", "hits": 0}), now=now)
    store.start(NewInstance("loop2", "b", {"key": "k", "hits": 0}), now=now)
    real_apply = store.apply

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit("worker died between two holders")

    # The first holder is delivered to in the message's first transaction
    # (``Store.apply_found``), every later one by ``Store.apply``.
    monkeypatch.setattr(store, "apply", crash)
    with pytest.raises(SystemExit):
        Router(store, redelivery).message(
            "tick", "k", {}, message_id="m-1", ttl_seconds=None, now=now
        )
    assert sorted(store.queries.instance(i).variables["hits"] for i in ("a", "b")) == [0, 1]
    monkeypatch.setattr(store, "apply", real_apply)
    retry = Router(store, redelivery).message(
        "tick", "k", {}, message_id="m-1", ttl_seconds=None, now=now
    )
    assert not retry.duplicate
    assert [store.queries.instance(i).variables["hits"] for i in ("a", "b")] == [1, 1]
    again = Router(store, redelivery).message(
        "tick", "k", {}, message_id="m-1", ttl_seconds=None, now=now
    )
    assert again.duplicate
    assert [store.queries.instance(i).variables["hits"] for i in ("a", "b")] == [1, 1]


def test_a_single_holder_records_the_message_in_its_own_transaction(
    store: Any, now: datetime
) -> None:
    store.deployments.deploy(LOOP, now)
    store.start(NewInstance("loop", "solo", {"key": "s", "hits": 0}), now=now)
    first = Router(store, redelivery).message(
        "tick", "s", {}, message_id="m-9", ttl_seconds=None, now=now
    )
    assert first.recorded and first.delivered_to == ["solo"]
    assert (
        Router(store, redelivery)
        .message("tick", "s", {}, message_id="m-9", ttl_seconds=None, now=now)
        .duplicate
    )
    assert store.queries.instance("solo").variables["hits"] == 1

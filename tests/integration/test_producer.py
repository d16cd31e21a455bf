"""The producer's cost (issue 10): pooled broker connections, and batches of triggers
written in one inbox transaction, through a real worker on both shapes."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import func, select

from dormant.engine_core.errors import InvalidMessage, InvalidVariables
from dormant.persistence.tables import inbox
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import end, message_catch, model, start

pytestmark = pytest.mark.integration


def _deploy_waiting_for(stack: Stack, name: str) -> str:
    key = f"p_{uuid.uuid4().hex[:8]}"
    nodes = start() + message_catch("wait", name) + end()
    stack.client.deploy(
        model(key, nodes, [("start", "wait"), ("wait", "end")], messages={name: "=id"})
    )
    return key


def _inbox_rows(stack: Stack) -> int:
    with stack.client._store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(inbox)).scalar_one())


def test_a_batch_of_starts_and_messages_is_applied_once_each(shared_stack: Stack) -> None:
    name = f"m-{uuid.uuid4().hex[:8]}"
    key = _deploy_waiting_for(shared_stack, name)
    c = shared_stack.client
    orders = [f"o-{uuid.uuid4().hex[:6]}" for _ in range(30)]
    ids = c.start_many(key, [{"id": o} for o in orders], business_keys=orders)
    assert len(set(ids)) == 30
    for iid in ids:
        wait_for(lambda iid=iid: c.instance(iid).status == "active", 40, what=f"{iid} active")
    message_ids = c.send_messages([{"name": name, "correlation_key": o} for o in orders])
    assert len(set(message_ids)) == 30
    for iid, order in zip(ids, orders, strict=True):
        view = shared_stack.wait_status(iid, "completed", timeout=40)
        assert view.business_key == order


def test_one_bad_entry_refuses_the_whole_batch_and_writes_nothing(shared_stack: Stack) -> None:
    name = f"m-{uuid.uuid4().hex[:8]}"
    key = _deploy_waiting_for(shared_stack, name)
    c = shared_stack.client
    before = _inbox_rows(shared_stack)
    with pytest.raises(InvalidVariables, match=r"start_many\[1\]"):
        c.start_many(key, [{"id": "a"}, {"bad": float("nan")}])
    with pytest.raises(InvalidMessage, match=r"send_messages\[1\]"):
        c.send_messages([{"name": name, "correlation_key": "a"}, {"name": ""}])
    with pytest.raises(InvalidMessage, match="unknown field"):
        c.send_messages([{"name": name, "corelation_key": "typo"}])
    assert _inbox_rows(shared_stack) == before


def test_the_client_publishes_on_a_pooled_connection(
    shared_stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new broker connection (and queue declaration) per call cost ~85 % of a call."""
    from dormant.tasks import app as app_module

    opened: list[Any] = []
    real = app_module.producer_connection

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(app_module, "producer_connection", counting)
    monkeypatch.setattr(app_module, "_producer_pools", {})
    name = f"m-{uuid.uuid4().hex[:8]}"
    for i in range(10):
        shared_stack.client.send_message(name, correlation_key=f"k{i}")
    assert len(opened) == 1


def test_a_pool_on_the_embedded_broker_takes_no_other_brokers_options(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process whose app was last configured for Redis (the CLI, a test process that
    served both shapes) opens its producer pool for the embedded URL with that URL's
    own transport options: the Redis ones reach ``create_engine`` and fail there."""
    from dormant.tasks import app as app_module

    monkeypatch.setitem(
        app_module.app.conf,
        "broker_transport_options",
        {"visibility_timeout": 60, "unacked_restore_interval": 1, "unacked_restore_throttle": 1},
    )
    monkeypatch.setattr(app_module, "_producer_pools", {})
    url = f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}"
    with app_module.pooled_producer(url) as producer:
        app_module.publish("dormant.signal", "signal.nobody", {"name": "nobody"}, producer=producer)

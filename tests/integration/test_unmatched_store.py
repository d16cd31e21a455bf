"""The record of messages that went nowhere, and the receipt, against real databases."""

from __future__ import annotations

from datetime import datetime, timedelta

from dormant.persistence.routing import Router
from dormant.persistence.settings import Settings
from dormant.persistence.store import NewInstance, Store
from dormant.persistence.unmatched import read_receipt, unmatched
from dormant.tasks.wire import redelivery
from tests.integration.test_store import msg_wait, proc

DAY = 86_400.0


def _router(store: Store, now: datetime, **settings: float) -> Router:
    store.deployments.deploy(proc(), now)
    if settings:
        store.settings = Settings(
            database_url=store.settings.database_url,
            **{**store.settings.model_dump(exclude={"database_url"}), **settings},
        )
    return Router(store, redelivery)


def test_a_message_nobody_waits_for_is_recorded_and_its_receipt_says_dropped(
    store: Store, now: datetime, fake_core: None
) -> None:
    router = _router(store, now)
    out = router.message("paid", "o-1", {}, message_id="m-1", ttl_seconds=None, now=now)
    assert out.dropped and out.outcome == "dropped"
    [row] = unmatched(store.engine, now, DAY)
    assert (row.name, row.correlation_key, row.at, row.message_id) == ("paid", "o-1", now, "m-1")
    receipt = read_receipt(store.engine, "m-1")
    assert receipt is not None and receipt.outcome == "dropped"
    assert str(receipt) == "m-1: dropped"


def test_a_correlated_or_buffered_message_is_not_recorded(
    store: Store, now: datetime, fake_core: None
) -> None:
    router = _router(store, now)
    store.start(NewInstance("p", "i1", {"_arm": [msg_wait("w1", "paid", "o-1")]}), now=now)
    out = router.message("paid", "o-1", {}, message_id="m-1", ttl_seconds=None, now=now)
    assert out.delivered_to == ["i1"] and not out.dropped
    receipt = read_receipt(store.engine, "m-1")
    assert receipt is not None and (receipt.outcome, receipt.correlations) == ("correlated", 1)
    assert str(receipt) == "m-1: correlated to 1 instance"
    router.message("paid", "o-2", {}, message_id="m-2", ttl_seconds=60, now=now)
    buffered = read_receipt(store.engine, "m-2")
    assert buffered is not None and buffered.outcome == "buffered"
    assert buffered.expires_at == now + timedelta(seconds=60)
    assert unmatched(store.engine, now, DAY) == []
    assert read_receipt(store.engine, "never-sent") is None


def test_the_record_is_capped_by_count_and_by_age(
    store: Store, now: datetime, fake_core: None
) -> None:
    router = _router(store, now, unmatched_messages_kept=3, unmatched_messages_retention_seconds=60)
    for n in range(5):
        router.message("paid", f"o-{n}", {}, message_id=f"m-{n}", ttl_seconds=None, now=now)
    rows = unmatched(store.engine, now, DAY, limit=100)
    assert [r.message_id for r in rows] == ["m-4", "m-3", "m-2"]
    assert [r.message_id for r in unmatched(store.engine, now, DAY, name="x")] == []
    later = now + timedelta(seconds=61)
    router.message("other", None, {}, message_id="m-9", ttl_seconds=None, now=later)
    with store.engine.connect() as conn:
        from sqlalchemy import func, select

        from dormant.persistence.tables import unmatched_messages

        count = conn.execute(select(func.count()).select_from(unmatched_messages)).scalar()
    assert count == 1  # the older rows went with the drop that passed their age
    [row] = unmatched(store.engine, later, DAY, name="other")
    assert (row.message_id, row.correlation_key) == ("m-9", None)


def test_a_receipt_not_settled_within_its_wait_is_pending(db_url: str) -> None:
    """No worker routes it: the receipt says so when its wait is over, and the
    message stays durable in the inbox for a worker to route later."""
    import pytest

    from dormant.engine_core.errors import InvalidField
    from dormant.tasks.client import Client

    client = Client(db_url, "memory://")
    try:
        receipt = client.send_message("paid", "o-1", message_id="m-p", receipt=0)
        assert (receipt.outcome, str(receipt)) == ("pending", "m-p: pending")
        with pytest.raises(InvalidField):
            client.message_receipt("m-p", -1)
        with pytest.raises(InvalidField):
            client.unmatched_messages(limit=0)
    finally:
        client._store.close()

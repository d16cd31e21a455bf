"""The deadline table against real PostgreSQL and SQLite (docs/waits.md)."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from dormant.engine_core import engine
from dormant.engine_core.checkpoint import decode
from dormant.engine_core.errors import UnknownProcess
from dormant.persistence.settings import Settings
from dormant.persistence.store import NewInstance, Store
from dormant.scheduler import claim_due, fire
from tests.integration.test_store import proc, timer_wait


def _arm(store: Store, now: datetime, n: int, due: datetime) -> None:
    store.deployments.deploy(proc(), now)
    for k in range(n):
        store.start(
            NewInstance(
                "p",
                f"i{k}",
                {"_arm": [timer_wait("w1", due), timer_wait("w2", due + timedelta(days=1))]},
            ),
            now=now,
        )


def test_claim_only_due_and_unclaimed(store: Store, now: datetime, fake_core: None) -> None:
    _arm(store, now, 3, now + timedelta(seconds=10))
    assert claim_due(store, now) == []
    later = now + timedelta(seconds=10)
    claims = claim_due(store, later)
    assert sorted(c.instance_id for c in claims) == ["i0", "i1", "i2"]
    assert {c.wait_id for c in claims} == {"w1"}
    assert claim_due(store, later) == []  # claimed: not again while the claim lives


def test_concurrent_claimers_never_share_a_row(
    store: Store, now: datetime, fake_core: None
) -> None:
    n = 60
    _arm(store, now, n, now)
    got: list[tuple[str, str]] = []
    lock = threading.Lock()

    def claimer() -> None:
        for _ in range(20):
            for c in claim_due(store, now, limit=3):
                with lock:
                    got.append((c.instance_id, c.wait_id))

    threads = [threading.Thread(target=claimer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == n and len(set(got)) == n


def test_expired_claim_is_reclaimed(store: Store, now: datetime, fake_core: None) -> None:
    _arm(store, now, 1, now)
    [first] = claim_due(store, now)
    assert claim_due(store, now + timedelta(seconds=29)) == []
    [again] = claim_due(store, now + timedelta(seconds=30))
    assert again.claim_token != first.claim_token
    # The first claimer's late fire does nothing: the claim is no longer its own.
    assert fire(store, "i0", "w1", first.claim_token, now).status == "skipped"
    assert store.queries.checkpoint("i0").revision == 1
    out = fire(store, "i0", "w1", again.claim_token, now + timedelta(seconds=30))
    assert out.status == "fired" and out.applied is not None and out.applied.revision == 2
    assert [r["wait_id"] for r in store.queries.holds("i0")["deadlines"]] == ["w2"]
    assert fire(store, "i0", "w1", again.claim_token, now).status == "skipped"


def test_cycle_gets_its_next_due_unclaimed(
    store: Store, now: datetime, fake_core: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _arm(store, now, 1, now)
    real = engine.apply

    def cycle(definition, checkpoint, trigger, *, now, services=None, keep_holds=False):  # type: ignore[no-untyped-def]
        step = real(
            definition, checkpoint, trigger, now=now, services=services, keep_holds=keep_holds
        )
        # (the Store hands ``apply`` the stored text)
        w = replace(decode(checkpoint).waits["w1"], due_at=now + timedelta(minutes=1))
        step.checkpoint.waits["w1"] = w
        return step

    monkeypatch.setattr(engine, "apply", cycle)
    [c] = claim_due(store, now)
    assert fire(store, "i0", "w1", c.claim_token, now).status == "fired"
    [row] = [r for r in store.queries.holds("i0")["deadlines"] if r["wait_id"] == "w1"]
    assert (row["due_at"], row["claim_token"], row["claimed_until"]) == (
        now + timedelta(minutes=1),
        None,
        None,
    )


def _unpin(store: Store, now: datetime) -> None:
    """Make the pinned version disappear from this database (as on a fresh worker DB)."""
    from sqlalchemy import delete

    from dormant.persistence.tables import definitions

    with store.transaction() as conn:
        conn.execute(delete(definitions))
    store.deployments._definitions.clear()


def test_failed_fire_keeps_the_row(
    store: Store, now: datetime, fake_core: None, caplog: pytest.LogCaptureFixture
) -> None:
    _arm(store, now, 1, now)
    _unpin(store, now)
    [c] = claim_due(store, now)
    with caplog.at_level(logging.WARNING, logger="dormant.scheduler"):
        out = fire(store, "i0", "w1", c.claim_token, now)
    assert out.status == "failed" and "UnknownProcess" in (out.error or "")
    backoff = store.settings.wake_backoff
    [row] = [r for r in store.queries.holds("i0")["deadlines"] if r["wait_id"] == "w1"]
    assert row["due_at"] == now + timedelta(seconds=backoff)
    assert (row["claim_token"], row["claimed_until"], row["attempts"]) == (None, None, 1)
    assert "UnknownProcess" in row["last_error"]
    assert (
        store.queries.instance("i0").status == "active"
        and store.queries.checkpoint("i0").revision == 1
    )
    [fact] = [f for f in store.queries.history("i0") if f.kind == "WakeFailed"]
    assert fact.details == {"wait_id": "w1", "cause_class": "UnknownProcess", "attempt": 1}
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_failed_fire_backs_off(store: Store, now: datetime, fake_core: None) -> None:
    _arm(store, now, 1, now)
    _unpin(store, now)
    [c] = claim_due(store, now)
    fire(store, "i0", "w1", c.claim_token, now)
    backoff = store.settings.wake_backoff
    # Not spun: nothing is due again until the backoff has passed.
    assert claim_due(store, now + timedelta(seconds=backoff - 1)) == []
    [c2] = claim_due(store, now + timedelta(seconds=backoff))
    out = fire(store, "i0", "w1", c2.claim_token, now + timedelta(seconds=backoff))
    assert out.status == "failed"
    [row] = [r for r in store.queries.holds("i0")["deadlines"] if r["wait_id"] == "w1"]
    assert row["attempts"] == 2 and row["due_at"] == now + timedelta(seconds=2 * backoff)


def test_failed_fire_heals_after_deploying_the_missing_version(
    store: Store, now: datetime, fake_core: None
) -> None:
    _arm(store, now, 1, now)
    _unpin(store, now)
    [c] = claim_due(store, now)
    assert fire(store, "i0", "w1", c.claim_token, now).status == "failed"
    store.deployments.deploy(proc(), now)  # version 1 again: the same Store heals, no restart
    t = now + timedelta(seconds=store.settings.wake_backoff)
    [c2] = claim_due(store, t)
    out = fire(store, "i0", "w1", c2.claim_token, t)
    assert out.status == "fired"
    assert [r["wait_id"] for r in store.queries.holds("i0")["deadlines"]] == ["w2"]
    assert store.queries.checkpoint("i0").revision == 2


def test_backoff_defaults_to_half_the_claim(db_url: str) -> None:
    s = Store(settings=Settings(database_url=db_url, deadline_claim_seconds=8))
    assert s.settings.wake_backoff == 4
    s.close()
    with pytest.raises(UnknownProcess):
        Store(db_url).deployments.definition("nothing")

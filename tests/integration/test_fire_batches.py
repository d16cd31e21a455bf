"""The scan's claims fired in batches (``dormant.fire_deadlines``, tasks/timers.py).

Two kinds of test. With a real ``dormant worker`` on PostgreSQL + Redis: a scan of N
claims sends ceil(N / size) batch messages that together name every claim once, and
every instance advances exactly once; a batch in which one claim's apply fails and one
claim is refused keeps those two as a single fire keeps them and fires the others; the
single ``dormant.fire_deadline`` message of earlier releases still fires. In this
process, on PostgreSQL, with a fault injected into ``scheduler.fire`` for one claim
(the way tests/security injects a failing apply): the database unavailable mid-batch,
an exception, the soft time limit, a batch past its time share — and the operator's
retry of a claim kept from a batch.
"""

from __future__ import annotations

import base64
import json
import math
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from prometheus_client import REGISTRY
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from dormant.persistence.settings import Settings
from dormant.persistence.store import NewInstance, Store
from dormant.persistence.tables import deadlines, inbox
from dormant.scheduler import deadlines as deadlines_module
from dormant.scheduler.deadlines import Claim, claim_due
from dormant.tasks import app as tasks_app
from dormant.tasks import timers, wire
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import end, model, start, timer_catch
from tests.security.kit import failed_for, overwrite_checkpoint, send_raw

pytestmark = pytest.mark.integration


def timed(key: str) -> str:
    """start → a 1 s timer → end: one fire completes an instance (revision 2)."""
    return model(key, start() + timer_catch("tm", "PT1S") + end(), [("start", "tm"), ("tm", "end")])


def park(store: Store, key: str, ids: list[str]) -> None:
    """Start instances whose timer is already due (started 5 s ago, in this process)."""
    past = datetime.now(UTC) - timedelta(seconds=5)
    for iid in ids:
        store.start(NewInstance(key, iid, {}), now=past)


def claims_of(store: Store, n: int) -> list[Claim]:
    claims = claim_due(store, datetime.now(UTC), 500)
    assert len(claims) == n
    return claims


@pytest.mark.parametrize(
    ("claims", "sizes"),
    [
        (0, []),
        (1, [1]),
        (3, [1, 1, 1]),
        (8, [2, 2, 2, 2]),
        (45, [12, 12, 12, 9]),
        (100, [20] * 5),
        (500, [20] * 25),
    ],
)
def test_a_scan_is_split_into_spread_bounded_batches(claims: int, sizes: list[int]) -> None:
    fake = [
        Claim(f"i{k}", "w", "t", datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=k))
        for k in range(claims)
    ]
    batches = timers.fire_batches(fake)
    assert [len(b) for b in batches] == sizes
    assert [c for b in batches for c in b] == fake  # consecutive, in the scan's order
    assert all(len(b) <= timers.FIRE_BATCH_MAX for b in batches)


def _configured(monkeypatch: pytest.MonkeyPatch, database_url: str, broker_url: str) -> None:
    """Point this process's app at the test's services (``configure`` sets the env)."""
    for var in ("DORMANT_DATABASE_URL", "DORMANT_BROKER_URL"):
        monkeypatch.setenv(var, os.environ.get(var, ""))
    tasks_app.configure(Settings.from_env({}, database_url=database_url, broker_url=broker_url))


@pytest.fixture
def restore_app() -> Iterator[None]:
    previous = tasks_app.settings
    try:
        yield
    finally:
        if tasks_app._store is not None:
            tasks_app._store.close()
        tasks_app.configure(previous)


def queued(r: Any, queue: str) -> list[tuple[str, dict[str, Any]]]:
    """(task name, kwargs) of every message waiting in a Redis queue, oldest first."""
    out = []
    for raw in reversed(r.lrange(queue, 0, -1)):
        message = json.loads(raw)
        _args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        out.append((message["headers"]["task"], kwargs))
    return out


N = 45


@pytest.mark.parametrize("stack_urls", ["pg_redis"], indirect=True)
def test_a_scan_sends_batches_and_every_instance_fires_once(
    bare_stack: Stack, monkeypatch: pytest.MonkeyPatch, restore_app: None
) -> None:
    import redis

    stack = bare_stack
    r: Any = redis.Redis.from_url(stack.broker_url)
    stack.client.deploy(timed("fb"))
    ids = [f"fb-{k}" for k in range(N)]
    park(stack.client._store, "fb", ids)
    _configured(monkeypatch, stack.database_url, stack.broker_url)
    assert timers.scan_deadlines.run() == N  # the scan, in this process; no beat runs
    sent = queued(r, tasks_app.TIMER_QUEUE.name)
    size = timers.batch_size(N)
    assert [t for t, _ in sent] == [timers.FIRE_BATCH_TASK] * math.ceil(N / size)
    named = [c["instance_id"] for _, kw in sent for c in kw["claims"]]
    assert sorted(named) == sorted(ids)  # every claim in exactly one batch
    assert [len(kw["claims"]) for _, kw in sent] == [12, 12, 12, 9]

    stack.worker()  # no beat: nothing but these four messages fires a timer
    for iid in ids:
        stack.wait_status(iid, "completed")
    store = stack.client._store
    assert {store.queries.checkpoint(iid).revision for iid in ids} == {2}  # advanced exactly once

    # The single fire of earlier releases, on the timer key and on the old key.
    park(store, "fb", ["fb-old-1", "fb-old-2"])
    for claim, key in zip(claims_of(store, 2), ("timer.fire", "trigger.timer"), strict=True):
        send_raw(stack, "dormant.fire_deadline", key, **timers.claim_kwargs(claim))
    for iid in ("fb-old-1", "fb-old-2"):
        stack.wait_status(iid, "completed")
        assert store.queries.checkpoint(iid).revision == 2


@pytest.mark.parametrize("stack_urls", ["pg_redis"], indirect=True)
def test_a_failing_claim_in_a_batch_is_kept_alone_and_the_others_fire(
    bare_stack: Stack,
) -> None:
    """Four claims in one batch: ``fb-bad``'s checkpoint is corrupt (the apply raises:
    ``fire`` keeps its row and backs it off, as for a single fire) and ``fb-odd``'s
    claim names a kind no dormant knows (the exception reaches the shell: a failed
    trigger of ``dormant.fire_deadline`` for that claim alone). The other two fire."""
    stack = bare_stack
    store = stack.client._store
    stack.client.deploy(timed("fb"))
    ids = ["fb-a", "fb-bad", "fb-odd", "fb-z"]
    park(store, "fb", ids)
    overwrite_checkpoint(stack, "fb-bad", {"not": "a checkpoint"})
    by_id = {c.instance_id: timers.claim_kwargs(c) for c in claims_of(store, 4)}
    by_id["fb-odd"]["kind"] = "no-such-kind"
    batch = [by_id[i] for i in ids]
    stack.worker()
    send_raw(stack, timers.FIRE_BATCH_TASK, "timer.fire", claims=batch)

    for iid in ("fb-a", "fb-z"):
        stack.wait_status(iid, "completed")
    [failed] = failed_for(stack, instance_id="fb-odd")
    assert (failed.task, failed.routing_key) == ("dormant.fire_deadline", "timer.fire")
    assert failed.body["kwargs"] == by_id["fb-odd"]
    token, wait = by_id["fb-odd"]["claim_token"], by_id["fb-odd"]["wait_id"]
    assert failed.trigger_id == f"deadline:fb-odd:{wait}:{token}"
    assert failed.error_class == "ValueError"
    assert [f.instance_id for f in stack.client.failed_triggers()] == ["fb-odd"]

    def row(iid: str) -> Any:
        with store.engine.connect() as conn:
            return conn.execute(select(deadlines).where(deadlines.c.instance_id == iid)).one()

    bad = wait_for(lambda: row("fb-bad") if row("fb-bad").attempts else None, what="fb-bad")
    assert bad.claim_token is None and "CorruptCheckpoint" in bad.last_error
    assert row("fb-odd").claim_token == token  # left claimed: it expires, is claimed again
    assert store.queries.checkpoint("fb-odd").revision == 1

    # The operator's retry sends it as one fire_deadline (with an inbox id): it runs
    # through the shell again and is kept again, one attempt more.
    retried = stack.run_cli("triggers", "retry", failed.id)
    assert retried.returncode == 0, retried.stderr
    wait_for(
        lambda: [f for f in stack.client.failed_triggers() if f.attempts == 2],
        what="the retried claim kept again",
    )


# -- in this process, on PostgreSQL, a fault injected into one claim's fire ---------


@pytest.fixture
def here(
    pg_empty_database: Callable[[], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    restore_app: None,
) -> Iterator[Store]:
    """This process's app on a fresh PostgreSQL database, three instances due."""
    from dormant.persistence import migrate

    url = pg_empty_database()
    migrate.upgrade(url)
    _configured(monkeypatch, url, f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}")
    store = tasks_app.store()
    store.deployments.deploy(timed("fb"), datetime.now(UTC))
    park(store, "fb", ["a", "b", "c"])
    yield store


def batch_of(store: Store) -> list[dict[str, Any]]:
    return [
        timers.claim_kwargs(c) for c in sorted(claims_of(store, 3), key=lambda c: c.instance_id)
    ]


def fault_at(
    monkeypatch: pytest.MonkeyPatch, victim: str, error: Callable[[], Exception], times: int = 99
) -> list[str]:
    """``fire`` raises ``error()`` for instance ``victim`` (``times`` times); the ids
    fired, in order, failures included."""
    real = deadlines_module.fire
    calls: list[str] = []

    def fire(store: Store, instance_id: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(instance_id)
        if instance_id == victim and calls.count(victim) <= times:
            raise error()
        return real(store, instance_id, *args, **kwargs)

    monkeypatch.setattr(timers, "fire", fire)  # the name the timer tasks call
    return calls


def revisions(store: Store) -> list[int]:
    return [store.queries.checkpoint(i).revision for i in ("a", "b", "c")]


def counted(outcome: str) -> float:
    value = REGISTRY.get_sample_value(
        "dormant_triggers_applied_total", {"kind": "timer", "outcome": outcome}
    )
    return value or 0.0


def test_database_unavailable_retries_only_the_rest_and_a_redelivery_is_harmless(
    here: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = batch_of(here)
    calls = fault_at(
        monkeypatch, "b", lambda: OperationalError("SELECT 1", {}, Exception("gone")), times=1
    )
    timers.fire_deadlines.apply(kwargs={"claims": batch})  # eager: the retry runs at once
    assert calls == ["a", "b", "b", "c"]  # retried from b: a was not fired again
    assert revisions(here) == [2, 2, 2]
    # The whole batch again (a redelivery after a worker died): used claims skip.
    applied = counted("applied")
    timers.fire_deadlines.apply(kwargs={"claims": batch})
    assert revisions(here) == [2, 2, 2]
    assert counted("applied") == applied
    assert here.failed.failed_triggers() == []


def test_a_claim_that_raises_is_kept_alone_and_an_operator_retry_fires_it(
    here: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = batch_of(here)
    fault_at(monkeypatch, "b", lambda: KeyError("bug"), times=1)
    applied, errors = counted("applied"), counted("error")
    timers.fire_deadlines.apply(kwargs={"claims": batch})
    assert revisions(here) == [2, 1, 2]
    # One count per fire, not per batch: two applied, one error.
    assert (counted("applied") - applied, counted("error") - errors) == (2, 1)
    [failed] = here.failed.failed_triggers()
    assert (failed.task, failed.routing_key, failed.instance_id) == (
        "dormant.fire_deadline",
        "timer.fire",
        "b",
    )
    assert failed.body["kwargs"] == batch[1] and failed.error_class == "KeyError"

    # The fault has passed; the operator sends the kept claim again.
    task, _key, kwargs, inbox_id = here.failed.take_failed(
        failed.id, datetime.now(UTC), takes_trigger_id=wire.takes_trigger_id
    )
    assert task == "dormant.fire_deadline"
    timers.fire_deadline.apply(kwargs={**kwargs, "inbox_id": inbox_id})
    assert revisions(here) == [2, 2, 2]
    with here.engine.connect() as conn:
        done = conn.execute(select(inbox.c.processed_at).where(inbox.c.id == inbox_id)).scalar()
    assert done is not None and here.failed.failed_triggers() == []


def test_the_soft_time_limit_mid_batch_keeps_that_claim_and_leaves_the_rest_claimed(
    here: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = batch_of(here)
    calls = fault_at(monkeypatch, "b", lambda: SoftTimeLimitExceeded())
    timers.fire_deadlines.apply(kwargs={"claims": batch})
    assert calls == ["a", "b"]  # c was never started
    assert revisions(here) == [2, 1, 1]
    assert [f.instance_id for f in here.failed.failed_triggers()] == ["b"]
    with here.engine.connect() as conn:
        token = conn.execute(
            select(deadlines.c.claim_token).where(deadlines.c.instance_id == "c")
        ).scalar()
    assert token == batch[2]["claim_token"]  # still claimed: it expires, is claimed again


def test_a_batch_past_its_time_share_republishes_the_rest(
    here: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = batch_of(here)
    sent: list[tuple[str, str, dict[str, Any]]] = []
    monkeypatch.setattr(timers, "FIRE_BATCH_TIME_SHARE", 0.0)
    monkeypatch.setattr(timers, "publish", lambda *a, **_k: sent.append(a))
    timers.fire_deadlines.apply(kwargs={"claims": batch})
    assert revisions(here) == [2, 1, 1]  # the first claim always runs: progress
    assert sent == [(timers.FIRE_BATCH_TASK, "timer.fire", {"claims": batch[1:]})]
    timers.fire_deadlines.apply(kwargs=sent[0][2])  # the re-published batch fires them
    assert revisions(here)[1] == 2
    assert here.failed.failed_triggers() == []


def test_claims_whose_batch_the_broker_refused_are_given_back_to_the_next_scan(
    here: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A publish that fails (the embedded broker's file locked, Redis away) gives its
    claims back at once: the next tick claims them, not the one after the claims
    expire (``DORMANT_DEADLINE_CLAIM_SECONDS``, 30 s)."""
    refused: list[dict[str, Any]] = []

    def refuse(_task: str, _key: str, kwargs: dict[str, Any], **_: Any) -> None:
        refused.append(kwargs)
        raise OperationalError("INSERT INTO kombu_message", {}, Exception("database is locked"))

    monkeypatch.setattr(timers, "publish", refuse)
    assert timers.scan_deadlines.run() == 0  # claimed three, sent none
    assert len(refused) == 1  # the first refusal stops the scan (the broker is away)
    with here.read() as conn:
        tokens = conn.execute(select(deadlines.c.claim_token)).scalars().all()
    assert sorted(tokens, key=str) == [None, None, None], tokens

    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(timers, "publish", lambda _t, _k, kwargs, **_: sent.append(kwargs))
    assert timers.scan_deadlines.run() == 3  # the next tick, well inside the claim time
    assert sorted(c["instance_id"] for batch in sent for c in batch["claims"]) == ["a", "b", "c"]
    for batch in sent:
        timers.fire_deadlines.apply(kwargs=batch)
    assert revisions(here) == [2, 2, 2]

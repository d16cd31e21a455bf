"""Fan-out isolation (issue 8, item 4): a signal, or a message with several holders,
reaches every healthy holder even when one holder's checkpoint cannot be read; the
bad holder's delivery is kept for it alone (a failed trigger, an incident) and, once
its row is repaired, a retry delivers it there too."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select

from dormant.persistence.tables import message_correlations, messages
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import end, message_catch, model, signal_catch, start
from tests.security.kit import failed_for, overwrite_checkpoint, stored_checkpoint

pytestmark = pytest.mark.integration

HOLDERS = 4


def signal_waiter(key: str, name: str) -> str:
    nodes = start() + signal_catch("sc", name) + end()
    return model(key, nodes, [("start", "sc"), ("sc", "end")], signals=[name])


def message_waiter(key: str, name: str) -> str:
    """Every instance waits on the SAME correlation key. A message correlates once per
    process id, so the holders it reaches are instances of different processes."""
    nodes = start() + message_catch("mc", name) + end()
    return model(key, nodes, [("start", "mc"), ("mc", "end")], messages={name: "=group"})


def holders_with_the_first_corrupt(stack: Stack, key: str) -> tuple[str, list[str], Any]:
    """Start HOLDERS instances; corrupt the one routing serves FIRST (lowest id)."""
    c = stack.client
    ids = sorted(c.start(key, {"group": "g"}) for _ in range(HOLDERS))
    for iid in ids:
        wait_for(lambda i=iid: c.instance(i).tokens, what=f"{iid} to wait")
    victim = ids[0]
    original = stored_checkpoint(stack, victim)
    if isinstance(original, str):
        original = json.loads(original)
    overwrite_checkpoint(stack, victim, {"schema": 1, "garbage": True})
    return victim, ids[1:], original


def check_isolated(stack: Stack, victim: str, healthy: list[str], original: Any) -> None:
    c = stack.client
    for iid in healthy:
        stack.wait_status(iid, "completed")
    [failed] = failed_for(stack, instance_id=victim)
    assert failed.task == "dormant.apply_trigger"
    assert failed.error_class == "CorruptCheckpoint"
    assert [i.cause_class for i in c.incidents(victim)] == ["CorruptCheckpoint"]
    assert c.instance(victim).status == "flagged"
    overwrite_checkpoint(stack, victim, original)
    c.retry_trigger(failed.id)
    stack.wait_status(victim, "completed")
    assert c.failed_triggers(victim) == []


def test_a_signal_reaches_every_healthy_holder_past_a_corrupt_one(shared_stack: Stack) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(signal_waiter("fo-signal", "fo-go"))
    victim, healthy, original = holders_with_the_first_corrupt(stack, "fo-signal")
    c.signal("fo-go")
    check_isolated(stack, victim, healthy, original)


def test_a_message_reaches_every_healthy_holder_past_a_corrupt_one(shared_stack: Stack) -> None:
    stack, c = shared_stack, shared_stack.client
    keys = [f"fo-message-{n}" for n in range(HOLDERS)]
    for key in keys:
        c.deploy(message_waiter(key, "fo-msg"))
    ids = [c.start(key, {"group": "g"}) for key in keys]
    for iid in ids:
        wait_for(lambda i=iid: c.instance(i).tokens, what=f"{iid} to wait")
    victim, healthy = ids[0], ids[1:]  # the oldest instance: the first one routed
    original = stored_checkpoint(stack, victim)
    if isinstance(original, str):
        original = json.loads(original)
    overwrite_checkpoint(stack, victim, {"schema": 1, "garbage": True})
    message_id = c.send_message("fo-msg", "g", ttl=300)
    check_isolated(stack, victim, healthy, original)
    # Taken by its holders' processes (the kept one's included): buffered for its TTL
    # for processes it has not reached, never for a later instance of theirs.
    with c._store.engine.connect() as conn:
        row = conn.execute(
            select(messages.c.consumed_at, messages.c.expires_at).where(
                messages.c.message_id == message_id
            )
        ).one()
        reached = set(
            conn.execute(
                select(message_correlations.c.process_key).where(
                    message_correlations.c.message_id == message_id
                )
            ).scalars()
        )
    assert row.consumed_at is None and row.expires_at is not None
    assert reached == set(keys)

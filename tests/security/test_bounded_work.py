"""Bounded work per trigger (issue 8, item 2), through the real worker.

A loop with no wait state (script → gateway ``=true`` → script) once held a worker
slot, and the instance's row lock, forever. With the step budget the looping instance
runs as a chain of short ``Continue`` triggers sent through the outbox: other instances
complete meanwhile on the same worker, and ``cancel`` gets the row lock between two
continuations and ends the loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest

from tests.integration.conftest import Stack, running_stack, wait_for
from tests.integration.waitkit import end, model, script, start, xor

# Small, so the loop continues many times within the test.
BUDGET = "40"

LOOP = model(
    "spin",
    start() + script("inc", "=i + 1", "i") + xor("gw", default="fl3") + end(),
    [("start", "inc"), ("inc", "gw"), ("gw", "inc", "=true"), ("gw", "end")],
)
QUICK = model(
    "quick",
    start() + script("s", "=n * 2", "doubled") + end(),
    [("start", "s"), ("s", "end")],
)


@pytest.fixture(scope="module", params=["pg_redis", "embedded"])
def budget_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    with running_stack(
        request.param, "budget", request, tmp_path_factory, DORMANT_STEP_BUDGET=BUDGET
    ) as s:
        yield s


def _budget_stops(stack: Stack, instance_id: str) -> int:
    return sum(1 for f in stack.client.history(instance_id) if f.kind == "StepBudgetReached")


def test_a_loop_that_never_waits_costs_throughput_not_a_worker(budget_stack: Stack) -> None:
    stack = budget_stack
    client = stack.client
    client.deploy(LOOP)
    client.deploy(QUICK)
    spinning = client.start("spin", {"i": 0})
    # The loop is running: it has committed several budget-bounded steps already.
    wait_for(lambda: _budget_stops(stack, spinning) >= 3, 30, what="the loop to continue")

    others = [client.start("quick", {"n": k}) for k in range(10)]
    for iid in others:
        view = stack.wait_status(iid, "completed", timeout=60)
        assert view.variables["doubled"] == view.variables["n"] * 2

    view = client.instance(spinning)
    assert view.status == "active"
    assert view.variables["i"] > 3 * int(BUDGET) // 2 - 1

    client.cancel(spinning)
    stopped = stack.wait_status(spinning, "terminated", timeout=60)
    assert stopped.tokens == []
    # The continuation in flight at the cancel finds the instance ended: it is stale,
    # and the chain stops there.
    wait_for(
        lambda: (
            client.instance(spinning).revision == stopped.revision
            and any(f.kind == "Stale" for f in client.history(spinning))
        ),
        30,
        what="the last continuation to be stale",
    )
    for proc in stack.procs:
        assert "Traceback" not in proc.text(), proc.tail()


@pytest.mark.parametrize("raw", ["0", "-5", "many"])
def test_the_budget_setting_is_refused_naming_the_variable(raw: str) -> None:
    from dormant.engine_core.errors import InvalidSetting
    from dormant.persistence.settings import Settings

    with pytest.raises(InvalidSetting, match="DORMANT_STEP_BUDGET"):
        Settings.from_env({"DORMANT_STEP_BUDGET": raw})
    assert Settings.from_env({}).step_budget == 1000
    assert Settings.from_env({"DORMANT_STEP_BUDGET": "25"}).step_budget == 25


def test_the_continuation_is_an_outbox_row_kept_until_consumed_and_idempotent(
    db_url: str, now: datetime
) -> None:
    """Store level, on SQLite and PostgreSQL: the stopped step commits a
    ``ContinueInstance`` outbox row with its trigger id; the row stays (the sweep would
    publish it again after a crash) until consumed; the same trigger id applied twice
    runs the loop on once."""
    from dormant.engine_core.triggers import Continue
    from dormant.persistence.settings import Settings
    from dormant.persistence.store import NewInstance, Store

    store = Store(settings=Settings(database_url=db_url, step_budget=20))
    try:
        store.deployments.deploy(LOOP, now)
        first = store.start(NewInstance("spin", "spin-1", {"i": 0}), now=now)
        (row,) = store.outbox.outbox_rows(first.outbox_ids)
        assert row.kind == "ContinueInstance"
        assert row.payload["instance_id"] == "spin-1"
        tid = row.payload["trigger_id"]
        assert [r.id for r in store.outbox.pending_outbox(0, now=now)] == [row.id]

        second = store.apply("spin-1", Continue(), now, trigger_id=tid)
        assert second.changed and second.revision == first.revision + 1
        again = store.apply("spin-1", Continue(), now, trigger_id=tid)
        assert again.duplicate and again.revision == second.revision
        store.outbox.consume_outbox(row.id, tid)
        assert store.outbox.outbox_rows([row.id]) == []
        (next_row,) = store.outbox.outbox_rows(second.outbox_ids)
        assert next_row.kind == "ContinueInstance" and next_row.payload["trigger_id"] != tid
    finally:
        store.close()

"""Two lanes (tasks/lanes.py; docs/operations.md, "Two lanes"): a trigger a main-lane
worker could not foresee was expensive leaves that worker for the quarantine lane, and
is applied there as it would have been (issue 24: one bad trigger never stalls the
others).

* A start whose FEEL work outlasts the main lane's budget: its computation is
  interrupted, nothing of it is written, and it is published to ``dormant.quarantine``;
  the quarantine worker applies it (here it completes: heavy, not hostile). The first
  is queued behind canaries and takes them into its batch (tasks/drain.py); the next
  start of the same process moves before it runs.
* A start that hangs until the hard time limit: the main lane's own, shorter one
  (``DORMANT_LANE_TIME_LIMIT_SECONDS``) ends its first delivery; its redelivery is
  moved before any of its work runs again, counted, and the quarantine lane keeps it
  as a ``PoisonTrigger`` after its own two hard limits.

Each ends with canaries started after the expensive trigger, all completed by the main
lane. No timing is asserted: which worker applied what is read from their logs.
"""

from __future__ import annotations

import signal
import time

import pytest

from dormant.tasks import lanes
from tests.faults.kit import included_worker, instance_status
from tests.integration.conftest import Proc, Stack, wait_for
from tests.integration.waitkit import end, model, script, start

pytestmark = [pytest.mark.faults, pytest.mark.integration]

BUDGET = "0.3"
# Each link is a few tenths of a second of FEEL work: the chain outlasts the budget
# well and stays far inside the soft time limit.
LINKS = 10
HEAVY = model(
    "lane_heavy",
    start()
    + "".join(
        script(f"p{k}", "=count(for i in 1..60000 return i * 2)", f"v{k}") for k in range(LINKS)
    )
    + end(),
    [
        ("start", "p0"),
        *((f"p{k}", f"p{k + 1}") for k in range(LINKS - 1)),
        (f"p{LINKS - 1}", "end"),
    ],
)
CANARY = model(
    "lane_canary", start() + script("s", "=n + 1", "m") + end(), [("start", "s"), ("s", "end")]
)
MOVED = "moved to the quarantine lane"


def _lanes(s: Stack, fault: str = "", **main_env: str) -> tuple[Proc, Proc]:
    main = included_worker(
        s,
        concurrency=1,
        DORMANT_WORKER_LANE="main",
        DORMANT_LANE_BUDGET_SECONDS=BUDGET,
        DORMANT_TEST_POISON=fault,
        **main_env,
    )
    quarantine = included_worker(
        s, concurrency=1, DORMANT_WORKER_LANE="quarantine", DORMANT_TEST_POISON=fault
    )
    return main, quarantine


def _all_complete(s: Stack, ids: list[str], what: str, timeout: float = 60) -> None:
    def done() -> int:
        return sum(1 for iid in ids if instance_status(s, iid) == "completed")

    try:
        wait_for(lambda: done() == len(ids), timeout, 0.3, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {done()} of {len(ids)}\n{s.diagnostics()}") from None


def test_a_trigger_past_the_main_lanes_budget_is_applied_in_the_quarantine_lane(
    fstack: Stack,
) -> None:
    s = fstack
    s.client.deploy(HEAVY)
    s.client.deploy(CANARY)
    # Queued while no worker runs: the heavy start's task takes the canaries into its
    # batch; its own savepoint is rolled back, theirs commit.
    queued = s.client.start("lane_heavy", {})
    behind = [s.client.start("lane_canary", {"n": n}) for n in range(6)]
    main, quarantine = _lanes(s)
    _all_complete(s, [queued, *behind], "the heavy start and the canaries behind it")
    # Alone, after the first moved.
    alone = s.client.start("lane_heavy", {})
    after = [s.client.start("lane_canary", {"n": n}) for n in range(6)]
    _all_complete(s, [alone, *after], "the second heavy start and the canaries after it")

    main_log, quarantine_log = main.text(), quarantine.text()
    # The first paid the budget; the second, of the same process, moved before it ran
    # (the main lane's one pool process remembers).
    for heavy, why in ((queued, "DORMANT_LANE_BUDGET_SECONDS"), (alone, "process lane_heavy")):
        moved = [line for line in main_log.splitlines() if MOVED in line and heavy in line]
        assert moved, f"{heavy} not moved:\n{main_log[-3000:]}"
        assert why in moved[0], moved[0]
        assert heavy in quarantine_log, quarantine_log[-3000:]  # applied there
    for canary in behind + after:
        assert canary not in quarantine_log  # the main lane applied every canary
    assert "batch of" in main_log  # the first heavy start did share a batch


def test_a_redelivered_trigger_is_moved_and_kept_as_poison_in_the_quarantine_lane(
    fstack: Stack,
) -> None:
    s = fstack
    s.env["DORMANT_MAX_DELIVERIES"] = "3"
    s.env["DORMANT_TRIGGER_SOFT_TIME_LIMIT_SECONDS"] = "3"
    s.env["DORMANT_TRIGGER_TIME_LIMIT_SECONDS"] = "4"
    fault = s.tmp / "poison-on"
    fault.touch()
    s.client.deploy(CANARY)
    # The main lane's own hard limit, under the trigger tasks' 4 s.
    main, quarantine = _lanes(s, str(fault), DORMANT_LANE_TIME_LIMIT_SECONDS="2")
    hung = s.client.start("lane_canary", {"n": 0, "poison": "hang"})
    time.sleep(1)  # taken by the main lane's process before the canaries are sent
    canaries = [s.client.start("lane_canary", {"n": n}) for n in range(6)]
    _all_complete(s, canaries, "the canaries sent while the poison hangs")

    def kept() -> list[object]:
        return [f for f in s.client.failed_triggers() if f.error_class == "PoisonTrigger"]

    wait_for(lambda: len(kept()) == 1, 90, 0.5, f"the poison kept\n{s.diagnostics()}")
    main_log, quarantine_log = main.text(), quarantine.text()
    assert main_log.count("Hard time limit (2.0s)") == 1, main_log[-3000:]  # its first delivery
    assert any(MOVED in line and hung in line for line in main_log.splitlines()), main_log[-3000:]
    assert quarantine_log.count("Hard time limit (4.0s)") == 2, quarantine_log[-3000:]


def test_the_budget_interrupts_only_a_movable_computation_in_a_main_lane() -> None:
    """In process: what the Store's compute guard does per lane (tasks/lanes.py)."""

    def spin(seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            pass

    guard = lanes.compute_guard("main", 0.05)
    with guard():
        spin(0.15)  # not inside a trigger shell's apply: never interrupted
    with lanes.movable(), pytest.raises(lanes.OutOfLaneBudget), guard():
        spin(2)
    with lanes.movable(), lanes.compute_guard("all", 0.05)():
        spin(0.15)
    with lanes.movable(), guard():
        pass  # disarmed on the way out: nothing fires after
    spin(0.1)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_pool_process_remembers_what_moved_for_a_while_and_within_a_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lanes, "_suspects", {})
    monkeypatch.setattr(lanes, "MAX_SUSPECTS", 3)
    lanes.suspect("process slow")
    assert lanes.suspected("process slow") and not lanes.suspected("process other")
    assert not lanes.suspected(None)
    for k in range(3):
        lanes.suspect(f"instance {k}")
    assert not lanes.suspected("process slow")  # the oldest forgotten past the bound
    assert lanes.suspected("instance 2")
    now = time.monotonic()
    monkeypatch.setattr(lanes.time, "monotonic", lambda: now + lanes.SUSPECT_SECONDS + 1)
    assert not lanes.suspected("instance 2")  # and every one after SUSPECT_SECONDS


def test_a_move_the_broker_refuses_is_retried_never_acknowledged_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In process: the shell's move (tasks/triggers.py ``_quarantine``) publishes
    before its message is acknowledged; a publish that fails retries the task, so the
    trigger stays in the broker."""
    from types import SimpleNamespace
    from typing import Any

    from dormant.tasks import app as app_module
    from dormant.tasks import triggers

    published: list[tuple[str, str, dict[str, Any], Any]] = []

    def publish(name: str, key: str, kwargs: dict[str, Any], **options: Any) -> None:
        published.append((name, key, kwargs, options.get("headers")))

    class Refused(Exception):
        pass

    def retry(**options: Any) -> Exception:
        return Refused(options)

    request = SimpleNamespace(
        args=(),
        kwargs={"key": "k", "instance_id": "i-1"},
        retries=0,
        delivery_info={"routing_key": "trigger.start"},
        headers={},
    )
    task = SimpleNamespace(name="dormant.start", run=lambda **_: None, request=request, retry=retry)
    monkeypatch.setattr(app_module, "publish", publish)
    triggers._quarantine(task, "start", "t-1", None, "i-1", 1, "why")  # type: ignore[arg-type]
    [(name, key, kwargs, headers)] = published
    assert (name, key) == ("dormant.start", "quarantine.trigger.start")
    assert kwargs["trigger_id"] == "t-1" and headers == {"dormant_delivery": 1}

    def down(*_: Any, **__: Any) -> None:
        raise ConnectionError("the broker went away")

    monkeypatch.setattr(app_module, "publish", down)
    with pytest.raises(Refused):
        triggers._quarantine(task, "start", "t-1", None, "i-1", 1, "why")  # type: ignore[arg-type]


def test_a_main_lane_bounds_only_the_triggers_it_may_move(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In process: ``_bound_trigger_tasks`` on a main lane (tasks/app.py)."""
    from dormant.tasks import app as app_module
    from dormant.tasks import operations, timers, triggers, wire

    assert operations and timers and triggers  # their tasks registered
    tasks = [app_module.app.tasks[n] for n in (wire.START, wire.FIRE_DEADLINES, wire.BATCH_RUN)]
    saved = [(t.soft_time_limit, t.time_limit) for t in tasks]
    main = app_module.settings.model_copy(
        update={
            "worker_lane": "main",
            "lane_time_limit_seconds": 2.0,
            "trigger_soft_time_limit_seconds": 30.0,
            "trigger_time_limit_seconds": 45.0,
        }
    )
    monkeypatch.setattr(app_module, "settings", main)
    try:
        app_module._bound_trigger_tasks()
        start_task, fires, batch = tasks
        assert (start_task.soft_time_limit, start_task.time_limit) == (1.6, 2.0)
        assert (fires.soft_time_limit, fires.time_limit) == (30.0, 45.0)
        assert (batch.soft_time_limit, batch.time_limit) == (30.0, 45.0)
    finally:
        for t, (soft, hard) in zip(tasks, saved, strict=True):
            t.soft_time_limit, t.time_limit = soft, hard

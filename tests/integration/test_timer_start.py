"""Timer start events on both backends: armed at deploy, fired by the deadline scan.

What is asserted is what an operator sees: which instances exist after a scan at a
given time, where the next repetition is due, that a new version replaces the old
version's timers, that a repeated fire never starts twice, that an overdue cycle
fires once (no catch-up burst), and that a failed fire keeps its row and backs off.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, func, select, update

from dormant.engine_core.errors import InvalidModel
from dormant.persistence.start_timers import START_TIMER_PREFIX, start_instance_id
from dormant.persistence.store import Store
from dormant.persistence.tables import definitions, instances, start_timers
from dormant.scheduler import ClaimKind, claim_due, fire

NS = (
    'xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
    'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t"'
)


def timer_start(tag: str, value: str, *, end: str = "end", key: str = "tick") -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions {NS}>
  <bpmn:process id="{key}" isExecutable="true">
    <bpmn:startEvent id="ts">
      <bpmn:timerEventDefinition><bpmn:{tag}>{value}</bpmn:{tag}></bpmn:timerEventDefinition>
    </bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="ts" targetRef="{end}"/>
    <bpmn:endEvent id="{end}"/>
  </bpmn:process>
</bpmn:definitions>
"""


NONE_START_ONLY = f"""<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions {NS}>
  <bpmn:process id="tick" isExecutable="true">
    <bpmn:startEvent id="s"/>
    <bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>
"""


def timers(store: Store) -> list[Any]:
    with store.engine.connect() as conn:
        return list(conn.execute(select(start_timers).order_by(start_timers.c.node_id)))


def started(store: Store) -> list[Any]:
    with store.engine.connect() as conn:
        return list(
            conn.execute(
                select(instances.c.id, instances.c.version, instances.c.status).order_by(
                    instances.c.created_at, instances.c.id
                )
            )
        )


def scan(store: Store, at: datetime) -> list[str]:
    """One beat tick at ``at``: claim and fire everything due; the fire statuses."""
    claims = claim_due(store, at)
    return [fire(store, c.instance_id, c.wait_id, c.claim_token, at, c.kind).status for c in claims]


def test_past_time_date_fires_right_after_deploy_once(store: Store, now: datetime) -> None:
    store.deployments.deploy(timer_start("timeDate", "2025-03-08T00:00:00Z"), now)
    [row] = timers(store)
    assert row.due_at == datetime(2025, 3, 8, tzinfo=UTC) and row.interval_seconds is None
    assert scan(store, now) == ["fired"]
    [inst] = started(store)
    assert inst.status == "completed" and inst.version == 1
    assert timers(store) == []  # a one-shot start timer is done
    assert scan(store, now + timedelta(days=3)) == []
    assert len(started(store)) == 1


def test_cycle_fires_one_period_after_deploy_and_rearms(store: Store, now: datetime) -> None:
    store.deployments.deploy(timer_start("timeCycle", "R/P1D"), now)
    assert timers(store)[0].due_at == now + timedelta(days=1)
    assert scan(store, now + timedelta(hours=23)) == []
    assert started(store) == []
    day1 = now + timedelta(days=1)
    assert scan(store, day1) == ["fired"]
    [row] = timers(store)
    assert row.due_at == now + timedelta(days=2) and row.claim_token is None
    assert scan(store, now + timedelta(days=2)) == ["fired"]
    assert [i.status for i in started(store)] == ["completed", "completed"]


def test_bounded_cycle_stops_after_its_repetitions(store: Store, now: datetime) -> None:
    store.deployments.deploy(timer_start("timeCycle", "R2/PT1H"), now)
    assert scan(store, now + timedelta(hours=1)) == ["fired"]
    assert scan(store, now + timedelta(hours=2)) == ["fired"]
    assert timers(store) == []
    assert scan(store, now + timedelta(hours=3)) == []
    assert len(started(store)) == 2


def test_overdue_cycle_fires_once_then_continues_from_now(store: Store, now: datetime) -> None:
    store.deployments.deploy(timer_start("timeCycle", "R/PT1H"), now)
    back = now + timedelta(hours=10, minutes=30)  # beat was down for ten periods
    assert scan(store, back) == ["fired"]
    assert timers(store)[0].due_at == back + timedelta(hours=1)
    assert scan(store, back) == []  # no catch-up burst
    assert len(started(store)) == 1


def test_duration_start_is_one_shot_after_deploy(store: Store, now: datetime) -> None:
    store.deployments.deploy(timer_start("timeDuration", "PT30M"), now)
    assert timers(store)[0].due_at == now + timedelta(minutes=30)
    assert scan(store, now + timedelta(minutes=29)) == []
    assert scan(store, now + timedelta(minutes=30)) == ["fired"]
    assert timers(store) == [] and len(started(store)) == 1


def test_new_version_replaces_old_start_timers(store: Store, now: datetime) -> None:
    store.deployments.deploy(timer_start("timeCycle", "R/P1D"), now)
    later = now + timedelta(hours=5)
    store.deployments.deploy(timer_start("timeCycle", "R/PT2H", end="done"), later)
    [row] = timers(store)
    assert row.version == 2 and row.due_at == later + timedelta(hours=2)
    assert scan(store, later + timedelta(hours=2)) == ["fired"]
    assert [i.version for i in started(store)] == [2]
    # A redeploy of identical content is no new version and keeps the armed row.
    store.deployments.deploy(
        timer_start("timeCycle", "R/PT2H", end="done"), later + timedelta(hours=3)
    )
    assert timers(store)[0].due_at == later + timedelta(hours=4)
    # A version without a timer start removes the timers altogether.
    store.deployments.deploy(NONE_START_ONLY, later + timedelta(hours=3))
    assert timers(store) == []
    assert scan(store, now + timedelta(days=30)) == []


def test_repeated_fire_never_starts_twice(store: Store, now: datetime) -> None:
    store.deployments.deploy(timer_start("timeCycle", "R/P1D"), now)
    day1 = now + timedelta(days=1)
    [claim] = claim_due(store, day1)
    args = (claim.instance_id, claim.wait_id, claim.claim_token, day1, claim.kind)
    assert fire(store, *args).status == "fired"
    # The same claim again (a redelivered fire_deadline): its claim is gone.
    assert fire(store, *args).status == "skipped"
    # Even if the row were back at the same due time (a fire racing a lost claim),
    # the instance id is derived from that due time: nothing new starts.
    with store.engine.begin() as conn:
        conn.execute(update(start_timers).values(due_at=day1))
    assert scan(store, day1) == ["fired"]
    [inst] = started(store)
    assert inst.id == start_instance_id("tick", 1, "ts", day1)
    assert claim.kind is ClaimKind.START_TIMER
    assert claim.instance_id == "tick" and claim.wait_id == "ts"


def test_failed_fire_keeps_the_row_and_backs_off(store: Store, now: datetime) -> None:
    store.deployments.deploy(timer_start("timeDate", "2025-03-08T00:00:00Z"), now)
    with store.engine.begin() as conn:  # the pinned version is not deployed here
        conn.execute(delete(definitions))
    store.deployments._definitions.clear()
    [claim] = claim_due(store, now)
    outcome = fire(store, claim.instance_id, claim.wait_id, claim.claim_token, now, claim.kind)
    assert outcome.status == "failed" and outcome.retry_at is not None
    [row] = timers(store)
    assert row.attempts == 1 and row.claim_token is None and "UnknownProcess" in row.last_error
    assert row.due_at == outcome.retry_at > now
    assert scan(store, now) == []  # backed off, not spinning
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(instances)).scalar() == 0


def test_timer_start_needing_variables_refuses_the_deploy(store: Store, now: datetime) -> None:
    with pytest.raises(InvalidModel, match="'ts'"):
        store.deployments.deploy(timer_start("timeDate", "=date and time(when)"), now)
    assert timers(store) == []
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(definitions)).scalar() == 0


def test_a_fire_queued_with_the_old_in_band_id_still_fires(store: Store, now: datetime) -> None:
    """Before claims had a kind, a timer start's claim travelled as
    ``"start-timer:" + key``; such a fire_deadline still in a queue must not be lost."""
    store.deployments.deploy(timer_start("timeCycle", "R/P1D"), now)
    day1 = now + timedelta(days=1)
    [claim] = claim_due(store, day1)
    legacy = START_TIMER_PREFIX + claim.instance_id
    assert fire(store, legacy, claim.wait_id, claim.claim_token, day1).status == "fired"

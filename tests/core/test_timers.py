"""Timers as Zeebe reads them: either-case designators, bracketed zone ids, cron cycles.

Pure: every due time is computed from a given "now"; cron's next firing comes from the
rule (croniter, six Spring fields, UTC), never from a clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from dormant.engine_core.builder import timer
from dormant.engine_core.expressions import TechnicalFailure
from dormant.engine_core.model import TimerKind, TimerSpec
from dormant.engine_core.timers import arm_timer, next_cycle_due
from dormant.engine_core.triggers import TimerFired
from tests.core.enginekit import T0, Run
from tests.core.test_engine_waits import approval

NOW = datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)  # a Monday


def arm(kind: TimerKind, value: str, now: datetime = NOW):  # type: ignore[no-untyped-def]
    return arm_timer(TimerSpec(kind, value), {"h": 2}, "t", now)


@pytest.mark.parametrize(
    ("value", "due"),
    [
        ("PT30s", NOW + timedelta(seconds=30)),
        ("pt1h", NOW + timedelta(hours=1)),
        ("p1dT2h", NOW + timedelta(days=1, hours=2)),
        ('="PT" + string(h) + "h"', NOW + timedelta(hours=2)),
    ],
)
def test_durations_in_either_case(value: str, due: datetime) -> None:
    assert arm(TimerKind.DURATION, value).due_at == due


@pytest.mark.parametrize(
    ("value", "interval", "remaining"),
    [("R/PT1h", 3600, None), ("r3/pt10m", 600, 2), ("R2/2026-01-05t10:00:00z/p1d", 86400, 1)],
)
def test_iso_cycles_in_either_case(value: str, interval: float, remaining: int | None) -> None:
    armed = arm(TimerKind.CYCLE, value)
    assert (armed.interval_seconds, armed.cycle_remaining, armed.cron) == (
        interval,
        remaining,
        None,
    )


def test_dates_with_a_bracketed_zone_id_or_an_offset_in_either_case() -> None:
    berlin = arm(TimerKind.DATE, "2026-10-02T08:09:40+02:00[Europe/Berlin]").due_at
    assert berlin == datetime(2026, 10, 2, 8, 9, 40, tzinfo=ZoneInfo("Europe/Berlin"))
    assert berlin == datetime(2026, 10, 2, 6, 9, 40, tzinfo=UTC)
    assert arm(TimerKind.DATE, "2026-10-02T08:09:40[Europe/Berlin]").due_at == berlin
    assert arm(TimerKind.DATE, "2026-10-02t06:09:40z").due_at == berlin
    plus2 = timezone(timedelta(hours=2))
    assert arm(TimerKind.DATE, "2026-10-02T08:09:40+02:00").due_at == datetime(
        2026, 10, 2, 8, 9, 40, tzinfo=plus2
    )


@pytest.mark.parametrize(
    ("cron", "first", "second"),
    [
        (
            "0 0 9-17 * * MON-FRI",
            datetime(2026, 1, 5, 10, tzinfo=UTC),
            datetime(2026, 1, 5, 11, tzinfo=UTC),
        ),
        ("*/20 * * * * *", NOW + timedelta(seconds=10), NOW + timedelta(seconds=30)),
        (
            "0 0 12 ? * SAT",
            datetime(2026, 1, 10, 12, tzinfo=UTC),
            datetime(2026, 1, 17, 12, tzinfo=UTC),
        ),
        ("0 0 0 L * ?", datetime(2026, 1, 31, tzinfo=UTC), datetime(2026, 2, 28, tzinfo=UTC)),
        ("@daily", datetime(2026, 1, 6, tzinfo=UTC), datetime(2026, 1, 7, tzinfo=UTC)),
        (
            '="0 0 " + string(h) + " * * *"',
            datetime(2026, 1, 6, 2, tzinfo=UTC),
            datetime(2026, 1, 7, 2, tzinfo=UTC),
        ),
    ],
)
def test_cron_cycles_follow_their_calendar(cron: str, first: datetime, second: datetime) -> None:
    armed = arm(TimerKind.CYCLE, cron)
    assert armed.due_at == first and armed.cron is not None and armed.cycle_remaining is None
    spec = TimerSpec(TimerKind.CYCLE, cron)
    assert armed.interval_seconds is not None
    after = next_cycle_due(
        armed.due_at, armed.interval_seconds, first, spec=spec, variables={"h": 2}
    )
    assert after == second


def test_an_overdue_cron_cycle_fires_once_then_keeps_its_calendar() -> None:
    spec = TimerSpec(TimerKind.CYCLE, "0 0 9-17 * * MON-FRI")
    late = datetime(2026, 1, 9, 18, 30, tzinfo=UTC)  # Friday evening, days after the due time
    nxt = next_cycle_due(datetime(2026, 1, 5, 10, tzinfo=UTC), 3600, late, spec=spec)
    assert nxt == datetime(2026, 1, 12, 9, tzinfo=UTC)  # Monday 09:00, never a burst


@pytest.mark.parametrize(
    ("kind", "value", "quoted"),
    [
        (TimerKind.CYCLE, "0 0 9 * *", "'0 0 9 * *' is not a cron expression of six fields"),
        (TimerKind.CYCLE, "0 0 25 * * *", "'0 0 25 * * *' is not a valid cron expression"),
        (TimerKind.DURATION, "PT5X", "'PT5X' is not an ISO 8601 duration"),
        (TimerKind.DATE, "2026-13-01T00:00:00Z", "'2026-13-01T00:00:00Z' is not an ISO 8601"),
        (TimerKind.DATE, "2026-10-02T08:00:00+05:00[Europe/Berlin]", "with a valid zone"),
        (TimerKind.CYCLE, "every day", "'every day' is not a repeating interval"),
        (TimerKind.CYCLE, '="P" + "T1X"', "(= 'PT1X')"),
    ],
)
def test_errors_quote_the_offending_text(kind: TimerKind, value: str, quoted: str) -> None:
    with pytest.raises(TechnicalFailure) as info:
        arm(kind, value)
    assert quoted in str(info.value) and "'t'" in str(info.value)


def test_a_cron_boundary_cycle_rearms_on_its_calendar_in_the_engine() -> None:
    run = Run(approval(timer("0 0 9-17 * * MON-FRI", TimerKind.CYCLE), interrupting=False))
    run.start()  # T0 is Monday 2026-01-05 09:00 UTC
    assert run.wait("late").due_at == T0 + timedelta(hours=1)
    run.fire("late")
    assert run.wait("late").due_at == T0 + timedelta(hours=2)
    friday_night = datetime(2026, 1, 9, 23, tzinfo=UTC)
    run.send(TimerFired(wait_id=run.wait("late").id), at=friday_night)
    assert run.wait("late").due_at == datetime(2026, 1, 12, 9, tzinfo=UTC)
    assert len(run.tokens("escalate")) == 2

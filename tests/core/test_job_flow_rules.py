"""Flow control's pure rules (engine_core/job_flow.py) and the broker priority mapping
(tasks/priorities.py): table-driven, no database."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta

import pytest

from dormant.engine_core.errors import InvalidSetting
from dormant.engine_core.job_flow import FlowLimits, RateLimited, flow_key, refill
from dormant.persistence.settings import Settings
from dormant.tasks.priorities import broker_options, message_priority, transport_options

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("key", "variables", "expected"),
    [
        ("=customerId", {"customerId": "c-1"}, "c-1"),
        ("customerId", {"customerId": 7}, "7"),
        ("=customerId", {"customerId": 7.0}, "7"),
        ("=customerId", {}, ""),  # null: the shared key
        ("=1 / 0 + x", {}, ""),  # an expression that fails never blocks a job
        ('="t-" + region', {"region": "eu"}, "t-eu"),
        ("=k", {"k": "x" * 300}, "x" * 255),
    ],
)
def test_flow_key(key: str, variables: dict[str, object], expected: str) -> None:
    assert flow_key(FlowLimits(key=key, key_concurrency=1), variables, NOW) == expected


def test_a_bucket_refills_evenly_up_to_its_size() -> None:
    assert refill(None, None, NOW, 4, 1.0) == 4.0  # never seen: full
    assert refill(0.0, NOW, NOW + timedelta(seconds=0.5), 4, 1.0) == 2.0
    assert refill(3.5, NOW, NOW + timedelta(seconds=10), 4, 1.0) == 4.0
    assert refill(1.0, NOW, NOW - timedelta(seconds=5), 4, 1.0) == 1.0  # clock behind


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"key_concurrency": 2}, "per-key limit needs a key expression"),
        ({"concurrency": 0}, "concurrency must be a whole number >= 1"),
        ({"rate": 3, "rate_period_seconds": 0}, "rate_period_seconds must be > 0"),
    ],
)
def test_contradictory_limits_are_refused_by_name(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSetting, match=message):
        FlowLimits(**fields)  # type: ignore[arg-type]


def test_the_settings_refuse_a_bad_limit_naming_it() -> None:
    with pytest.raises(InvalidSetting, match="DORMANT_JOB_TYPES"):
        Settings.from_env({"DORMANT_JOB_TYPES": '{"t": {"key_rate": 5}}'})


def test_rate_limited_survives_pickling_and_is_bounded() -> None:
    copy = pickle.loads(pickle.dumps(RateLimited(2.5, whole_type=True)))
    assert (copy.retry_after, copy.whole_type) == (2.5, True)
    assert RateLimited(10**9).retry_after == 86_400.0
    with pytest.raises(ValueError, match="retry_after"):
        RateLimited(float("nan"))


@pytest.mark.parametrize(
    ("url", "value", "expected"),
    [
        ("amqp://h//", 7, 7),
        ("amqp://h//", 99, 9),  # clamped to the levels
        ("redis://h/1", 7, 2),  # Redis reads step 0 first: reversed
        ("redis://h/1", None, 9),
        ("redis://h/1", "high", 9),  # not a number: 0
        ("sqla+sqlite:///b", 7, None),  # no priorities there
    ],
)
def test_message_priority(url: str, value: object, expected: int | None) -> None:
    assert message_priority(url, 9, "priority", {"priority": value}) == expected


def test_priorities_are_off_unless_asked_for() -> None:
    assert message_priority("amqp://h//", 0, "priority", {"priority": 5}) is None
    assert broker_options("amqp://h//", 0) == transport_options("redis://h/1", 0) == {}
    assert broker_options("amqp://h//", 4)["task_queue_max_priority"] == 4
    assert transport_options("redis://h/1", 4)["priority_steps"] == [0, 1, 2, 3, 4]

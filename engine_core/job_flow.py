"""Flow control of job types: the rules, without the rows (docs/flow-control.md).

A job type may have a concurrency limit (jobs out at once, across every worker), a key
(a FEEL expression over the job's variables, e.g. ``=customerId``) with a concurrency
limit per key, and rate limits (N jobs per period, for the type and per key). The
shell keeps the counts in the database (persistence/job_flow.py) and asks here:

* ``flow_key``: which key a job is counted under;
* ``refill``: a token bucket's tokens at ``now`` (rates are buckets of ``rate`` tokens
  refilled evenly over ``period``);
* ``room``: may one more job of a key start, given the counts?

Invariant the shell keeps with these: a slot is taken in the transaction that writes
the job's dispatch, and given back in the transaction that ends the job's wait (its
result, a cancel, a boundary), so the counts never drift by a crash.

``RateLimited`` is what a job raises when the downstream system said "wait": the job
goes back to waiting, its key (or its whole type) pauses until ``retry_after`` has
passed, and no retry is consumed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from dormant.engine_core.errors import InvalidSetting

__all__ = [
    "KEY_MAX_CHARS",
    "MAX_RETRY_AFTER_SECONDS",
    "FlowLimits",
    "RateLimited",
    "flow_key",
    "refill",
    "room",
]

# The longest key kept (longer values are cut: the key names a row, not the data).
KEY_MAX_CHARS = 255
# A RateLimited pause longer than a day is taken as a day: a typo must not park a type.
MAX_RETRY_AFTER_SECONDS = 86_400.0


class RateLimited(Exception):
    """Raised by a job: the downstream system asked to wait ``retry_after`` seconds.

    The job is not failed and consumes no retry: it waits (a row, not a sleeping
    worker) and is sent again once the pause is over. ``whole_type``: pause every key
    of the job's type, not only the job's own key.
    """

    def __init__(self, retry_after: float, whole_type: bool = False) -> None:
        seconds = float(retry_after)
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"retry_after must be a number of seconds >= 0, not {retry_after!r}")
        self.retry_after = min(seconds, MAX_RETRY_AFTER_SECONDS)
        self.whole_type = whole_type
        super().__init__(
            f"rate limited by the downstream system: retry after {self.retry_after:g} s"
            + (" (whole job type)" if whole_type else "")
        )

    def __reduce__(self) -> tuple[type[RateLimited], tuple[float, bool]]:
        # Celery pickles a job's exception before its failure signal sees it: without
        # this, the copy is rebuilt from the message and fails (a wrapper arrives).
        return (type(self), (self.retry_after, self.whole_type))


@dataclass(frozen=True, slots=True)
class FlowLimits:
    """One job type's limits (None: no such limit). ``rate_period_seconds`` is the
    period of both ``rate`` (the type) and ``key_rate`` (each key)."""

    concurrency: int | None = None
    key: str | None = None
    key_concurrency: int | None = None
    rate: int | None = None
    key_rate: int | None = None
    rate_period_seconds: float = 1.0

    def __post_init__(self) -> None:
        for name in ("concurrency", "key_concurrency", "rate", "key_rate"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise InvalidSetting(f"job type limit {name} must be a whole number >= 1")
        if not self.rate_period_seconds > 0:
            raise InvalidSetting("job type limit rate_period_seconds must be > 0")
        keyed = self.key_concurrency is not None or self.key_rate is not None
        if keyed and not self.key:
            raise InvalidSetting("a per-key limit needs a key expression (e.g. '=customerId')")

    @property
    def counts_slots(self) -> bool:
        """Does a job of this type hold a slot while it is out?"""
        return self.concurrency is not None or self.key_concurrency is not None

    @property
    def limited(self) -> bool:
        return self.counts_slots or self.rate is not None or self.key_rate is not None


def flow_key(limits: FlowLimits, variables: Mapping[str, Any], now: datetime) -> str:
    """The key a job is counted under: its key expression's value as text, or ``""``
    (no key expression, a null value, or an expression that fails: such jobs share one
    key, so a bad expression never blocks a job)."""
    if not limits.key:
        return ""
    # Here, not at the top: the settings read this module, and the CLI's start must not
    # pay for the FEEL grammar (tests/integration/test_cli_startup.py).
    from dormant.engine_core.expressions import TechnicalFailure, evaluate, is_expression

    raw = limits.key if is_expression(limits.key) else "=" + limits.key
    try:
        value = evaluate(raw, variables, "flow key", now)
    except TechnicalFailure:
        return ""
    if value is None:
        return ""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float | Decimal) and math.isfinite(value) and value == int(value):
        text = str(int(value))  # 7, 7.0 and FEEL's Decimal 7 are one key
    else:
        text = str(value)
    return text[:KEY_MAX_CHARS]


def refill(
    tokens: float | None,
    at: datetime | None,
    now: datetime,
    rate: int,
    period_seconds: float,
) -> float:
    """A bucket of ``rate`` tokens refilled at ``rate / period`` per second: its tokens
    at ``now`` (a bucket never seen starts full)."""
    if tokens is None or at is None:
        return float(rate)
    elapsed = max((now - at).total_seconds(), 0.0)
    return min(float(rate), tokens + elapsed * rate / period_seconds)


def room(running: int, limit: int | None) -> bool:
    return limit is None or running < limit

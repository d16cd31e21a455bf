# mypy: disable-error-code="untyped-decorator"
"""Job tasks for tests/integration/test_job_flow.py, loaded by its workers. Each keeps
what it saw in the stack's own Redis database (the broker's, borrowed by the test),
under ``flowtest:<tag>:``: the jobs themselves count, not the engine. No tests here."""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Task

from dormant.engine_core.job_flow import RateLimited
from dormant.tasks.app import app
from dormant.tasks.jobs import idempotency_key

# Running count up, and the peak kept: one atomic step, so two workers never race it.
_ENTER = """
local n = redis.call('INCR', KEYS[1])
local p = tonumber(redis.call('GET', KEYS[2]) or '0')
if n > p then redis.call('SET', KEYS[2], n) end
return n
"""


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["DORMANT_BROKER_URL"])


@app.task(name="flow-peak", bind=True)
def peak(self: Task, customerId: str = "", tag: str = "", **_: Any) -> dict[str, Any]:
    return _counted(self, customerId, tag)


@app.task(name="flow-peak-all", bind=True)
def peak_all(self: Task, tag: str = "", **_: Any) -> dict[str, Any]:
    return _counted(self, "all", tag)


def _counted(task: Task, customerId: str, tag: str) -> dict[str, Any]:
    """Counts itself running; also lists each run's attempt (its idempotency key), so
    that a peak over the limit tells a job run twice from a slot counted wrong."""
    r = _redis()
    r.rpush(f"flowtest:{tag}:runs", f"{customerId}|{idempotency_key(task)}")
    running, top = f"flowtest:{tag}:running:{customerId}", f"flowtest:{tag}:peak:{customerId}"
    r.eval(_ENTER, 2, running, top)
    try:
        time.sleep(0.3)
    finally:
        r.decr(running)
    return {}


@app.task(name="flow-fair")
def fair(customerId: str = "", tag: str = "", **_: Any) -> dict[str, Any]:
    """Waits for the test's gate (at most a minute), then records its turn."""
    r = _redis()
    give_up = time.monotonic() + 60
    while not r.exists(f"flowtest:{tag}:gate") and time.monotonic() < give_up:
        time.sleep(0.02)
    r.rpush(f"flowtest:{tag}:order", customerId)
    return {}


@app.task(name="flow-429", bind=True)
def too_many(self: Task, tag: str = "", pause: float = 1.0, **_: Any) -> dict[str, Any]:
    """The downstream says "429, retry after ``pause`` s" to the first call only."""
    r = _redis()
    calls = int(r.incr(f"flowtest:{tag}:calls"))
    r.rpush(f"flowtest:{tag}:runs", f"{idempotency_key(self)}|{time.time()}")
    if calls == 1:
        raise RateLimited(retry_after=pause)
    return {"calls": calls}


@app.task(name="flow-rate")
def rated(tag: str = "", **_: Any) -> dict[str, Any]:
    _redis().rpush(f"flowtest:{tag}:at", str(time.time()))
    return {}

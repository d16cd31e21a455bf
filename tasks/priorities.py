"""Instance priorities on the broker (docs/flow-control.md, "Priorities").

Off by default (``DORMANT_PRIORITY_LEVELS=0``): turning it on changes how the queues are
declared, and RabbitMQ refuses to redeclare an existing queue with other arguments. With
N levels, a start's message and a job's message carry the priority read from the
variable ``DORMANT_PRIORITY_VARIABLE`` (a whole number, clamped to 0..N; higher goes
first; absent or not a number: 0), through Celery's own options only:

* RabbitMQ: ``task_queue_max_priority`` = N, so Celery declares every queue with
  ``x-max-priority``; the message's ``priority`` is the level;
* Redis: kombu's ``priority_steps`` 0..N with ``queue_order_strategy="priority"``: one
  list per level, read lowest number first, so the level is sent reversed (N - level);
* the embedded ``sqla+`` transport has no priorities: the setting is ignored there.

A broker orders what is waiting in one queue; a message already prefetched by a worker
is not overtaken, so priorities matter under a backlog (prefetch 1 keeps that small).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["broker_options", "message_priority", "transport_options"]

_REDIS = ("redis://", "rediss://", "redis+socket://")
_AMQP = ("amqp://", "amqps://", "pyamqp://")


def broker_options(broker_url: str, levels: int) -> dict[str, Any]:
    """The Celery settings that give the queues ``levels`` + 1 priorities (RabbitMQ)."""
    if levels > 0 and broker_url.startswith(_AMQP):
        return {"task_queue_max_priority": levels, "task_default_priority": 0}
    return {}


def transport_options(broker_url: str, levels: int) -> dict[str, Any]:
    """The kombu transport options for the same on Redis."""
    if levels > 0 and broker_url.startswith(_REDIS):
        return {"priority_steps": list(range(levels + 1)), "queue_order_strategy": "priority"}
    return {}


def message_priority(
    broker_url: str, levels: int, variable: str, variables: Mapping[str, Any] | None
) -> int | None:
    """The ``priority`` publish option for a message of an instance with
    ``variables``, or None (priorities off, or a broker without them)."""
    if levels <= 0 or not broker_url.startswith((*_REDIS, *_AMQP)):
        return None
    raw = (variables or {}).get(variable)
    level = 0
    if isinstance(raw, int | float) and not isinstance(raw, bool) and math.isfinite(raw):
        level = max(0, min(levels, int(raw)))
    return levels - level if broker_url.startswith(_REDIS) else level

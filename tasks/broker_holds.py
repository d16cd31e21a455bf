# mypy: disable-error-code="no-untyped-call"
"""How many messages the broker holds for dormant: its own queue bookkeeping, read.

The inbox and outbox sweeps re-send a trigger only when the broker no longer holds it
(issue 24: a backlog queued while every worker was down used to be re-sent whole, and
the engine doubled its own load). A message the broker holds is either *ready* (in a
queue, not yet delivered) or *unacknowledged* (delivered to a worker that has not
acknowledged it: dormant acknowledges late, after the trigger's commit; a worker that
dies gives it back to the broker). Both are counted here, for every queue this app
declares:

- **Redis**: the length of each queue's list (every priority level) plus the entries
  of kombu's ``unacked`` hash (a message a worker holds, or a dead worker's, waiting
  for its restore after the visibility timeout). Exact.
- **RabbitMQ**: each queue's ready count from a passive declare. The unacknowledged
  count is not readable over AMQP 0-9-1: each consumer is counted as holding up to
  its prefetch window (``worker_prefetch_multiplier`` x this machine's cores), an
  upper bound, so the sweep errs towards waiting, never towards a duplicate.
- **Any other transport** (the embedded ``sqla+`` default): unknown (``None``); the
  sweep falls back to its age rule (docs/internals.md, "Re-send only the lost").

The count is a number, not a list of message ids: neither broker can say cheaply
whether it holds one given message. The sweep turns it into a bound
(tasks/sweeps.py): at least ``waiting - held`` of the triggers it is waiting for
are lost, so it re-sends that many, the oldest first.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from dormant.tasks.app import TIMER_QUEUE, app

__all__ = ["held_messages"]

log = logging.getLogger("dormant.sweeps")


def _queue_names() -> list[str]:
    """The queues a trigger the sweeps wait for can be in: every queue this app
    declares but the timers' (its scans and fires are never inbox or outbox rows, and
    beat sends a scan every half second: counting them would only delay a re-send)."""
    return sorted(
        {str(q.name) for q in app.amqp.queues.values() if q.name and q.name != TIMER_QUEUE.name}
    )


def _redis(conn: Any) -> int:
    channel = conn.default_channel
    ready = sum(int(channel._size(name)) for name in _queue_names())
    with channel.conn_or_acquire() as client:
        unacked = int(client.hlen(channel.unacked_key))
    return ready + unacked


def _amqp(conn: Any) -> int:
    window = int(app.conf.worker_prefetch_multiplier or 1) * (os.cpu_count() or 1)
    held = 0
    for name in _queue_names():
        channel = conn.channel()
        try:
            ok = channel.queue_declare(queue=name, passive=True)
            held += int(ok.message_count) + int(ok.consumer_count) * window
        except Exception:  # no such queue (never declared): it holds nothing
            pass
        finally:
            try:
                channel.close()
            except Exception:  # closed by the broker already (404 on the passive declare)
                pass
    return held


def held_messages() -> int | None:
    """Messages the broker holds in this app's queues (ready + unacknowledged), or
    ``None`` when this transport's bookkeeping is not readable (module docstring).
    Raises what the broker raised: the sweep then waits for its next tick."""
    url = str(app.conf.broker_url or "")
    if url.startswith(("redis://", "rediss://", "redis+socket://")):
        read = _redis
    elif url.startswith(("amqp://", "amqps://", "pyamqp://")):
        read = _amqp
    else:
        return None
    with app.connection_for_read() as conn:
        conn.ensure_connection(max_retries=1)
        return read(conn)

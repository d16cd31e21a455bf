# mypy: disable-error-code="misc,no-untyped-call"
"""kombu's SQLAlchemy transport (the embedded default's broker, ``sqla+sqlite``), polled
with one plain read per round instead of one locking transaction per queue.

Why: kombu's channel asks each queue in turn for a message, and each ask is a
transaction of its own that takes SQLite's write lock (``BEGIN IMMEDIATE``, then
``SELECT … FOR UPDATE``) whether or not a message waits. A worker reads four queues
(``dormant``, ``dormant.timers``, ``dormant.quarantine``, ``celery``) every
``polling_interval`` (0.1 s, tasks/app.py), so an idle ``dormant dev`` took the write
lock forty times a second (a quarter of its main process's CPU); every publish of its pool
processes and of beat queued behind those locks, and a fork in the middle of one was
what left a pool process unable to write at all (persistence/sqlite_forks.py).

Now a round starts with one read that takes no write lock: which queues have a visible
message (an index on ``visible`` serves it; delivered messages are kept invisible by
kombu). Only a queue it names is asked kombu's way, under the lock; the others are
empty without a statement. The answer is kept for ``ROUND_SECONDS``, half the polling
interval, so one round of asks shares it and a message published meanwhile waits at
most that much longer for the next round.
"""

from __future__ import annotations

from time import monotonic
from typing import Any

from kombu.transport import sqlalchemy as sqla
from kombu.transport.virtual import Empty
from sqlalchemy import select

__all__ = ["ROUND_SECONDS", "Channel", "use"]

# How long one read of the queues with messages answers a round of asks.
ROUND_SECONDS = 0.05


class Channel(sqla.Channel):
    """kombu's channel; ``_get`` first consults the round's read (module docstring)."""

    _with_messages: frozenset[str] = frozenset()
    _read_at: float = float("-inf")

    def _get(self, queue: str, timeout: Any = None) -> Any:
        now = monotonic()
        if now - self._read_at >= ROUND_SECONDS:
            self._with_messages = self._queues_with_messages()
            self._read_at = now
        if queue not in self._with_messages:
            self._end_open_read()
            raise Empty()
        return super()._get(queue)

    def _end_open_read(self) -> None:
        """kombu's queue declaration reads with the session and leaves its transaction
        open when the queue exists; kombu's own next ask ended it. Ended here instead,
        so the consumer holds no connection while idle: a fork waits for every SQLite
        connection another thread holds (persistence/sqlite_forks.py)."""
        session = self._session
        if session is not None and session.in_transaction():
            session.commit()

    def _queues_with_messages(self) -> frozenset[str]:
        messages, queues = self.message_cls, self.queue_cls
        query = (
            select(queues.name)
            .join(messages, messages.queue_id == queues.id)
            .where(messages.visible == True)  # noqa: E712 - the column's index
            .distinct()
        )
        # A connection of its own, not the session's: a plain read, no ORM state to keep.
        with self.session.get_bind().connect() as conn:
            return frozenset(conn.execute(query).scalars())


def use() -> None:
    """Make every ``sqla+`` connection of this process use this channel."""
    sqla.Transport.Channel = Channel

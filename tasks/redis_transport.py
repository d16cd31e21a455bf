# mypy: disable-error-code="misc,no-untyped-call"
"""kombu's Redis transport, with dormant's exchanges known to every channel at birth.

Why: when a worker connects, kombu restores the unacknowledged messages of dead
workers (older than the visibility timeout) on the connection's FIRST channel, before
the worker has declared any queue. A restore looks the message's exchange up in the
connection's own state; an exchange not declared there is taken for a ``direct`` one,
whose lookup of ``job.charge-card`` against the ``job.#`` binding finds no queue — and
the message is dropped (the Redis transport has no dead-letter queue), silently. So a
worker started after a crash could drop the crashed worker's triggers and jobs; jobs
then came back only by the job timeout. Declaring the exchanges when a channel is
created (a virtual declaration: no Redis command) makes that first restore find the
``dormant`` queue. tests/faults/test_recovery_window.py kills a worker after a job ran
and checks that the job runs again within the visibility timeout.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis

__all__ = ["Transport"]


class Channel(redis.Channel):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from tasks.app import EXCHANGE, app

        exchanges = {str(EXCHANGE.name): EXCHANGE}
        for queue in app.amqp.queues.values():
            for ex in [queue.exchange, *(b.exchange for b in queue.bindings)]:
                if ex is not None and ex.name:
                    exchanges.setdefault(ex.name, ex)
        for ex in exchanges.values():
            self.exchange_declare(
                exchange=ex.name, type=ex.type, durable=ex.durable, auto_delete=ex.auto_delete
            )


class Transport(redis.Transport):
    Channel = Channel

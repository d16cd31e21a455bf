"""The embedded default's broker polls with one plain read per round
(tasks/embedded_broker.py): an idle consumer takes no write lock, and a message is
still delivered to the queue it was sent to, in order."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection
from kombu.transport import sqlalchemy as sqla
from sqlalchemy import event

from dormant.tasks import embedded_broker


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    embedded_broker.use()
    url = f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    with Connection(url) as conn:
        yield conn


def _statements(conn: Any) -> list[str]:
    engine, _ = sqla.Channel._engines[conn.hostname]  # the transport's engine cache
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    return seen


def test_an_idle_consumer_takes_no_write_lock(broker: Any) -> None:
    queues = [broker.SimpleQueue(name) for name in ("dormant", "dormant.timers", "celery")]
    seen = _statements(broker)
    rounds = 10
    for _ in range(rounds):
        for queue in queues:
            with pytest.raises(queue.Empty):
                queue.get(block=False)
        time.sleep(embedded_broker.ROUND_SECONDS)
    assert not [s for s in seen if "BEGIN IMMEDIATE" in s], seen
    assert len(seen) <= rounds, f"{len(seen)} statements for {rounds} rounds of 3 queues"
    for queue in queues:
        queue.close()


def test_messages_reach_their_queue_in_order(broker: Any) -> None:
    timers, main = broker.SimpleQueue("dormant.timers"), broker.SimpleQueue("dormant")
    with pytest.raises(main.Empty):
        main.get(block=False)  # a round read just now: the queue was empty
    for i in range(3):
        main.put({"n": i})
    got = []
    for _ in range(3):
        message = main.get(timeout=2)  # found by the next round's read
        got.append(message.payload["n"])
        message.ack()
    assert got == [0, 1, 2]
    with pytest.raises(timers.Empty):
        timers.get(block=False)
    timers.put({"n": "t"})
    assert timers.get(timeout=2).payload == {"n": "t"}
    with pytest.raises(main.Empty):
        main.get(timeout=0.3)
    timers.close()
    main.close()


def test_an_idle_consumer_holds_no_connection(broker: Any) -> None:
    """A fork waits for the connections other threads hold (persistence/sqlite_forks.py):
    an idle consumer, whose queue declaration read through kombu's session, must hold
    none, or every pool process the worker replaces waits out the fork's bound."""
    queue = broker.SimpleQueue("dormant")  # the declaration: a read left open by kombu
    with pytest.raises(queue.Empty):
        queue.get(block=False)
    engine, _ = sqla.Channel._engines[broker.hostname]
    assert engine.pool.checkedout() == 0
    queue.close()

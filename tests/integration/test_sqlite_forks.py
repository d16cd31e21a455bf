"""A process forked while another thread is inside a SQLite transaction can still write
that database (persistence/sqlite_forks.py).

Without the guard the child inherits SQLite's in-memory record of a lock that one of its
own connections seems to hold, and every write it tries waits out the busy timeout and
fails with "database is locked": the pool process billiard forked to replace a retired
one on the embedded default could publish nothing (tests/faults/test_job_survival.py
met it one run in about twenty).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kombu import Connection
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

import dormant.tasks.app  # noqa: F401  (installs the guard, as in every worker)
from dormant.persistence import sqlite_forks
from dormant.persistence.db import make_engine

# The child's bound on taking the write lock: the parent's transaction has ended by then.
CHILD_LOCK_SECONDS = 2.0


def _child_can_write(path: Path) -> bool:
    """Fork; the child takes the file's write lock on a connection of its own."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's exit status is the result
        code = 3
        try:
            conn = sqlite3.connect(str(path), timeout=CHILD_LOCK_SECONDS, isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _fork_during(hold: Callable[[threading.Event], None], path: Path) -> tuple[bool, float]:
    """Run ``hold`` in a thread; once it says its transaction is open, fork."""
    inside = threading.Event()
    holder = threading.Thread(target=hold, args=(inside,))
    holder.start()
    assert inside.wait(5)
    started = time.monotonic()
    wrote = _child_can_write(path)
    waited = time.monotonic() - started
    holder.join()
    return wrote, waited


HOLD_SECONDS = 0.4


def test_a_fork_waits_for_a_transaction_of_dormant_s_engine(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    engine = make_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))

    def hold(inside: threading.Event) -> None:
        with engine.begin() as conn:  # BEGIN IMMEDIATE: the write lock
            conn.execute(text("INSERT INTO t VALUES (1)"))
            inside.set()
            time.sleep(HOLD_SECONDS)

    wrote, waited = _fork_during(hold, path)
    assert wrote, "the child could not take the write lock"
    assert waited >= HOLD_SECONDS / 2, "the fork did not wait for the transaction"
    engine.dispose()


def test_a_fork_waits_for_a_session_of_a_plain_engine(tmp_path: Path) -> None:
    """The broker transport's kind of engine: created by kombu, not by dormant, with
    pysqlite's own transaction handling and an ORM session."""
    path = tmp_path / "broker.sqlite3"
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))

    def hold(inside: threading.Event) -> None:
        with Session(engine) as session:
            session.execute(text("BEGIN IMMEDIATE TRANSACTION"))  # as kombu's _get
            inside.set()
            time.sleep(HOLD_SECONDS)
            session.commit()

    wrote, waited = _fork_during(hold, path)
    assert wrote, "the child could not take the write lock"
    assert waited >= HOLD_SECONDS / 2
    engine.dispose()


def test_forks_beside_a_polling_consumer_of_the_embedded_broker_can_all_publish(
    tmp_path: Path,
) -> None:
    """The worker's case itself: a consumer polling the ``sqla+sqlite`` broker (every
    poll a ``BEGIN IMMEDIATE``, here back to back) while the main thread forks."""
    path = tmp_path / "broker.sqlite3"
    url = f"sqla+sqlite:///{path}"
    stop = threading.Event()
    polls = 0

    def consume() -> None:
        nonlocal polls
        with Connection(url) as conn:
            queue = conn.SimpleQueue("polled")
            while not stop.is_set():
                try:
                    queue.get(block=False)
                except queue.Empty:
                    pass
                polls += 1
            queue.close()

    consumer = threading.Thread(target=consume)
    consumer.start()
    try:
        deadline = time.monotonic() + 10
        while polls < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert polls >= 20, "the consumer did not start polling"
        outcomes = [_child_can_write(path) for _ in range(15)]
    finally:
        stop.set()
        consumer.join()
    assert all(outcomes), f"{outcomes.count(False)} of {len(outcomes)} children could not write"


def test_a_fork_does_not_wait_for_the_forking_thread_s_own_connection(tmp_path: Path) -> None:
    """The forking thread's own transaction is no other thread's: nothing to wait for."""
    path = tmp_path / "db.sqlite3"
    engine = make_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:  # pragma: no cover
            os._exit(0)
        os.waitpid(pid, 0)
        assert time.monotonic() - started < sqlite_forks.FORK_WAIT_SECONDS / 2
        conn.execute(text("SELECT 1"))
    engine.dispose()


def test_a_fork_does_not_wait_for_a_connection_left_by_an_ended_thread(tmp_path: Path) -> None:
    """A thread that ended with a connection checked out (a leak) never gives it back:
    the fork goes ahead at once instead of waiting out its bound."""
    path = tmp_path / "db.sqlite3"
    engine = make_engine(f"sqlite:///{path}")
    leaked: list[Any] = []
    leaker = threading.Thread(target=lambda: leaked.append(engine.connect()))
    leaker.start()
    leaker.join()
    assert engine.pool.checkedout() == 1
    started = time.monotonic()
    assert _child_can_write(path)
    assert time.monotonic() - started < sqlite_forks.FORK_WAIT_SECONDS / 2
    leaked[0].close()
    engine.dispose()

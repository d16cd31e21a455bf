"""No process forks while another of its threads holds a SQLite connection.

**Why.** SQLite keeps what a process holds on a database file (its locks, the
connections sharing them) in the process's memory, one record per file, shared by every
connection of the process to that file. ``fork`` copies that memory and not the locks
themselves. A child forked while another thread of its parent was inside a transaction
on the file (or half way through taking a lock) inherits a record saying one of its own
connections holds the lock; no connection of the child ever releases it, so every write
the child tries to that file waits out the busy timeout and fails with "database is
locked", while no process holds anything. SQLite's own page on how databases get
corrupted says the same of connections carried across a fork (sqlite.org,
"howtocorrupt", section 2.6).

On the embedded default this is what a worker does: billiard forks a pool process from a
thread of its own whenever one is replaced (a process that retired after a job's
``MemoryError``, tasks/job_task.py, one killed, one past its task limit), and the
worker's consumer polls the broker's table under ``BEGIN IMMEDIATE`` ten times a second
(tasks/app.py ``_transport_options``). A replacement forked in that moment could publish
nothing at all: the deadlines a scan claimed were sent only when their claims expired,
30 s later, and every follow-up it sent failed the same way.

**How.** Every SQLAlchemy pool connection to SQLite in the process (dormant's own
engines and the broker transport's) counts as in use from its creation or checkout to its
checkin: the span that holds every statement, transaction and lock of it (a checked-in
connection has been rolled back by the pool and holds nothing). Before a fork
(``os.register_at_fork``) the forking thread waits until no other live thread has one in use,
and meanwhile holds any thread that has none at its next checkout; a thread that already
has one goes on, so it can finish what it holds. Both sides of the fork then let the
held threads go; the child forgets the parent's other threads. SQLite transactions last
milliseconds, so a fork waits about as long; the wait is bounded by
``FORK_WAIT_SECONDS`` (a connection leaked by a broken caller must not stop a worker from
replacing its processes), past which the fork goes ahead and says which risk it took.

Connections to other databases pass through untouched.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import weakref
from typing import Any

from sqlalchemy import event
from sqlalchemy.pool import Pool

__all__ = ["FORK_WAIT_SECONDS", "install"]

log = logging.getLogger("dormant.persistence")

# How long a fork waits for other threads' SQLite connections to be checked in.
FORK_WAIT_SECONDS = 30.0


class _Gate:
    """Which thread uses which SQLite connection, and whether a fork is waiting."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        # A pool's connection record -> the thread using it (weak: a record dropped
        # with its pool stops counting).
        self.in_use: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.forking_thread: int | None = None

    def holds_one(self, thread: int) -> bool:
        return any(t == thread for t in self.in_use.values())

    def others(self, thread: int) -> int:
        """Connections in use by other live threads. A thread that ended with one still
        checked out (a leak) will never give it back: waiting for it would only delay
        the fork by the whole bound, so it is not counted."""
        alive = {t.ident for t in threading.enumerate()}
        return sum(1 for t in self.in_use.values() if t != thread and t in alive)

    def holders(self, thread: int) -> list[str]:
        names = {t.ident: t.name for t in threading.enumerate()}
        return sorted({names[t] for t in self.in_use.values() if t != thread and t in names})


_gate = _Gate()
_installed = False


def _is_sqlite(dbapi_connection: Any) -> bool:
    return isinstance(dbapi_connection, sqlite3.Connection)


def _take(dbapi_connection: Any, record: Any, *_: Any) -> None:
    if not _is_sqlite(dbapi_connection):
        return
    me = threading.get_ident()
    gate = _gate
    with gate.changed:
        while gate.forking_thread not in (None, me) and not gate.holds_one(me):
            gate.changed.wait()
        gate.in_use[record] = me


def _give_back(dbapi_connection: Any, record: Any) -> None:
    # An invalidated connection comes back as None: it may have been one of ours.
    if record is None or (dbapi_connection is not None and not _is_sqlite(dbapi_connection)):
        return
    gate = _gate
    with gate.changed:
        if gate.in_use.pop(record, None) is not None:
            gate.changed.notify_all()


def _before_fork() -> None:
    me = threading.get_ident()
    gate = _gate
    with gate.changed:
        gate.forking_thread = me
        deadline = time.monotonic() + FORK_WAIT_SECONDS
        while gate.others(me):
            left = deadline - time.monotonic()
            if left <= 0:
                log.error(
                    "forking with %d SQLite connection(s) still in use by other threads "
                    "(%s) after %.0f s: the new process may be unable to write their "
                    "databases (persistence/sqlite_forks.py)",
                    gate.others(me),
                    ", ".join(gate.holders(me)),
                    FORK_WAIT_SECONDS,
                )
                return
            gate.changed.wait(left)


def _after_fork_in_parent() -> None:
    gate = _gate
    with gate.changed:
        gate.forking_thread = None
        gate.changed.notify_all()


def _after_fork_in_child() -> None:
    """Only the forking thread lives on in the child: a new gate keeps just its own
    connections (the old condition's lock may have been held by a thread now gone)."""
    global _gate
    me = threading.get_ident()
    fresh = _Gate()
    for record, thread in list(_gate.in_use.items()):
        if thread == me:
            fresh.in_use[record] = thread
    _gate = fresh


def install() -> None:
    """Guard every fork of this process (idempotent; module docstring)."""
    global _installed
    if _installed:
        return
    _installed = True
    event.listen(Pool, "connect", _take)
    event.listen(Pool, "checkout", _take)
    event.listen(Pool, "checkin", _give_back)
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )

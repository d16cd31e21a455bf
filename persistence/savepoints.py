"""Several triggers in one transaction, each of the Store's transactions a savepoint.

The floor of a trigger is one commit (one WAL flush) per trigger. When a worker holds
several triggers at once (tasks/drain.py), it opens ONE transaction here and applies
them one after the other; while it is open on this thread, every write transaction the
Store would have opened (``Store.transaction``, ``apply``, ``start``, the router's) is
a SAVEPOINT inside it instead. So:

* the one rule is kept as it is: each trigger still takes its instance's row lock
  (``FOR UPDATE``) before it reads the checkpoint, and the lock is held until the one
  commit, so nothing else changes that instance in between;
* a trigger that fails rolls back its own savepoint only (the row locks and writes of
  the triggers before it stay), and its caller sees the same exception, after the same
  rollback, as on its own — so the failure path (an incident, a kept failed trigger, a
  retry) is the single trigger's;
* a commit that fails loses every trigger of the batch together: none is acknowledged,
  so the broker delivers each again (docs/internals.md, "Several triggers per task");
* a savepoint costs no round trip of its own: its SAVEPOINT goes with its first
  statement and its RELEASE with its last (persistence/round_trips.py ``savepoint``).

PostgreSQL only: SQLite has one writer and no gain to share; the drain stays off there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine

__all__ = ["joined", "memo", "one_transaction"]

_open = threading.local()


@contextmanager
def one_transaction(engine: Engine) -> Iterator[Connection]:
    """The batch's transaction on ``engine``: committed when the block ends, rolled back
    if it raises. Not re-entrant: a batch inside a batch is a programming error."""
    if getattr(_open, "conn", None) is not None:
        raise RuntimeError("a batch transaction is already open on this thread")
    with engine.begin() as conn:
        _open.conn, _open.engine, _open.memo = conn, engine, {}
        try:
            yield conn
        finally:
            _open.conn = _open.engine = _open.memo = None


def joined(engine: Engine) -> Connection | None:
    """The batch transaction open on this thread for ``engine``, if any: the Store then
    opens a savepoint on it instead of a transaction of its own."""
    conn: Connection | None = getattr(_open, "conn", None)
    if conn is None or getattr(_open, "engine", None) is not engine:
        return None
    return conn


def memo(conn: Connection) -> dict[object, object] | None:
    """What the batch open on ``conn`` has read once for all its triggers (None outside
    a batch): its triggers commit together, so one answer read at the batch's first
    trigger is as current for its last (persistence/deployments.py: the latest version
    of a process, read once per batch rather than once per start)."""
    if getattr(_open, "conn", None) is not conn:
        return None
    found: dict[object, object] | None = getattr(_open, "memo", None)
    return found

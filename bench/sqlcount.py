"""Statements and write transactions, counted exactly (not timed) on SQLAlchemy engines.

Two ways in:

* ``TxCounter(engine)`` in this process (``engine=None``: every engine of the process):
  a transaction is a *write* transaction when one of its statements inserts, updates,
  deletes or row-locks (``FOR UPDATE``) — the ones PostgreSQL gives a transaction id and
  a WAL flush at commit. Read-only transactions are counted apart.
* ``DORMANT_BENCH_SQL_LOG=FILE`` in a worker's environment, with this module imported
  by the worker (``bench.jobs`` imports it): each commit of every pool process appends
  one line ``W|R <statements>`` to FILE (one ``O_APPEND`` write: lines never
  interleave), and ``read_log(FILE)`` sums them. How the bench and the tests count what
  a real ``dormant worker`` spends per trigger.

Counting only: nothing here changes a statement, and nothing asserts a timing.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

__all__ = ["ENV_LOG", "Counts", "TxCounter", "install_log", "is_write", "read_log"]

ENV_LOG = "DORMANT_BENCH_SQL_LOG"
_WRITE_VERBS = ("INSERT", "UPDATE", "DELETE", "MERGE")
_WRITE_WORD = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE)\b")


def is_write(statement: str) -> bool:
    """Does this statement make its transaction a write transaction?"""
    head = statement.lstrip().upper()
    if head.startswith(_WRITE_VERBS):
        return True
    if head.startswith("WITH") and _WRITE_WORD.search(head):  # a CTE that writes
        return True
    return " FOR UPDATE" in head or " FOR NO KEY UPDATE" in head


@dataclass(slots=True)
class Counts:
    """Sums over many transactions."""

    statements: int = 0
    write_statements: int = 0  # statements inside write transactions
    write_transactions: int = 0
    read_transactions: int = 0

    def __sub__(self, other: Counts) -> Counts:
        return Counts(
            self.statements - other.statements,
            self.write_statements - other.write_statements,
            self.write_transactions - other.write_transactions,
            self.read_transactions - other.read_transactions,
        )

    def per(self, n: int) -> str:
        return (
            f"{self.write_transactions / n:.2f} write transactions "
            f"({self.write_statements / n:.1f} statements), "
            f"{self.read_transactions / n:.2f} read-only"
        )


class TxCounter:
    """Counts on ``engine`` (every Engine of this process when None) from now on."""

    def __init__(self, engine: Engine | None = None) -> None:
        self.counts = Counts()
        self._target: Any = engine if engine is not None else Engine
        event.listen(self._target, "before_cursor_execute", self._statement)
        event.listen(self._target, "commit", self._commit)
        event.listen(self._target, "rollback", self._rollback)

    def close(self) -> None:
        event.remove(self._target, "before_cursor_execute", self._statement)
        event.remove(self._target, "commit", self._commit)
        event.remove(self._target, "rollback", self._rollback)

    def snapshot(self) -> Counts:
        c = self.counts
        return Counts(c.statements, c.write_statements, c.write_transactions, c.read_transactions)

    @staticmethod
    def _state(conn: Any) -> dict[str, Any]:
        return conn.info.setdefault("bench_sqlcount", {"n": 0, "write": False})  # type: ignore[no-any-return]

    def _statement(self, conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        state = self._state(conn)
        state["n"] += 1
        state["write"] = state["write"] or is_write(statement)

        self.counts.statements += 1

    def _commit(self, conn: Any) -> None:
        state = self._state(conn)
        if state["write"]:
            self.counts.write_transactions += 1
            self.counts.write_statements += state["n"]
        elif state["n"]:
            self.counts.read_transactions += 1
        self.on_commit(bool(state["write"]), int(state["n"]))
        state.update(n=0, write=False)

    def _rollback(self, conn: Any) -> None:
        # A read-only block ends by rollback on a connection that never wrote; a
        # failed write transaction is not a commit either.
        state = self._state(conn)
        if state["n"] and not state["write"]:
            self.counts.read_transactions += 1
        state.update(n=0, write=False)

    def on_commit(self, write: bool, statements: int) -> None:
        """Hook for ``install_log``."""


class _FileCounter(TxCounter):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def on_commit(self, write: bool, statements: int) -> None:
        fd = os.open(self.path, os.O_CREAT | os.O_APPEND | os.O_WRONLY)
        try:
            os.write(fd, f"{'W' if write else 'R'} {statements}\n".encode())
        finally:
            os.close(fd)


_installed: TxCounter | None = None


def install_log(path: str | None = None) -> TxCounter | None:
    """Append every commit of this process (and of its forked children) to ``path``
    (default: ``$DORMANT_BENCH_SQL_LOG``; nothing when neither is set)."""
    global _installed
    path = path or os.environ.get(ENV_LOG)
    if not path or _installed is not None:
        return _installed
    _installed = _FileCounter(path)
    return _installed


def read_log(path: str | Path) -> Counts:
    """The sums of a log ``install_log`` wrote (empty if there is none yet)."""
    out = Counts()
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text().split("\n"):
        if not line.strip():
            continue
        kind, n = line.split()
        out.statements += int(n)
        if kind == "W":
            out.write_transactions += 1
            out.write_statements += int(n)
        else:
            out.read_transactions += 1
    return out

"""The writes of one transaction, sent to PostgreSQL as ONE statement.

A trigger's transaction writes the checkpoint, its hold rows, facts, the processed
trigger id, outbox rows, a message's record and the inbox mark: six to ten small
statements, each a round trip to the server while the instance's row lock is held.
``Writes`` collects them and sends them on PostgreSQL as one statement, every write a
data-modifying CTE (``WITH w0 AS (UPDATE ...), w1 AS (INSERT ...) SELECT ...``), so the
row lock is held for one round trip after the lock instead of one per row kind. On
SQLite (one local file, no round trip to save) they run one after the other.

What a CTE cannot do, and so what callers must not queue together: all CTEs see the
same snapshot and none sees another's changes, so a row deleted and re-inserted with
the same key (or updated twice) needs ``flush()`` in between. A statement queued with
``returning`` (exactly one returned column) gets its values back from ``flush()``,
in the order the rows were written (the order of a multi-row VALUES list).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table, func, literal_column, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.sql.dml import UpdateBase

__all__ = ["Writes"]


class Writes:
    """DML statements queued for one transaction on ``conn``."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._pg = conn.dialect.name == "postgresql"
        self._queued: list[tuple[UpdateBase, str | None]] = []
        self.returned: dict[str, list[Any]] = {}

    def insert_ignoring(self, table: Table) -> Any:
        """An INSERT of this dialect that can say ``ON CONFLICT DO NOTHING``."""
        return pg_insert(table) if self._pg else sqlite_insert(table)

    def add(self, statement: UpdateBase, returning: str | None = None) -> None:
        """Queue ``statement``; with ``returning``, its single RETURNING column's values
        are kept under that name."""
        self._queued.append((statement, returning))

    def flush(self) -> dict[str, list[Any]]:
        """Send what is queued (one statement on PostgreSQL); returns every value
        returned so far, by name."""
        queued, self._queued = self._queued, []
        if not queued:
            return self.returned
        if not self._pg or len(queued) == 1:
            for statement, name in queued:
                result = self.conn.execute(statement)
                if name is not None:
                    self.returned.setdefault(name, []).extend(v for (v,) in result)
            return self.returned
        ctes = [statement.cte(f"w{i}") for i, (statement, _) in enumerate(queued)]
        named = [(cte, name) for cte, (_, name) in zip(ctes, queued, strict=True) if name]
        columns: list[Any] = [
            select(func.array_agg(next(iter(cte.c)))).scalar_subquery() for cte, _ in named
        ]
        # A SELECT needs a column; the CTEs run whether it reads them or not.
        row = self.conn.execute(select(*(columns or [literal_column("1")])).add_cte(*ctes)).one()
        for (_, name), values in zip(named, row, strict=False):
            self.returned.setdefault(str(name), []).extend(values or [])
        return self.returned

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
in the order the statements were queued.

Rows are never sent as a multi-row VALUES list on PostgreSQL (``add_rows``):
SQLAlchemy cannot cache the compiled form of a multi-row INSERT, and compiling the
whole CTE statement anew was the largest share of a trigger's time in the worker
(measured: about 1 ms of a 5 ms in-process message trigger). Rows are one JSON array
expanded by ``json_to_recordset`` in their order (facts are read back in id order, so
the order the rows were written in is the history's): the statement has the same shape
from trigger to trigger and is compiled once per shape and process.

Building a statement and its cache key costs too (about 90 µs each, measured), so the
statements of nearly every trigger are prebuilt module-level objects with named
parameters (``add_prebuilt``; recordset INSERTs by table and columns), and a flush of
prebuilt statements only reuses its composite statement as well.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    Connection,
    Table,
    Text,
    bindparam,
    cast,
    column,
    func,
    insert,
    literal,
    literal_column,
    select,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.sql.dml import UpdateBase

from dormant.persistence import round_trips

__all__ = ["Writes"]


class Writes:
    """DML statements queued for one transaction on ``conn``."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._pg = conn.dialect.name == "postgresql"
        # (statement, its RETURNING name, prebuilt: a module-level object with named
        # parameters, so a flush of prebuilt statements only can reuse its composite)
        self._queued: list[tuple[UpdateBase, str | None, bool]] = []
        # The values of the named parameters of prebuilt statements queued (``add``'s
        # ``params``): one namespace per flush, so a name is queued at most once.
        self._params: dict[str, Any] = {}
        self.returned: dict[str, list[Any]] = {}

    def insert_ignoring(self, table: Table) -> Any:
        """An INSERT of this dialect that can say ``ON CONFLICT DO NOTHING``."""
        return pg_insert(table) if self._pg else sqlite_insert(table)

    def add(
        self,
        statement: UpdateBase,
        returning: str | None = None,
        *,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        """Queue ``statement``; with ``returning``, its single RETURNING column's values
        are kept under that name. ``params``: the values of a prebuilt statement's named
        parameters (``bindparam``); their names must be free in this flush
        (``binds``), or the statements would share one value."""
        if params:
            taken = self._params.keys() & params.keys()
            if taken:
                raise ValueError(f"parameters {sorted(taken)} are queued twice in one flush")
            self._params.update(params)
        self._queued.append((statement, returning, params is not None))

    def add_prebuilt(
        self,
        statement: UpdateBase,
        params: Mapping[str, Any],
        fallback: Callable[[], UpdateBase],
        returning: str | None = None,
    ) -> None:
        """Queue a prebuilt PostgreSQL statement with its parameters' values, or, where
        its names are taken in this flush (or on SQLite), ``fallback()`` built afresh."""
        if self._pg and self.binds(*params):
            self.add(statement, returning, params=params)
        else:
            self.add(fallback(), returning)

    def binds(self, *names: str) -> bool:
        """Are the parameter names free in this flush (a prebuilt statement may be
        queued with them)?"""
        return self._params.keys().isdisjoint(names)

    def add_rows(
        self,
        table: Table,
        rows: Sequence[Mapping[str, Any]],
        *,
        returning: tuple[Column[Any], str] | None = None,
        ignore_conflicts: bool = False,
    ) -> None:
        """Queue an INSERT of ``rows``, in their order (see the module docstring);
        ``returning`` names the column each row gives back and the name it is kept
        under (on PostgreSQL more than one row gives its values in insertion order)."""
        if not rows:
            return
        if self._pg:
            names = tuple(dict.fromkeys(name for row in rows for name in row))
            bind = f"{table.name}_rows"
            document = json.dumps(
                [{name: _json_field(row.get(name)) for name in names} for row in rows],
                separators=(",", ":"),
            )
            if self.binds(bind):
                shape = (table, names, ignore_conflicts, returning[0].name if returning else None)
                self.add(
                    _recordset_insert(*shape),
                    returning[1] if returning else None,
                    params={bind: document},
                )
                return
            statement: Any = self._insert(table, ignore_conflicts).from_select(
                list(names), _recordset_select(table, names, literal(document, Text))
            )
        else:  # SQLite: a local file, nothing to save by a cached shape
            statement = self._insert(table, ignore_conflicts).values(
                rows[0] if len(rows) == 1 else list(rows)
            )
        if ignore_conflicts:
            statement = statement.on_conflict_do_nothing()
        if returning is None:
            self.add(statement)
        else:
            column, name = returning
            self.add(statement.returning(column), name)

    def _insert(self, table: Table, ignore_conflicts: bool) -> Any:
        return self.insert_ignoring(table) if ignore_conflicts else insert(table)

    def flush(self, *, last: bool = False) -> dict[str, list[Any]]:
        """Send what is queued (one statement on PostgreSQL); returns every value
        returned so far, by name. ``last``: the transaction ends with this statement,
        whose COMMIT may go with it (persistence/round_trips.py ``last``)."""
        queued, self._queued = self._queued, []
        params, self._params = self._params, {}
        if not queued:
            return self.returned
        # Only a prebuilt statement (or a composite of prebuilt ones, itself cached) may
        # ride with the COMMIT: round_trips compiles a statement once per object, and a
        # statement built for this flush alone would be compiled anew every time.
        if not self._pg or len(queued) == 1:
            for statement, name, prebuilt in queued:
                if last and self._pg and prebuilt:
                    result: Any = round_trips.last(self.conn, statement, params or None)
                else:
                    result = self.conn.execute(statement, params or None)
                if name is not None:
                    self.returned.setdefault(name, []).extend(v for (v,) in result)
            return self.returned
        shape = tuple((statement, name) for statement, name, _ in queued)
        cached = all(prebuilt for _, _, prebuilt in queued)
        composite = _composite_of_prebuilt(shape) if cached else _composite(shape)
        if last and cached:
            [row] = round_trips.last(self.conn, composite, params or None)
        else:
            row = self.conn.execute(composite, params or None).one()
        named = [name for _, name in shape if name]
        for name, values in zip(named, row, strict=False):
            self.returned.setdefault(str(name), []).extend(values or [])
        return self.returned


def _composite(shape: tuple[tuple[UpdateBase, str | None], ...]) -> Any:
    """Every queued statement a data-modifying CTE of one SELECT that returns, per
    named one, its RETURNING column as an array."""
    ctes = [statement.cte(f"w{i}") for i, (statement, _) in enumerate(shape)]
    columns: list[Any] = [
        select(func.array_agg(next(iter(cte.c)))).scalar_subquery()
        for cte, (_, name) in zip(ctes, shape, strict=True)
        if name
    ]
    # A SELECT needs a column; the CTEs run whether it reads them or not.
    return select(*(columns or [literal_column("1")])).add_cte(*ctes)


# A flush of prebuilt statements only (the usual message trigger or job result) reuses
# its composite: built once per combination, its cache key computed once. Prebuilt
# statements are module-level objects, so the combinations are few; bounded anyway.
_composite_of_prebuilt = functools.lru_cache(maxsize=512)(_composite)


def _json_field(value: Any) -> Any:
    """A row's value as the JSON that ``json_to_recordset`` reads back as its column's
    type; a datetime must carry its zone, as ``UtcDateTime`` requires of a bind."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} given to the database; pass UTC-aware")
        return value.isoformat()
    return value


def _recordset_select(table: Table, names: tuple[str, ...], document: Any) -> Any:
    """``SELECT ... FROM json_to_recordset(document) AS r(col type, ...)``, typed as the
    table's columns, so its shape depends on the table and the columns only. ``json``,
    not ``jsonb``: a ``json`` column's value is the document's own compact text of it,
    as written (tables.py ``JsonText``); a ``jsonb`` one is parsed from that text."""
    records = (
        func.json_to_recordset(cast(document, JSON))
        .table_valued(*(column(name, table.c[name].type) for name in names))
        .render_derived(with_types=True)
    )
    return select(*(records.c[name] for name in names))


@functools.cache
def _recordset_insert(
    table: Table, names: tuple[str, ...], ignore_conflicts: bool, returning: str | None
) -> Any:
    """The INSERT of rows from one JSON parameter ``<table>_rows``, built once per shape
    and process (the same object at every trigger: no construction, no cache key to
    compute again). The shapes are few: a table and the columns its rows set."""
    insert_: Any = pg_insert(table) if ignore_conflicts else insert(table)
    statement = insert_.from_select(
        list(names),
        _recordset_select(table, names, bindparam(f"{table.name}_rows", type_=Text)),
    )
    if ignore_conflicts:
        statement = statement.on_conflict_do_nothing()
    return statement if returning is None else statement.returning(table.c[returning])

"""A write transaction's BEGIN rides with its first statement, its COMMIT with its last.

On PostgreSQL a trigger's transaction is BEGIN, the locking SELECT, the one write
statement (persistence/writes.py) and COMMIT: four round trips to the server, two of
which carry no work, each a wake-up of the backend and of the worker while the
instance's row lock is held. psycopg's pipeline
mode sends several commands before it reads an answer, so BEGIN and the first
statement are one round trip, and the last statement and COMMIT another (measured,
bench/README.md: an in-process message trigger 2.27 → 1.64 ms of wall time and 1.30 →
0.96 ms of Python, PostgreSQL's CPU per trigger 0.84 → 0.54 ms, the row lock held
1.95 → 0.95 ms at the median).

How, and why so:

- The Store opens its write transactions with the driver in autocommit
  (``open_late``): psycopg sends no BEGIN of its own — in a pipeline it would sync its
  implicit BEGIN alone, a round trip again. The transaction's first statement sends
  BEGIN ahead of it: through ``first`` in one round trip, through SQLAlchemy (any other
  statement) by the engine's ``before_cursor_execute`` hook, which sends BEGIN first on
  its own. SQLAlchemy's commit and rollback at the end of the block reach psycopg,
  which sends COMMIT or ROLLBACK whenever a server transaction is open, in autocommit
  or not; the pool resets the connection's autocommit when it is checked in.
- ``first`` and ``last`` run a prebuilt statement on the psycopg connection itself,
  compiled once per process and statement (``_driven``), its bind and result values
  processed as SQLAlchemy's types say. An error is wrapped, and a lost connection
  invalidated, by the SQLAlchemy connection's own handling, so callers see the same
  ``OperationalError`` / ``IntegrityError`` as from ``Connection.execute``. The
  engine's cursor events fire for these statements too (statement counters, tests),
  with no execution context (``None``): there is none.
- ``last`` ends the transaction: a statement after it would run outside it, so the
  hook refuses one (a programming error, caught by the tests, never a silent commit).
- On a connection for reads (``reading``, which persistence/db.py ``read_only`` sets on
  PostgreSQL) ``first`` runs its statement on the driver too, in autocommit and with no
  BEGIN: a start whose first job runs before it is written reads its definition so.

SQLite, a statement that SQLAlchemy must rewrite at each execution (an expanding IN),
and a transaction the Store did not open late run as before, through
``Connection.execute``.
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.sql import ClauseElement

__all__ = ["first", "install", "last", "open_late", "reading", "savepoint"]

# Connection.info keys (the info of the pooled DBAPI connection: cleared at the end of
# every block that sets them).
_LATE = "dormant.opened_late"
_BEGIN_PENDING = "dormant.begin_pending"
_ENDED = "dormant.transaction_ended"
_READING = "dormant.reading"
_IN_SAVEPOINT = "dormant.in_savepoint"
_SAVEPOINT_PENDING = "dormant.savepoint_pending"

# A batch's savepoints follow one another and never nest (a nested one is SQLAlchemy's
# own, named apart), so one name serves them all.
_SAVEPOINT = b"SAVEPOINT dormant_trigger"
_RELEASE = b"RELEASE SAVEPOINT dormant_trigger"
_ROLLBACK_TO = "ROLLBACK TO SAVEPOINT dormant_trigger"


class StatementAfterCommit(RuntimeError):
    """A statement was sent after ``last`` committed the transaction."""


@contextmanager
def open_late(conn: Connection) -> Iterator[Connection]:
    """A write transaction on ``conn`` (just checked out, PostgreSQL) whose BEGIN goes
    with its first statement. Committed when the block ends, rolled back if it raises."""
    conn.execution_options(isolation_level="AUTOCOMMIT")
    info = conn.info
    info[_LATE] = info[_BEGIN_PENDING] = True
    try:
        with conn.begin():
            yield conn
    finally:
        for key in (_LATE, _BEGIN_PENDING, _ENDED):
            info.pop(key, None)


@contextmanager
def savepoint(conn: Connection) -> Iterator[Connection]:
    """A savepoint of the transaction open on ``conn`` (PostgreSQL) whose SAVEPOINT goes
    with its first statement and whose RELEASE goes with its ``last`` one: a trigger of
    a batch (persistence/savepoints.py) costs the round trips of its own statements,
    not two more. If the block raises, what it sent is rolled back to the savepoint;
    if it sent nothing, there is nothing to roll back. Inside another such savepoint
    it is SQLAlchemy's own nested one."""
    info = conn.info
    if info.get(_IN_SAVEPOINT):
        # SQLAlchemy's own, named apart: its statements are plain ones meanwhile (a
        # RELEASE riding with one would release the outer savepoint, and this with it).
        del info[_IN_SAVEPOINT]
        try:
            with conn.begin_nested():
                yield conn
        finally:
            info[_IN_SAVEPOINT] = True
        return
    info[_IN_SAVEPOINT] = info[_SAVEPOINT_PENDING] = True
    try:
        yield conn
    except BaseException:
        sent, released = not info.pop(_SAVEPOINT_PENDING, False), info.pop(_ENDED, False)
        info.pop(_IN_SAVEPOINT, None)
        if sent and not released and not conn.invalidated:
            try:
                conn.exec_driver_sql(_ROLLBACK_TO)
                conn.exec_driver_sql(_RELEASE.decode())
            except Exception:  # the block's own error is the news; the batch's commit
                pass  # then fails too, and each of its triggers goes back to the broker
        raise
    else:
        sent, released = not info.pop(_SAVEPOINT_PENDING, False), info.pop(_ENDED, False)
        info.pop(_IN_SAVEPOINT, None)
        if sent and not released:
            conn.exec_driver_sql(_RELEASE.decode())
    finally:
        for key in (_IN_SAVEPOINT, _SAVEPOINT_PENDING, _ENDED):
            info.pop(key, None)


@contextmanager
def reading(conn: Connection) -> Iterator[Connection]:
    """``conn`` (PostgreSQL, in autocommit: persistence/db.py ``read_only``) for reads:
    ``first`` runs its statement on the driver there too, without SQLAlchemy's
    per-execution work (a start's definition lookup outside any transaction)."""
    info = conn.info
    info[_READING] = True
    try:
        yield conn
    finally:
        info.pop(_READING, None)


def install(engine: Engine) -> None:
    """The hook that sends BEGIN before a late-opened transaction's first statement run
    through SQLAlchemy, and refuses a statement after ``last``."""

    @event.listens_for(engine, "before_cursor_execute")
    def _begin_first(
        conn: Connection, cursor: Any, _statement: str, _params: Any, _context: Any, _many: bool
    ) -> None:
        info = conn.info
        if info.get(_ENDED):
            raise StatementAfterCommit("a statement after the transaction's COMMIT")
        if info.pop(_BEGIN_PENDING, False):
            cursor.execute("BEGIN")
        if info.pop(_SAVEPOINT_PENDING, False):
            cursor.execute(_SAVEPOINT.decode())


@dataclass(frozen=True, slots=True)
class _Driven:
    """A statement as psycopg runs it: its SQL, how each parameter and each result
    column is processed (SQLAlchemy's types), and its columns' names."""

    sql: str
    defaults: Mapping[str, Any]
    binds: tuple[tuple[str, Callable[[Any], Any]], ...]
    results: tuple[tuple[int, Callable[[Any], Any]], ...]
    names: tuple[str, ...]

    def parameters(self, given: Mapping[str, Any] | None) -> dict[str, Any]:
        values = {**self.defaults, **given} if given else dict(self.defaults)
        for name, process in self.binds:
            values[name] = process(values[name])
        return values

    def rows(self, fetched: Sequence[tuple[Any, ...]], described: Sequence[str]) -> list[Any]:
        """The rows, their values processed, their fields named as SQLAlchemy's rows
        are (a textual statement's: as the server describes them)."""
        row_type = _row_type(self.names or tuple(described))
        if not self.results:
            return [row_type(*r) for r in fetched]
        out = []
        for r in fetched:
            values = list(r)
            for i, process in self.results:
                values[i] = process(values[i])
            out.append(row_type(*values))
        return out


@functools.cache
def _row_type(names: tuple[str, ...]) -> Any:
    return namedtuple("Row", names, rename=True)


@functools.lru_cache(maxsize=1024)
def _driven(statement: ClauseElement, dialect: Any) -> _Driven | None:
    """``statement`` compiled for psycopg once per process, or None where SQLAlchemy
    must rewrite it at each execution (expanding or literal-rendered parameters)."""
    compiled: Any = statement.compile(dialect=dialect)
    if (
        compiled.positional
        or compiled.post_compile_params
        or compiled.literal_execute_params
        or compiled.escaped_bind_names
    ):
        return None
    binds = tuple(
        (name, process)
        for bind, name in compiled.bind_names.items()
        if (process := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
    )
    columns = list(getattr(statement, "selected_columns", ()))
    results = tuple(
        (i, process)
        for i, col in enumerate(columns)
        if (process := col.type.dialect_impl(dialect).result_processor(dialect, None)) is not None
    )
    names = tuple(str(c.key) if c.key is not None else f"c{i}" for i, c in enumerate(columns))
    defaults = {
        name: bind.effective_value
        for bind, name in compiled.bind_names.items()
        if not bind.required
    }
    return _Driven(compiled.string, defaults, binds, results, names)


def first(conn: Connection, statement: Any, params: Mapping[str, Any] | None) -> list[Any]:
    """Run ``statement``, with its transaction's BEGIN in the same round trip when it is
    the first of a transaction opened late, on the driver alone on a connection for
    reads (``reading``); else through ``Connection.execute``."""
    info = conn.info
    begin = info.get(_BEGIN_PENDING, False)
    opening = info.get(_SAVEPOINT_PENDING, False)
    driven = _driven(statement, conn.dialect) if begin or opening or info.get(_READING) else None
    if driven is None:
        return _executed(conn, statement, params)
    info.pop(_BEGIN_PENDING, None)
    info.pop(_SAVEPOINT_PENDING, None)
    return _run(conn, driven, params, (_opening(begin, opening), None))


def last(conn: Connection, statement: Any, params: Mapping[str, Any] | None) -> list[Any]:
    """Run ``statement`` as its transaction's last: in a transaction opened late, with
    its COMMIT (and its BEGIN, if it is the first too) in the same round trip, after
    which no statement may follow; else through ``Connection.execute``, the block's
    end committing as ever. ``statement`` (like ``first``'s) lives as long as the
    process — a module-level statement, or a cached composite of them: it is compiled
    once per object."""
    info = conn.info
    inside = info.get(_IN_SAVEPOINT, False)
    driven = _driven(statement, conn.dialect) if inside or info.get(_LATE) else None
    if driven is None:
        return _executed(conn, statement, params)
    before = _opening(info.pop(_BEGIN_PENDING, False), info.pop(_SAVEPOINT_PENDING, False))
    rows = _run(conn, driven, params, (before, _RELEASE if inside else b"COMMIT"))
    info[_ENDED] = True
    return rows


def _opening(begin: bool, savepoint: bool) -> tuple[bytes, ...]:
    """What goes before a statement: the transaction's BEGIN and the savepoint's
    SAVEPOINT, each if still to be sent."""
    return (b"BEGIN",) * begin + (_SAVEPOINT,) * savepoint


def _executed(conn: Connection, statement: Any, params: Mapping[str, Any] | None) -> list[Any]:
    """Through SQLAlchemy: the rows, or none for a statement that returns none (a
    write with no RETURNING, as a driven statement's ``fetched`` is then empty)."""
    result = conn.execute(statement, params)
    return list(result) if result.returns_rows else []


def _run(
    conn: Connection,
    driven: _Driven,
    params: Mapping[str, Any] | None,
    around: tuple[tuple[bytes, ...], bytes | None],
) -> list[Any]:
    """``driven`` between the commands ``around`` it, in one pipeline: one round trip."""
    raw: Any = conn.connection.driver_connection
    values = driven.parameters(params)
    before, after = around
    cursor = raw.cursor()
    conn.dispatch.before_cursor_execute(conn, cursor, driven.sql, values, None, False)
    try:
        if not before and after is None:
            cursor.execute(driven.sql, values)
        else:
            _pipelined(raw, cursor, driven.sql, values, before, after, conn.dialect.loaded_dbapi)
        description = cursor.description
        fetched = cursor.fetchall() if description is not None else []
    except BaseException as exc:
        if raw.pgconn.pipeline_status:
            # Interrupted while the pipeline was busy (a soft time limit during the
            # COMMIT's round trip): psycopg could not leave pipeline mode, so no
            # ROLLBACK can be sent on it either; the connection is dropped, not reset.
            conn.invalidate(exc if isinstance(exc, Exception) else None)
        if isinstance(exc, conn.dialect.loaded_dbapi.Error):
            # SQLAlchemy's own handling: the exception classes ``execute`` raises, a
            # lost connection invalidated, the engine's ``handle_error`` hooks run.
            conn._handle_dbapi_exception(exc, driven.sql, values, cursor, None)
        # Anything else (a time limit's exception, an interrupt) may have left the
        # pipeline half read: the connection never goes back to the pool.
        conn.invalidate(exc if isinstance(exc, Exception) else None)
        raise
    finally:
        cursor.close()
    conn.dispatch.after_cursor_execute(conn, cursor, driven.sql, values, None, False)
    return driven.rows(fetched, [c.name for c in description or ()])


def _pipelined(
    raw: Any,
    cursor: Any,
    sql: str,
    values: Mapping[str, Any],
    before: tuple[bytes, ...],
    after: bytes | None,
    dbapi: Any,
) -> None:
    """``before``, the statement and ``after`` in one pipeline, whose failure is the
    statement's own error, raised once the pipeline has ended cleanly.

    The server may answer the statement with an error while ``after`` (the COMMIT) is
    still being sent; psycopg then raises it inside the pipeline block, and the block's
    end reads the COMMIT's answer, "pipeline aborted" — expected after any error, yet
    psycopg logs it as a WARNING ("error ignored terminating <psycopg.Pipeline
    [INERROR]>") whenever the block ended by an exception. Whether it does depends on
    how fast the server answered, so every redelivered start (its INSERT meets the
    instance's row) logged it now and then. Kept until the pipeline is closed, the
    error leaves the block as its own, and only the aborted answer is dropped."""
    failed: BaseException | None = None
    try:
        with raw.pipeline():
            try:
                for command in before:
                    raw.execute(command)
                cursor.execute(sql, values)
                if after is not None:
                    raw.execute(after)
            except dbapi.Error as exc:
                failed = exc
    except dbapi.Error as exc:
        behind = exc.__context__
        if behind is not None and not isinstance(behind, dbapi.Error):
            # Not the database's: an interrupt (the soft time limit) landed while the
            # pipeline was busy, and psycopg, unable to leave pipeline mode, raised
            # "cannot exit pipeline mode while busy" in its place. The interrupt is the
            # news, and the trigger ends as any soft limit ends it (docs/limits.md).
            raise behind from None
        if failed is None:
            raise
        # The answers behind the first error ("pipeline aborted"): the first is the news.
    if failed is not None:
        raise failed

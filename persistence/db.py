"""Engines: one per Store, tuned per backend.

PostgreSQL: every connection starts with ``statement_timeout`` and
``idle_in_transaction_session_timeout`` (libpq ``options``, so they hold from the first
statement and survive a pool reconnect). A trigger's transaction holds an instance's
row lock; without the first a lock wait or a runaway statement holds a worker slot
for ever, without the second a process that stalls inside the transaction (a stuck
pool child, a debugger) holds the lock for ever and every later trigger of that
instance queues behind it. Past either, PostgreSQL cancels (or ends the session), the
driver raises ``OperationalError`` (the idle-in-transaction end arrives as an
``InternalError``, SQLSTATE 25P03; it is mapped to ``OperationalError`` here, a lost
session like any other), and the trigger tasks retry with backoff.
Migrations open their own engine without these bounds (DDL on a large table may
rightly take longer).

SQLite: pysqlite's own transaction handling is switched off and every write
transaction starts with ``BEGIN IMMEDIATE``, which takes the database write lock up
front. That is SQLite's stand-in for ``SELECT … FOR UPDATE``: two triggers for one
instance serialise instead of both reading revision N and one failing at commit with
"database is locked" (or worse, one deferred reader upgrading too late). Reads that
need no lock ask for ``DEFERRED`` with the ``sqlite_deferred`` execution option. WAL
lets those readers run beside the one writer; ``busy_timeout`` makes writers queue,
for at most the statement timeout (the Store passes ``DORMANT_DB_STATEMENT_TIMEOUT_SECONDS``):
a writer waiting on SQLite's lock waits inside C code, where no signal reaches it (not
a time limit, not a shutdown), so this is the bound on how long a trigger can be stuck
there; past it, "database is locked" is an ``OperationalError`` and the trigger retries.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DisconnectionError, OperationalError

from dormant.persistence import round_trips, savepoints

__all__ = ["READ", "Transactions", "make_engine", "read_only"]


class Transactions(Protocol):
    """What the Store's parts (persistence/queries.py, deployments.py, outbox_queue.py,
    failed_triggers.py) need of the Store: its two ways to open a connection. The Store
    owns the one transaction and passes itself; a part never opens one on its own."""

    @property
    def is_postgres(self) -> bool: ...

    def transaction(self) -> AbstractContextManager[Connection]: ...

    def read(self) -> AbstractContextManager[Connection]: ...


# Execution options for a read-only transaction (no write lock on SQLite).
READ: dict[str, Any] = {"sqlite_deferred": True}


@contextmanager
def read_only(engine: Engine) -> Iterator[Connection]:
    """A connection for reads: on PostgreSQL in autocommit, on SQLite a DEFERRED
    read transaction (no write lock).

    Under READ COMMITTED every statement takes its own snapshot whether or not a
    transaction is open around it, so BEGIN and ROLLBACK buy a read nothing but two
    round trips (two of a routed message's ten, measured in bench_triggers).

    Inside a batch (persistence/savepoints.py) a read is a savepoint of the batch's
    transaction: a trigger sees what the triggers before it in the batch wrote, as it
    would had each committed on its own (on a connection of its own, the second of two
    keyed message starts missed the first's instance and its message went nowhere), and
    a read that fails rolls back only its savepoint, not the batch."""
    batch = savepoints.joined(engine)
    if batch is not None:
        with round_trips.savepoint(batch):
            yield batch
        return
    if engine.dialect.name == "postgresql":
        with (
            engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn,
            round_trips.reading(conn),
        ):
            yield conn
        return
    with engine.connect().execution_options(**READ) as conn, conn.begin():
        yield conn


_BUSY_TIMEOUT_MS = 60_000


def compact_json(value: Any) -> str:
    """JSON text with no space after a separator."""
    return json.dumps(value, separators=(",", ":"))


def make_engine(
    url: str,
    *,
    statement_timeout_seconds: float | None = None,
    idle_in_transaction_timeout_seconds: float | None = None,
    **kwargs: Any,
) -> Engine:
    # The JSON the driver sends is compact: a ``json`` column stores it as sent
    # (tables.py ``JsonText``).
    kwargs.setdefault("json_serializer", compact_json)
    if url.startswith("sqlite"):
        busy_ms = int(statement_timeout_seconds * 1000) if statement_timeout_seconds else None
        return _sqlite_engine(url, busy_timeout_ms=busy_ms or _BUSY_TIMEOUT_MS, **kwargs)
    if url.startswith("postgresql"):
        options = [
            f"-c {name}={int(seconds * 1000)}"
            for name, seconds in (
                ("statement_timeout", statement_timeout_seconds),
                ("idle_in_transaction_session_timeout", idle_in_transaction_timeout_seconds),
            )
            if seconds is not None
        ]
        if options:
            connect_args = dict(kwargs.pop("connect_args", {}))
            connect_args["options"] = " ".join([connect_args.get("options", ""), *options]).strip()
            kwargs["connect_args"] = connect_args
        engine = create_engine(url, **kwargs)
        round_trips.install(engine)
        _ping_when_idle(engine)
        event.listen(engine, "handle_error", _session_ended_is_operational)
        return engine
    return create_engine(url, pool_pre_ping=True, **kwargs)


# A pooled connection idle longer than this is pinged before it is handed out.
PING_WHEN_IDLE_SECONDS = 0.5


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection only when it sat idle, not at every checkout.

    ``pool_pre_ping`` pings at every checkout: a round trip to the server for each
    transaction, two of a message trigger's ten (measured in bench_triggers). A
    connection checked in less than ``PING_WHEN_IDLE_SECONDS`` ago was working then;
    one that idled longer (through a database restart, a server-side kill) is pinged,
    and a failed ping is a ``DisconnectionError``, on which the pool connects afresh.
    What the window leaves: a server restarted AND back within it fails the next
    statement on such a connection with ``OperationalError`` — the same as a connection
    lost mid-transaction, which the trigger tasks already retry — and that first
    disconnect invalidates every connection of the pool that predates it.
    """

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("idle_since", None)
        if since is None or time.monotonic() - since < PING_WHEN_IDLE_SECONDS:
            return  # just connected, or working a moment ago
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise DisconnectionError("a pooled connection failed its ping") from exc
        if not alive:
            raise DisconnectionError("a pooled connection failed its ping")


# SQLSTATE of "terminating connection due to idle-in-transaction timeout".
_IDLE_IN_TRANSACTION_TIMEOUT = "25P03"


def _session_ended_is_operational(ctx: ExceptionContext) -> OperationalError | None:
    """The server ended the session: a disconnect (the pool drops it), and transient."""
    orig = ctx.original_exception
    if getattr(orig, "sqlstate", None) != _IDLE_IN_TRANSACTION_TIMEOUT:
        return None
    ctx.is_disconnect = True
    return OperationalError(ctx.statement, ctx.parameters, orig)


# How long a connection keeps asking for WAL while another process holds the file.
_WAL_RETRY_SECONDS = 60.0


def _switch_to_wal(cursor: Any, give_up_after: float = _WAL_RETRY_SECONDS) -> None:
    """``PRAGMA journal_mode=WAL``, asked again while the file is locked. Switching the
    journal mode needs the file to itself, and SQLite answers ``database is locked`` at
    once in cases where the busy timeout is not consulted (two processes opening a fresh
    file together: ``dormant dev`` and ``dormant console`` started at the same moment),
    so the busy timeout alone does not cover it."""
    deadline = time.monotonic() + give_up_after
    pause = 0.01
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if ("locked" not in text and "busy" not in text) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


def _sqlite_engine(url: str, *, busy_timeout_ms: int = _BUSY_TIMEOUT_MS, **kwargs: Any) -> Engine:
    engine = create_engine(
        url, pool_pre_ping=True, connect_args={"timeout": busy_timeout_ms / 1000}, **kwargs
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let us issue BEGIN ourselves (pysqlite would otherwise BEGIN DEFERRED lazily).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            if ":memory:" not in url and url.rstrip("/") not in ("sqlite:", "sqlite:/"):
                _switch_to_wal(cursor)
            cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        deferred = conn.get_execution_options().get("sqlite_deferred", False)
        conn.exec_driver_sql("BEGIN" if deferred else "BEGIN IMMEDIATE")

    return engine

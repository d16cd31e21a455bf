"""Engines: one per Store, tuned per backend.

SQLite: pysqlite's own transaction handling is switched off and every write
transaction starts with ``BEGIN IMMEDIATE``, which takes the database write lock up
front. That is SQLite's stand-in for ``SELECT … FOR UPDATE``: two triggers for one
instance serialise instead of both reading revision N and one failing at commit with
"database is locked" (or worse, one deferred reader upgrading too late). Reads that
need no lock ask for ``DEFERRED`` with the ``sqlite_deferred`` execution option. WAL
lets those readers run beside the one writer; ``busy_timeout`` makes writers queue.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event

__all__ = ["READ", "make_engine"]

# Execution options for a read-only transaction (no write lock on SQLite).
READ: dict[str, Any] = {"sqlite_deferred": True}

_BUSY_TIMEOUT_MS = 60_000


def make_engine(url: str, **kwargs: Any) -> Engine:
    if url.startswith("sqlite"):
        return _sqlite_engine(url, **kwargs)
    return create_engine(url, pool_pre_ping=True, **kwargs)


def _sqlite_engine(url: str, **kwargs: Any) -> Engine:
    engine = create_engine(
        url, pool_pre_ping=True, connect_args={"timeout": _BUSY_TIMEOUT_MS / 1000}, **kwargs
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let us issue BEGIN ourselves (pysqlite would otherwise BEGIN DEFERRED lazily).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            if ":memory:" not in url and url.rstrip("/") not in ("sqlite:", "sqlite:/"):
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        deferred = conn.get_execution_options().get("sqlite_deferred", False)
        conn.exec_driver_sql("BEGIN" if deferred else "BEGIN IMMEDIATE")

    return engine

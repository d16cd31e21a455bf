"""The embedded database's switch to WAL waits for a file another process holds: a
``dormant console`` started at the same moment as ``dormant dev`` must not die on
``database is locked`` (persistence/db.py, ``_switch_to_wal``)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from sqlalchemy import Engine, text

from dormant.persistence.db import _sqlite_engine


def test_the_wal_switch_is_asked_again_while_the_file_is_locked(tmp_path: Path) -> None:
    path = tmp_path / "embedded.db"
    locked = threading.Event()
    release = threading.Event()

    def other_process() -> None:
        # A fresh file in the default rollback journal, held exclusively by its writer.
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("CREATE TABLE t (x)")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("INSERT INTO t VALUES (1)")
        locked.set()
        release.wait(30)
        conn.execute("COMMIT")
        conn.close()

    holder = threading.Thread(target=other_process)
    holder.start()
    assert locked.wait(30)
    # A busy timeout far shorter than the hold: only asking again gets through.
    engine = _sqlite_engine(f"sqlite:///{path}", busy_timeout_ms=20)
    try:
        results: list[object] = []
        connecting = threading.Thread(target=_connect_and_check, args=(engine, results))
        connecting.start()
        # The connection is still asking (it cannot have its answer while the lock is
        # held); let the other writer commit now.
        connecting.join(1.0)
        release.set()
        connecting.join(60)
        holder.join(30)
        assert results == ["wal"], results
    finally:
        engine.dispose()


def _connect_and_check(engine: Engine, results: list[object]) -> None:
    try:
        with engine.connect() as conn:
            results.append(conn.execute(text("PRAGMA journal_mode")).scalar())
    except Exception as exc:
        results.append(exc)

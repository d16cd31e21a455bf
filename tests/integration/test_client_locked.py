"""A producer on the embedded default while the workers hold the database (issue 24,
row 1): ``Client.start`` waits out SQLite's write lock a bounded time, then raises
``DatabaseUnavailable`` naming the cause, never sqlite3's own ``OperationalError``; and
nothing half-written is left behind (tasks/transient.py ``retry_database``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import func, select

from dormant.engine_core.errors import DatabaseUnavailable
from dormant.persistence.tables import inbox
from tests.integration.test_incident_projection import MODEL


def test_a_start_behind_a_held_write_lock_is_a_classified_error(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dormant.tasks.client import Client

    monkeypatch.setenv("DORMANT_DB_STATEMENT_TIMEOUT_SECONDS", "0.2")
    client = Client(sqlite_url, f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}")
    client.deploy(MODEL)
    client.start("charge")  # the key is known: the next start only writes its inbox row

    # A worker's write transaction, held longer than the Client's patience.
    holder = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(DatabaseUnavailable) as refused:
            client.start("charge")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    message = str(refused.value)
    assert "\n" not in message
    assert "dormant.start not sent" in message and "database is locked" in message, message
    assert "tries" in message and "nothing was written" in message, message
    assert isinstance(refused.value.__cause__, Exception)

    # Free again: the start goes through, and the refused one left no row.
    client.start("charge")
    with client._store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(inbox)).scalar_one() == 2

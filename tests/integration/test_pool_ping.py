"""PostgreSQL connections: pinged only after they idled, reads without BEGIN/ROLLBACK.

Both save round trips at every trigger (persistence/db.py says how many); both must keep
what they replace: a connection whose server session ended while it sat in the pool is
replaced before anybody uses it, and a write transaction is still a transaction.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, text

from dormant.persistence import db

pytestmark = pytest.mark.integration


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    e = db.make_engine(pg_url)
    try:
        yield e
    finally:
        e.dispose()


def _pings(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    pinged: list[Any] = []
    real = engine.dialect.do_ping

    def counting(dbapi_connection: Any) -> bool:
        pinged.append(dbapi_connection)
        return real(dbapi_connection)

    monkeypatch.setattr(engine.dialect, "do_ping", counting)
    return pinged


def _backend_pid(engine: Engine) -> int:
    with db.read_only(engine) as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_connection_in_use_is_not_pinged_an_idle_one_is(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinged = _pings(engine, monkeypatch)
    first = _backend_pid(engine)
    for _ in range(5):
        assert _backend_pid(engine) == first  # the same pooled connection, back at once
    assert pinged == []
    time.sleep(db.PING_WHEN_IDLE_SECONDS + 0.2)
    assert _backend_pid(engine) == first
    assert len(pinged) == 1


def test_an_idle_connection_whose_session_ended_is_replaced_before_use(
    engine: Engine, pg_url: str
) -> None:
    victim = _backend_pid(engine)
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as c:
        assert c.execute("SELECT pg_terminate_backend(%s)", (victim,)).fetchone() == (True,)
    time.sleep(db.PING_WHEN_IDLE_SECONDS + 0.2)
    replaced = _backend_pid(engine)  # no error: the failed ping made the pool reconnect
    assert replaced != victim


def test_reads_run_in_autocommit_and_writes_in_a_transaction(engine: Engine) -> None:
    with db.read_only(engine) as conn:
        assert conn.connection.dbapi_connection is not None
        assert conn.connection.dbapi_connection.autocommit is True
        assert conn.execute(text("SELECT now() = statement_timestamp()")).scalar_one()
    with engine.begin() as conn:
        assert conn.connection.dbapi_connection is not None
        assert conn.connection.dbapi_connection.autocommit is False
        conn.execute(text("SELECT 1"))
        # Inside a transaction now() is the transaction's start, not the statement's.
        time.sleep(0.01)
        assert conn.execute(text("SELECT now() < statement_timestamp()")).scalar_one()

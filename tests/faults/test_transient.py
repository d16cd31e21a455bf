"""The transient/deterministic classifier (tasks/transient.py, issue 24 row 3) judged on
real faults raised by the machine's PostgreSQL and by the embedded SQLite default: a
retry heals the first kind, a person must look at the second."""

from __future__ import annotations

import logging
import random
import signal
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dormant.engine_core.errors import InvalidSetting
from dormant.persistence.settings import Settings
from dormant.tasks.transient import backoff, is_transient, may_retry

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@pytest.fixture
def pg() -> Iterator[tuple[Engine, str]]:
    engine = sa.create_engine(PG)
    table = f"transient_{uuid.uuid4().hex[:12]}"
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {table} (id int primary key)"))
        conn.execute(sa.text(f"INSERT INTO {table} VALUES (1)"))
    try:
        yield engine, table
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
        engine.dispose()


def test_a_lock_timeout_is_transient(pg: tuple[Engine, str]) -> None:
    engine, table = pg
    with engine.connect() as holder, engine.connect() as waiter:
        holder.execute(sa.text(f"SELECT id FROM {table} WHERE id = 1 FOR UPDATE"))
        waiter.execute(sa.text("SET lock_timeout = '50ms'"))
        with pytest.raises(sa.exc.DBAPIError) as caught:
            waiter.execute(sa.text(f"SELECT id FROM {table} WHERE id = 1 FOR UPDATE"))
        holder.rollback()
    assert is_transient(caught.value)


def test_a_statement_timeout_is_transient(pg: tuple[Engine, str]) -> None:
    """docs/limits.md: a statement (or a row-lock wait) past
    DORMANT_DB_STATEMENT_TIMEOUT_SECONDS is cancelled and the trigger retries."""
    engine, _ = pg
    with engine.connect() as conn:
        conn.execute(sa.text("SET statement_timeout = '20ms'"))
        with pytest.raises(sa.exc.DBAPIError) as caught:
            conn.execute(sa.text("SELECT pg_sleep(1)"))
    assert is_transient(caught.value)


def test_a_terminated_connection_is_transient(pg: tuple[Engine, str]) -> None:
    engine, table = pg
    with engine.connect() as victim, engine.connect() as admin:
        pid = victim.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        admin.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(sa.exc.DBAPIError) as caught:
            victim.execute(sa.text(f"SELECT id FROM {table}"))
    assert is_transient(caught.value)


def test_a_connection_lost_mid_transaction_and_used_again_is_transient(
    pg: tuple[Engine, str],
) -> None:
    """The next statement on a connection lost inside its transaction is refused with
    SQLAlchemy's ``PendingRollbackError``, not the driver's error: still the lost
    connection, and transient (a batch's triggers after the loss met it)."""
    engine, table = pg
    with engine.connect() as victim, engine.connect() as admin:
        victim.begin()
        pid = victim.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        admin.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(sa.exc.DBAPIError):
            victim.execute(sa.text(f"SELECT id FROM {table}"))
        with pytest.raises(sa.exc.PendingRollbackError) as caught:
            victim.execute(sa.text(f"SELECT id FROM {table}"))
    assert is_transient(caught.value)


def test_a_deadlock_is_transient(pg: tuple[Engine, str]) -> None:
    engine, table = pg
    with engine.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO {table} VALUES (2)"))
    with engine.connect() as first, engine.connect() as second:
        first.execute(sa.text(f"SELECT 1 FROM {table} WHERE id = 1 FOR UPDATE"))
        second.execute(sa.text(f"SELECT 1 FROM {table} WHERE id = 2 FOR UPDATE"))
        second.execute(sa.text("SET deadlock_timeout = '10ms'"))
        # Each session holds one row and waits for the other's: the server's deadlock
        # detector ends one of the two waits (the statement timeout only bounds the test).
        first.execute(sa.text("SET statement_timeout = '5s'"))
        errors: list[BaseException] = []

        def wait_first() -> None:
            try:
                first.execute(sa.text(f"SELECT 1 FROM {table} WHERE id = 2 FOR UPDATE"))
            except BaseException as exc:  # the other side may be the victim
                errors.append(exc)

        thread = threading.Thread(target=wait_first)
        thread.start()
        try:
            second.execute(sa.text(f"SELECT 1 FROM {table} WHERE id = 1 FOR UPDATE"))
        except sa.exc.DBAPIError as exc:
            errors.append(exc)
        second.rollback()
        thread.join()
        first.rollback()
    assert errors, "the server chose no deadlock victim"
    assert all(is_transient(e) for e in errors)


def test_deterministic_database_errors_are_not_transient(pg: tuple[Engine, str]) -> None:
    engine, table = pg
    with engine.connect() as conn:
        with pytest.raises(sa.exc.DBAPIError) as duplicate:
            conn.execute(sa.text(f"INSERT INTO {table} VALUES (1)"))
        conn.rollback()
        with pytest.raises(sa.exc.DBAPIError) as missing:
            conn.execute(sa.text("SELECT * FROM no_such_table_here"))
    assert not is_transient(duplicate.value)
    assert not is_transient(missing.value)


def test_sqlite_database_is_locked_is_transient(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (id int)")
    holder.execute("BEGIN EXCLUSIVE")
    engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.05})
    try:
        with engine.connect() as conn, pytest.raises(sa.exc.OperationalError) as caught:
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        engine.dispose()
    assert "locked" in str(caught.value)
    assert is_transient(caught.value)


def test_model_and_bug_failures_are_not_transient() -> None:
    for exc in (ValueError("bad"), KeyError("x"), MemoryError(), ZeroDivisionError()):
        assert not is_transient(exc)
    assert is_transient(ConnectionResetError())


def test_backoff_grows_is_bounded_and_jittered() -> None:
    rng = random.Random(7)
    defaults = Settings()
    first = [backoff(0, defaults, rng=rng) for _ in range(50)]
    late = [backoff(20, defaults, rng=rng) for _ in range(50)]
    assert max(first) <= 0.5 < min(late)
    assert max(late) <= 15.0
    assert len(set(late)) > 1


def test_retries_and_backoff_are_settings() -> None:
    tuned = Settings.from_env(
        {
            "DORMANT_TRANSIENT_RETRIES": "2",
            "DORMANT_TRANSIENT_BACKOFF_SECONDS": "2",
            "DORMANT_TRANSIENT_BACKOFF_MAX_SECONDS": "3",
        }
    )
    rng = random.Random(7)
    assert 1.0 <= backoff(0, tuned, rng=rng) <= 2.0
    assert all(1.5 <= backoff(9, tuned, rng=rng) <= 3.0 for _ in range(20))
    lost = ConnectionResetError()
    assert may_retry(lost, 1, tuned) and not may_retry(lost, 2, tuned)
    assert not may_retry(ValueError("bad"), 0, tuned)
    assert not may_retry(lost, 0, Settings.from_env({"DORMANT_TRANSIENT_RETRIES": "0"}))


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"DORMANT_TRANSIENT_RETRIES": "-1"}, "DORMANT_TRANSIENT_RETRIES='-1'"),
        (
            {"DORMANT_TRANSIENT_RETRIES": "101"},
            "from 0 (keep at the first transient failure) to 100",
        ),
        ({"DORMANT_TRANSIENT_RETRIES": "many"}, "DORMANT_TRANSIENT_RETRIES='many'"),
        ({"DORMANT_TRANSIENT_BACKOFF_SECONDS": "0"}, "positive number of seconds"),
        (
            {
                "DORMANT_TRANSIENT_BACKOFF_SECONDS": "5",
                "DORMANT_TRANSIENT_BACKOFF_MAX_SECONDS": "1",
            },
            "DORMANT_TRANSIENT_BACKOFF_MAX_SECONDS must be at least",
        ),
    ],
)
def test_bad_transient_settings_are_refused_by_name(env: dict[str, str], words: str) -> None:
    with pytest.raises(InvalidSetting) as refused:
        Settings.from_env(env)
    assert words in str(refused.value)


@pytest.fixture
def locked_redis() -> Iterator[str]:
    from tests.integration.conftest import _redis_db

    gen = _redis_db()
    try:
        yield next(gen)
    finally:
        gen.close()


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_a_broker_connection_reset_is_transient(
    broker: str, request: pytest.FixtureRequest
) -> None:
    """The broker's end of the connection reset (a TCP proxy in front of the machine's
    Redis, on a database this test locked, or RabbitMQ): the publish that meets it
    raises what the classifier calls transient."""
    from urllib.parse import urlsplit

    from kombu import Connection

    from tests.faults.kit import via
    from tests.faults.proxy import Proxy

    if broker == "redis":
        url = request.getfixturevalue("locked_redis")
    else:
        url = "amqp://guest:guest@127.0.0.1:5672//"
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    proxy = Proxy(parts.hostname, parts.port)
    try:
        with Connection(via(url, proxy.port), connect_timeout=5) as conn:
            conn.ensure_connection(max_retries=1)
            producer = conn.Producer()
            proxy.set("reset")
            with pytest.raises(Exception) as caught:
                # A routing key no queue has (RabbitMQ keeps nothing; the Redis database is
                # this test's own), sent until the reset is met.
                for _ in range(20):  # a write into a socket just reset may still pass
                    producer.publish({}, routing_key=f"no-queue-{uuid.uuid4().hex}", retry=False)
                    threading.Event().wait(0.05)
        assert is_transient(caught.value), repr(caught.value)
    finally:
        proxy.close()


@contextmanager
def soft_limit_in(seconds: float) -> Iterator[None]:
    """SoftTimeLimitExceeded raised in this thread after ``seconds``, as billiard's
    signal handler raises it in a worker's pool process."""
    from celery.exceptions import SoftTimeLimitExceeded

    def soft_limit(_signum: int, _frame: object) -> None:
        raise SoftTimeLimitExceeded()

    previous = signal.signal(signal.SIGALRM, soft_limit)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_soft_time_limit_inside_a_pipeline_is_not_transient() -> None:
    """psycopg, interrupted while its pipeline is busy, cannot leave pipeline mode and
    raises "cannot exit pipeline mode while busy", an OperationalError with no SQLSTATE
    that, wrapped as SQLAlchemy wraps it, alone reads as a passing fault. The time
    limit is in its chain: the trigger is kept as failed like any soft limit."""
    import psycopg

    raw = psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres")
    try:
        with pytest.raises(psycopg.OperationalError) as caught, soft_limit_in(0.2):
            with raw.pipeline():
                raw.execute("SELECT pg_sleep(2)")
    finally:
        raw.close()  # no ROLLBACK can be sent on it: closed, as the Store drops it
    assert "pipeline mode while busy" in str(caught.value)
    try:
        raise sa.exc.DBAPIError.instance(
            "SELECT pg_sleep(2)", {}, caught.value, psycopg.Error
        ) from caught.value
    except sa.exc.OperationalError as wrapped:  # what Connection._handle_dbapi_exception raises
        assert wrapped.orig is caught.value
        assert not is_transient(wrapped)
    # The same error with no interrupt behind it stays transient.
    assert is_transient(sa.exc.OperationalError("COMMIT", {}, Exception("server closed")))


def test_the_store_raises_a_soft_limit_from_its_pipelined_commit_as_itself(
    pg: tuple[Engine, str], caplog: pytest.LogCaptureFixture
) -> None:
    """persistence/round_trips.py ``last`` (the Store's write and COMMIT in one
    pipeline) raises the interrupt, not psycopg's error in its place, so the failed
    trigger names SoftTimeLimitExceeded; the connection, stuck in pipeline mode, is
    dropped rather than reset into the pool (no ERROR from the pool)."""
    from celery.exceptions import SoftTimeLimitExceeded

    from dormant.persistence import round_trips

    engine, _ = pg
    round_trips.install(engine)
    statement = sa.select(sa.func.pg_sleep(sa.bindparam("s", 2.0, type_=sa.Float)))
    with pytest.raises(SoftTimeLimitExceeded), soft_limit_in(0.2):
        with engine.connect() as conn, round_trips.open_late(conn):
            round_trips.last(conn, statement, None)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    with engine.connect() as conn:  # the pool hands out a working connection
        assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1

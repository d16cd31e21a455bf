"""Bounded time, the shell side (issue 8 item 2).

Every trigger task has Celery soft/hard time limits; every engine connection to
PostgreSQL has ``statement_timeout`` and ``idle_in_transaction_session_timeout``;
``dormant worker`` and ``dormant dev`` stop promptly on SIGTERM. A trigger stuck on an
instance's row lock (here: the test holds that lock, as a runaway transaction would)
must cost a bounded slice of a worker, never the worker: other instances are served
meanwhile, and the stuck trigger is applied later or kept as a failed trigger, never
lost.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from dormant.engine_core.errors import InvalidSetting
from dormant.persistence.settings import Settings
from dormant.persistence.store import Store
from tests.integration.conftest import Stack, _urls, wait_for
from tests.integration.waitkit import end, message_catch, model, script, start
from tests.security.shellkit import start_worker

WAITER = model(
    "tb-wait",
    start() + message_catch("catch", "tb-go") + end(),
    [("start", "catch"), ("catch", "end")],
    messages={"tb-go": "=orderId"},
)
QUICK = model(
    "tb-quick",
    start() + script("calc", "=1 + 1", "two") + end(),
    [("start", "calc"), ("calc", "end")],
)


# -- settings and connections -----------------------------------------------------------


def test_time_settings_have_defaults_and_refuse_unusable_values() -> None:
    s = Settings.from_env({})
    assert s.trigger_time_limit_seconds > s.trigger_soft_time_limit_seconds > 0
    assert s.db_statement_timeout_seconds > 0 and s.db_idle_in_transaction_timeout_seconds > 0
    assert s.worker_shutdown_timeout_seconds > 0
    with pytest.raises(InvalidSetting, match="DORMANT_DB_STATEMENT_TIMEOUT_SECONDS"):
        Settings.from_env({"DORMANT_DB_STATEMENT_TIMEOUT_SECONDS": "0"})
    with pytest.raises(InvalidSetting) as err:
        Settings.from_env(
            {
                "DORMANT_TRIGGER_SOFT_TIME_LIMIT_SECONDS": "20",
                "DORMANT_TRIGGER_TIME_LIMIT_SECONDS": "10",
            }
        )
    assert "DORMANT_TRIGGER_TIME_LIMIT_SECONDS must be greater" in str(err.value)
    assert "\n" not in str(err.value)


def test_every_engine_connection_carries_the_statement_and_idle_timeouts(pg_url: str) -> None:
    settings = Settings.from_env(
        {
            "DORMANT_DATABASE_URL": pg_url,
            "DORMANT_DB_STATEMENT_TIMEOUT_SECONDS": "0.5",
            "DORMANT_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": "0.7",
        }
    )
    store = Store(settings=settings)
    try:
        with store.engine.connect() as conn:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "500ms"
            assert (
                conn.execute(text("SHOW idle_in_transaction_session_timeout")).scalar() == "700ms"
            )
            with pytest.raises(OperationalError, match="statement timeout"):
                conn.execute(text("SELECT pg_sleep(3)"))
        with pytest.raises(OperationalError):
            with store.engine.begin() as conn:
                conn.execute(text("SELECT 1"))
                time.sleep(2.0)  # idle inside the transaction: the server ends the session
                conn.execute(text("SELECT 1"))
        with store.engine.connect() as conn:  # the pool recovers on its own
            assert conn.execute(text("SELECT 1")).scalar() == 1
    finally:
        store.close()


# -- through real workers -----------------------------------------------------------------


@pytest.fixture
def pg_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    """PostgreSQL + Redis, no processes: each test starts its worker with its settings."""
    with _urls("pg_redis", tmp_path, request) as urls:
        s = Stack(*urls, tmp_path)
        try:
            yield s
        finally:
            s.close()


@pytest.fixture
def embedded_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    with _urls("embedded", tmp_path, request) as urls:
        s = Stack(*urls, tmp_path)
        try:
            yield s
        finally:
            s.close()


@contextmanager
def row_locked(stack: Stack, instance_id: str) -> Iterator[None]:
    """Hold the instance's row lock (PostgreSQL) or the database write lock (SQLite)."""
    if stack.kind == "embedded":
        conn = sqlite3.connect(stack.database_url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    engine = create_engine(stack.database_url)
    try:
        with engine.connect() as conn:
            tx = conn.begin()
            conn.execute(
                text("SELECT id FROM instances WHERE id = :id FOR UPDATE"), {"id": instance_id}
            )
            try:
                yield
            finally:
                tx.rollback()
    finally:
        engine.dispose()


def _waiting(stack: Stack) -> str:
    stack.client.deploy(WAITER)
    stack.client.deploy(QUICK)
    victim = stack.client.start("tb-wait", {"orderId": "o-1"})
    wait_for(
        lambda: any(w.kind == "message" for w in stack.client.instance(victim).waits),
        what="the message wait",
    )
    return victim


def _kept_or_applied(stack: Stack, instance_id: str, correlation_key: str = "o-1") -> bool:
    """The stuck message was applied, or kept as a failed trigger an operator can see
    (a message is kept before it names an instance: found by its correlation key)."""
    if stack.client.instance(instance_id).status == "completed":
        return True
    failed = getattr(stack.client, "failed_triggers", None)
    return failed is not None and any(
        f.instance_id == instance_id
        or (f.task == "dormant.message" and correlation_key in str(f.body))
        for f in failed()
    )


def test_a_trigger_stuck_on_a_lock_frees_its_slot_by_statement_timeout(pg_stack: Stack) -> None:
    start_worker(
        pg_stack,
        env={"DORMANT_DB_STATEMENT_TIMEOUT_SECONDS": "1"},
        args=("--concurrency", "1"),
    )
    victim = _waiting(pg_stack)
    with row_locked(pg_stack, victim):
        pg_stack.client.send_message("tb-go", "o-1", {"paid": True})
        wait_for(
            lambda: "Task dormant.message[" in pg_stack.procs[0].text(), what="the message taken"
        )
        other = pg_stack.client.start("tb-quick")
        # One pool process: served only because the stuck trigger gave its slot back.
        pg_stack.wait_status(other, "completed")
        assert pg_stack.client.instance(victim).status == "active"
    assert pg_stack.wait_status(victim, "completed", timeout=60).variables["paid"] is True
    assert "transient failure, retrying" in pg_stack.procs[0].text()


def test_a_trigger_past_its_soft_time_limit_frees_its_slot_and_is_not_lost(
    pg_stack: Stack,
) -> None:
    start_worker(
        pg_stack,
        env={
            "DORMANT_DB_STATEMENT_TIMEOUT_SECONDS": "120",
            "DORMANT_TRIGGER_SOFT_TIME_LIMIT_SECONDS": "2",
            "DORMANT_TRIGGER_TIME_LIMIT_SECONDS": "8",
        },
        args=("--concurrency", "1"),
    )
    victim = _waiting(pg_stack)
    with row_locked(pg_stack, victim):
        pg_stack.client.send_message("tb-go", "o-1", {"paid": True})
        wait_for(
            lambda: "Task dormant.message[" in pg_stack.procs[0].text(), what="the message taken"
        )
        other = pg_stack.client.start("tb-quick")
        pg_stack.wait_status(other, "completed", timeout=40)
    wait_for(lambda: _kept_or_applied(pg_stack, victim), 60, what="the message kept or applied")
    assert "SoftTimeLimitExceeded" in pg_stack.procs[0].text()


def _sigterm_while_stuck(stack: Stack, command: str) -> str:
    """Start ``command``, get a trigger stuck in it, SIGTERM it; the victim's id."""
    proc = start_worker(
        stack,
        command=command,
        env={
            "DORMANT_WORKER_SHUTDOWN_TIMEOUT_SECONDS": "2",
            # PostgreSQL: long, so only the shutdown can end the wait. SQLite: its lock
            # wait is C code no signal interrupts; this bounds it (persistence/db.py).
            "DORMANT_DB_STATEMENT_TIMEOUT_SECONDS": "300" if stack.kind == "pg_redis" else "5",
        },
        args=("--concurrency", "2"),
    )
    victim = _waiting(stack)
    with row_locked(stack, victim):
        # Straight to the broker: on SQLite the Client's inbox write would wait for the lock.
        Celery(broker=stack.broker_url).send_task(
            "dormant.message",
            kwargs={"name": "tb-go", "correlation_key": "o-1", "variables": {"paid": True}},
        )
        # Some trigger (this message, or beat's deadline scan in ``dev``) is blocked on
        # the lock within a moment; give it that moment.
        wait_for(lambda: "] received" in proc.text(), what="a trigger taken")
        time.sleep(2.0)
        assert proc.popen is not None
        os.kill(proc.popen.pid, signal.SIGTERM)  # as docker stop / systemd send it
        try:
            code = proc.popen.wait(timeout=40)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{command} ignored SIGTERM:\n{proc.tail()}") from None
    assert code is not None
    return victim


def test_dormant_worker_stops_promptly_on_sigterm_and_the_trigger_is_not_lost(
    pg_stack: Stack,
) -> None:
    victim = _sigterm_while_stuck(pg_stack, "worker")
    start_worker(pg_stack, name="after")
    assert pg_stack.wait_status(victim, "completed", timeout=120).variables["paid"] is True


def test_dormant_dev_stops_promptly_on_sigterm_and_the_trigger_is_not_lost(
    embedded_stack: Stack,
) -> None:
    victim = _sigterm_while_stuck(embedded_stack, "dev")
    start_worker(embedded_stack, name="after", command="dev")
    assert embedded_stack.wait_status(victim, "completed", timeout=120).variables["paid"] is True

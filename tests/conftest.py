"""Shared fixtures for the whole suite.

``pg_url`` creates a fresh database on the real PostgreSQL at 127.0.0.1:5432 for the
session, migrates it and drops it at the end. If PostgreSQL is unreachable the test
FAILS, loudly: an integration test that skips when its service is missing proves
nothing. ``DORMANT_TEST_PG`` overrides the server URL.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

PG_SERVER = os.environ.get("DORMANT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432")


def _admin_conninfo() -> str:
    return PG_SERVER.replace("postgresql+psycopg://", "postgresql://") + "/postgres"


def _create_database(name: str) -> None:
    import psycopg

    try:
        with psycopg.connect(_admin_conninfo(), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {PG_SERVER} ({exc}); integration tests need it "
            "and never skip. Start it, or point DORMANT_TEST_PG at one.",
            pytrace=False,
        )


def _drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(_admin_conninfo(), autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_empty_database() -> Iterator[Callable[[], str]]:
    """A factory of fresh, UNMIGRATED PostgreSQL databases (dropped at session end)."""
    made: list[str] = []

    def make() -> str:
        name = f"dormant_test_{uuid.uuid4().hex[:12]}"
        _create_database(name)
        made.append(name)
        return f"{PG_SERVER}/{name}"

    yield make
    for name in made:
        _drop_database(name)


@pytest.fixture(scope="session")
def pg_url(pg_empty_database: Callable[[], str]) -> str:
    """A migrated PostgreSQL database for the session."""
    from dormant.persistence import migrate

    url = pg_empty_database()
    migrate.upgrade(url)
    return url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'dormant.sqlite3'}"


def _truncate(url: str) -> None:
    from sqlalchemy import create_engine, text

    from dormant.persistence.tables import metadata

    # Every table of the schema, so a table added later is never left over between the
    # tests that share the session database.
    every = ", ".join(sorted(metadata.tables))
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {every} RESTART IDENTITY"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A clean, migrated database URL on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'dormant.sqlite3'}"
    url: str = request.getfixturevalue("pg_url")
    _truncate(url)
    return url


@pytest.fixture
def store(db_url: str) -> Iterator[object]:
    """A Store on each backend (SQLite file, real PostgreSQL), clean for each test."""
    from dormant.persistence.settings import Settings
    from dormant.persistence.store import Store

    s = Store(settings=Settings(database_url=db_url, deadline_claim_seconds=30))
    yield s
    s.close()


@pytest.fixture
def now() -> datetime:
    """A fixed, timezone-aware instant; tests move time by adding to it."""
    return datetime(2026, 3, 1, 9, 0, 0, tzinfo=UTC)


class Clock:
    """A hand-moved clock for code that takes ``now`` explicitly."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def clock(now: datetime) -> Clock:
    return Clock(now)


# -- a scripted stand-in for the step function ------------------------------------
# Persistence tests assert what the Store does with a step (lock, sync, dedup, outbox),
# not BPMN semantics; this stand-in makes the step explicit. Start's variables
# ``_arm`` (a list of Wait dicts) arm waits; any wait trigger removes its wait and arms
# ``_arm`` from its variables; ``_job`` adds a DispatchJob effect; no waits = completed.


@pytest.fixture
def fake_core(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import TypeAdapter

    from dormant.engine_core import engine
    from dormant.engine_core.checkpoint import (
        CURRENT_SCHEMA,
        Checkpoint,
        InstanceStatus,
        Scope,
        Wait,
        copy_checkpoint,
        decode,
    )
    from dormant.engine_core.effects import DispatchJob, Fact, Step
    from dormant.engine_core.triggers import Cancel, Start

    def new_checkpoint(definition, instance_id, version, now):  # type: ignore[no-untyped-def]
        return Checkpoint(
            schema_version=CURRENT_SCHEMA,
            instance_id=instance_id,
            process_key=definition.key,
            version=version,
            created_at=now,
            updated_at=now,
            scopes={"s0": Scope(id="s0")},
        )

    def apply(definition, checkpoint, trigger, *, now, services=None, keep_holds=False):  # type: ignore[no-untyped-def]
        # As the real one takes it: a working state, or the stored text (decoded here).
        # It keeps no holds (``holds_before`` None): the Store reads them from the text.
        if not isinstance(checkpoint, Checkpoint):
            checkpoint = decode(checkpoint)
        cp = copy_checkpoint(checkpoint)
        variables = dict(getattr(trigger, "variables", {}) or {})
        wait_id = getattr(trigger, "wait_id", None)
        if isinstance(trigger, Start):
            cp.business_key = trigger.business_key
            cp.start_key = trigger.start_key
        elif isinstance(trigger, Cancel):
            cp.waits.clear()
            cp.status = InstanceStatus.TERMINATED
        elif wait_id not in cp.waits:
            return Step(
                checkpoint, facts=(Fact("StaleTrigger", {"wait_id": wait_id}),), changed=False
            )
        else:
            del cp.waits[wait_id]
        for w in variables.pop("_arm", []):
            wait = TypeAdapter(Wait).validate_python(w)
            cp.waits[wait.id] = wait
        effects = []
        if "_job" in variables:
            effects.append(DispatchJob(cp.instance_id, "j1", "task", variables.pop("_job"), 1, {}))
        cp.scopes["s0"].variables.update(
            {k: v for k, v in variables.items() if not k.startswith("_")}
        )
        if not cp.waits and cp.status is InstanceStatus.ACTIVE:
            cp.status = InstanceStatus.COMPLETED
        cp.revision += 1
        cp.updated_at = now
        return Step(cp, tuple(effects), (Fact("Applied", {"trigger": trigger.kind}),), True)

    monkeypatch.setattr(engine, "new_checkpoint", new_checkpoint)
    monkeypatch.setattr(engine, "apply", apply)


_FAULT_LINES: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep the fault suite's count lines (they are captured, also on xdist workers)."""
    if report.when == "call" and "faults" in report.keywords:
        _FAULT_LINES.extend(
            f"{report.nodeid.split('::')[-1]}: {line.strip()}"
            for line in report.capstdout.splitlines()
            if "sent=" in line
        )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _FAULT_LINES:
        terminalreporter.section("fault suite counts")
        for line in _FAULT_LINES:
            terminalreporter.write_line(line)

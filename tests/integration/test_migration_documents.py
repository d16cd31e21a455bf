"""Migrations 0023 and 0024 on a database that already holds instances: a checkpoint
written whole (with its instance id and process key), a step's facts in their earlier
form, and the ``jsonb`` columns of before, all read back and go on after the upgrade;
and 0024 goes down and up again."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, insert, text, update

from dormant.engine_core.checkpoint import WaitKind, encode
from dormant.engine_core.triggers import JobCompleted, MessageReceived
from dormant.persistence import migrate
from dormant.persistence.store import NewInstance, Store
from dormant.persistence.tables import facts, instances
from tests.integration.console.kit import MODEL

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_documents_written_before_0024_read_and_go_on(
    backend: str, tmp_path: Path, pg_empty_database: Callable[[], str]
) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite3'}" if backend == "sqlite" else pg_empty_database()
    migrate.upgrade(url)
    store = Store(url)
    try:
        store.deployments.deploy(MODEL.read_bytes(), T0)
        store.start(NewInstance("payment", "i1", {"flag": "/nonexistent", "order": "o-1"}), now=T0)
        job = next(
            w for w in store.queries.checkpoint("i1").waits.values() if w.kind is WaitKind.JOB
        )
        store.apply("i1", JobCompleted(wait_id=job.id), T0)
        cp = store.queries.checkpoint("i1")
        history = [(f.kind, f.details) for f in store.queries.history("i1")]
    finally:
        store.close()

    config = migrate._config()
    engine = create_engine(url)
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0022")  # both migrations, down
    with engine.begin() as conn:  # rows as dormant wrote them before 0023
        conn.execute(update(instances).where(instances.c.id == "i1").values(checkpoint=encode(cp)))
        conn.execute(
            insert(facts).values(
                instance_id="i1",
                revision=cp.revision,
                at=T0,
                kind="Step",
                details={
                    "facts": [
                        {"kind": "Noted", "details": {"by": "an older dormant"}},
                        {"kind": "Noted", "details": {}},
                    ]
                },
            )
        )
        if backend == "postgresql":
            kind = conn.execute(
                text(
                    "SELECT data_type FROM information_schema.columns "
                    "WHERE column_name = 'checkpoint'"
                )
            ).scalar_one()
            assert kind == "jsonb"
    engine.dispose()

    migrate.upgrade(url)
    store = Store(url)
    try:
        assert store.queries.checkpoint("i1") == cp
        assert [(f.kind, f.details) for f in store.queries.history("i1")] == [
            *history,
            ("Noted", {"by": "an older dormant"}),
            ("Noted", {}),
        ]
        wait = next(w for w in cp.waits.values() if w.kind is WaitKind.MESSAGE)
        assert wait.message_name is not None
        trigger = MessageReceived(
            wait_id=wait.id, name=wait.message_name, correlation_key=wait.correlation_key
        )
        assert store.apply("i1", trigger, T0).status == "completed"
    finally:
        store.close()

"""Migration 0010 on a database that already holds definitions and decisions: each
file deployed before it becomes one deployment, with its version tags read from the
stored source, so bindings and ``deployments list`` see the old rows too."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, insert, select

from dormant.persistence import migrate
from dormant.persistence.store import Store
from dormant.persistence.tables import decisions, definitions
from tests.integration.test_bindings import DMN, script_child

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_rows_deployed_before_0010_get_a_deployment_and_their_tags(
    backend: str, tmp_path: Path, pg_empty_database: Callable[[], str]
) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite3'}" if backend == "sqlite" else pg_empty_database()
    migrate.upgrade(url, "0009")
    engine = create_engine(url)
    with engine.begin() as conn:  # rows as dormant wrote them before 0010
        conn.execute(
            insert(definitions).values(
                key="legacy",
                version=1,
                checksum="c",
                source=script_child("legacy", "x", tag="t1"),
                deployed_at=T0,
                starts={"message": {}, "signal": {}},
            )
        )
        conn.execute(
            insert(decisions).values(
                decision_id="legacy-rate",
                version=1,
                name="Rate",
                checksum="d",
                source=DMN.format(did="legacy-rate", tag="r1", value="1"),
                dmn_checksum="f",
                deployed_at=T0,
            )
        )
    engine.dispose()
    migrate.upgrade(url)
    store = Store(url)
    try:
        records = sorted(store.deployments.records(), key=lambda d: d.key)
        assert [[(r.kind, r.id, r.version) for r in d.resources] for d in records] == [
            [("process", "legacy", 1)],
            [("decision", "legacy-rate", 1)],
        ]
        with store.read() as conn:
            process = conn.execute(
                select(
                    definitions.c.deployment_key, definitions.c.version_tag, definitions.c.starts
                )
            ).one()
            decision = conn.execute(
                select(decisions.c.deployment_key, decisions.c.version_tag)
            ).one()
        assert (process.deployment_key, process.version_tag) == (records[0].key, "t1")
        assert process.starts["none"] is True
        assert tuple(decision) == (records[1].key, "r1")
    finally:
        store.close()

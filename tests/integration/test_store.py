"""The Store against real PostgreSQL and SQLite: the one transaction and its rows."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dormant.engine_core.errors import NotMigrated, UnknownInstance, UnknownProcess, UnknownTask
from dormant.engine_core.triggers import Cancel, MessageReceived, TaskCompleted, TimerFired
from dormant.persistence import migrate
from dormant.persistence.settings import Settings
from dormant.persistence.store import NewInstance, Store

REPO = Path(__file__).resolve().parents[2]

PROC = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
  id="d" targetNamespace="t">
  <bpmn:process id="{key}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="end"/>
    <bpmn:endEvent id="end"{extra}/>
  </bpmn:process>
</bpmn:definitions>
"""


def proc(key: str = "p", extra: str = "") -> str:
    return PROC.format(key=key, extra=extra)


def timer_wait(wid: str, due: datetime) -> dict[str, Any]:
    return {"id": wid, "kind": "timer", "role": "node", "node_id": "t", "due_at": due.isoformat()}


def msg_wait(wid: str, name: str, key: str | None) -> dict[str, Any]:
    return {
        "id": wid,
        "kind": "message",
        "role": "node",
        "node_id": "m",
        "message_name": name,
        "correlation_key": key,
    }


def task_wait(wid: str) -> dict[str, Any]:
    return {"id": wid, "kind": "user_task", "role": "node", "node_id": "u", "task_name": "Approve"}


# -- settings & migrations --------------------------------------------------------


def test_settings_from_env_normalises_and_validates() -> None:
    from dormant.engine_core.errors import InvalidSetting

    s = Settings.from_env(
        {"DORMANT_DATABASE_URL": "postgres://u@h/db", "DORMANT_DEADLINE_CLAIM_SECONDS": "10"}
    )
    assert s.database_url == "postgresql+psycopg://u@h/db"
    assert s.wake_retry_backoff_seconds == 5
    with pytest.raises(InvalidSetting, match="DORMANT_WAKE_RETRY_BACKOFF_SECONDS='0'"):
        Settings.from_env({"DORMANT_WAKE_RETRY_BACKOFF_SECONDS": "0"})


def test_not_migrated_on_an_empty_postgres_database(pg_empty_database: Any) -> None:
    url = pg_empty_database()
    head = migrate.head_revision()
    with pytest.raises(
        NotMigrated,
        match=rf"not migrated \(at revision none, need {head}\); run `dormant db upgrade`",
    ):
        Store(url)
    migrate.upgrade(url)
    Store(url).close()


def test_the_head_revision_read_from_file_names_is_alembics() -> None:
    """The schema check reads the head from the migration files' names
    (persistence/migrate.py): each file is named after its revision and follows the
    one before it, so the newest name is what alembic's reading of the scripts finds."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(migrate._config())
    assert migrate.head_revision() == scripts.get_current_head()
    for script in scripts.walk_revisions():
        assert Path(script.path).name.startswith(f"{script.revision}_"), script.path
        if script.down_revision is not None:
            assert int(script.revision) == int(str(script.down_revision)) + 1, script.path


def test_the_revision_a_database_is_at_is_alembics(pg_empty_database: Any, tmp_path: Path) -> None:
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import create_engine

    for url in (pg_empty_database(), f"sqlite:///{tmp_path / 'd.sqlite3'}"):
        engine = create_engine(url)
        try:
            for step in ("none", "0003", "head"):
                if step != "none":
                    migrate.upgrade(engine, step)
                with engine.connect() as conn:
                    alembics = MigrationContext.configure(conn).get_current_revision()
                assert migrate.current_revision(engine) == alembics
                assert alembics == {"none": None, "0003": "0003"}.get(step, migrate.head_revision())
        finally:
            engine.dispose()


def test_a_schema_check_does_not_import_alembic(pg_url: str, tmp_path: Path) -> None:
    """Every CLI command, beat and worker checks its database's schema at start
    (``ensure_database`` is beat's and a worker's);
    importing alembic and every migration module for it cost each a quarter of a second.
    The embedded default's check runs alembic only when the file is behind."""
    embedded = f"sqlite:///{tmp_path / 'd.sqlite3'}"
    migrate.upgrade(embedded)
    for url in (pg_url, embedded):
        probe = (
            "import sys; from dormant.persistence.settings import Settings; "
            "from dormant.tasks.app import ensure_database; "
            f"ensure_database(Settings(database_url={url!r})); "
            "assert 'alembic' not in sys.modules, sorted(m for m in sys.modules if 'alembic' in m)"
        )
        result = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO
        )
        assert result.returncode == 0, (url, result.stderr)


def test_the_embedded_default_behind_is_migrated_where_a_worker_starts(tmp_path: Path) -> None:
    from dormant.tasks.app import ensure_database

    embedded = f"sqlite:///{tmp_path / 'd.sqlite3'}"
    migrate.upgrade(embedded, "0003")
    ensure_database(Settings(database_url=embedded))
    assert migrate.current_revision(embedded) == migrate.head_revision()


def test_migration_matches_the_tables(db_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import create_engine

    from dormant.persistence.tables import metadata

    Store(db_url).close()  # sqlite migrates itself; postgres was migrated by the fixture
    engine = create_engine(db_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    engine.dispose()
    assert [d for d in diff if d[0] not in ("modify_type",)] == []


# -- deploy & definitions ---------------------------------------------------------


def test_deploy_versions(store: Store, now: datetime, fake_core: None) -> None:
    assert [(d.key, d.version, d.created) for d in store.deployments.deploy(proc(), now)] == [
        ("p", 1, True)
    ]
    assert [(d.version, d.created) for d in store.deployments.deploy(proc().encode(), now)] == [
        (1, False)
    ]
    store.start(NewInstance("p", "i1", {"_arm": [task_wait("w1")]}), now=now)
    assert [
        (d.version, d.created) for d in store.deployments.deploy(proc(extra=' name="End"'), now)
    ] == [(2, True)]
    assert store.deployments.definition("p")[1] == 2
    assert store.queries.instance("i1").version == 1  # pinned
    store.start(NewInstance("p", "i2", {"_arm": [task_wait("w1")]}), now=now)
    assert store.queries.instance("i2").version == 2
    with pytest.raises(
        UnknownProcess, match="process 'p' has no version 3; deployed versions: 1, 2"
    ):
        store.deployments.definition("p", 3)
    with pytest.raises(UnknownProcess, match="no process 'x' is deployed; deployed: p"):
        store.deployments.definition("x")


# -- the one transaction ----------------------------------------------------------


def test_start_apply_round_trip_and_hold_sync(store: Store, now: datetime, fake_core: None) -> None:
    store.deployments.deploy(proc(), now)
    due = now + timedelta(minutes=5)
    a = store.start(
        NewInstance(
            "p",
            "i1",
            {
                "x": 1,
                "_arm": [timer_wait("w1", due), msg_wait("w2", "paid", "o-1"), task_wait("w3")],
            },
            business_key="b1",
        ),
        now=now,
    )
    assert (a.revision, a.status, a.changed) == (1, "active", True)
    holds = store.queries.holds("i1")
    assert [(r["wait_id"], r["due_at"]) for r in holds["deadlines"]] == [("w1", due)]
    assert [(r["name"], r["correlation_key"]) for r in holds["subscriptions"]] == [("paid", "o-1")]
    assert [t.id for t in store.queries.user_tasks("i1")] == ["i1.w3"]
    assert store.queries.task("i1.w3") == ("i1", "w3")

    # The message arrives: its wait goes, a new timer is armed; rows follow the checkpoint.
    b = store.apply(
        "i1",
        MessageReceived(
            wait_id="w2",
            name="paid",
            correlation_key="o-1",
            variables={"_arm": [timer_wait("w4", due)]},
        ),
        now,
    )
    assert b.revision == 2
    holds = store.queries.holds("i1")
    assert [r["wait_id"] for r in holds["deadlines"]] == ["w1", "w4"]
    assert holds["subscriptions"] == []
    store.apply("i1", TaskCompleted(wait_id="w3"), now)
    with pytest.raises(UnknownTask):
        store.queries.task("i1.w3")
    store.apply("i1", Cancel(), now)
    assert store.queries.instance("i1").status == "terminated"
    c = store.queries.counts()
    assert (c["deadlines"], c["subscriptions"], c["user_tasks"]) == (0, 0, 0)
    assert [f.revision for f in store.queries.history("i1")] == [1, 2, 3, 4]


def test_start_is_idempotent_on_instance_id(store: Store, now: datetime, fake_core: None) -> None:
    store.deployments.deploy(proc(), now)
    store.start(NewInstance("p", "i1", {"_arm": [task_wait("w1")]}), now=now)
    again = store.start(NewInstance("p", "i1", {"_arm": [task_wait("w9")]}), now=now)
    assert (again.changed, again.duplicate, again.revision) == (False, True, 1)
    assert store.queries.counts()["user_tasks"] == 1


def test_unknown_instance(store: Store, now: datetime) -> None:
    with pytest.raises(UnknownInstance, match="nope"):
        store.apply("nope", TimerFired(wait_id="w1"), now)


def test_processed_trigger_id_dedup_and_stale(store: Store, now: datetime, fake_core: None) -> None:
    store.deployments.deploy(proc(), now)
    store.start(NewInstance("p", "i1", {"_arm": [task_wait("w1"), task_wait("w2")]}), now=now)
    first = store.apply("i1", TaskCompleted(wait_id="w1"), now, trigger_id="t-1")
    dup = store.apply("i1", TaskCompleted(wait_id="w2"), now, trigger_id="t-1")
    assert first.changed and (dup.changed, dup.duplicate, dup.revision) == (False, True, 2)
    stale = store.apply("i1", TaskCompleted(wait_id="w1"), now, trigger_id="t-2")
    assert (stale.changed, stale.duplicate, stale.revision) == (False, False, 2)
    assert [f.kind for f in store.queries.history("i1")][-1] == "StaleTrigger"


def test_outbox_rows_in_the_same_transaction(store: Store, now: datetime, fake_core: None) -> None:
    store.deployments.deploy(proc(), now)
    a = store.start(NewInstance("p", "i1", {"_job": "charge", "_arm": [task_wait("w1")]}), now=now)
    rows = store.outbox.outbox_rows(a.outbox_ids)
    assert [(r.kind, r.payload["job_type"], r.payload["instance_id"]) for r in rows] == [
        ("DispatchJob", "charge", "i1")
    ]
    assert store.outbox.pending_outbox(5, now=now) == []
    assert [
        r.id for r in store.outbox.pending_outbox(5, now=now + timedelta(seconds=6))
    ] == a.outbox_ids
    store.outbox.mark_published(a.outbox_ids[0])
    assert store.queries.counts()["outbox"] == 0


def test_a_failing_step_writes_nothing(
    store: Store, now: datetime, fake_core: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dormant.engine_core import engine

    store.deployments.deploy(proc(), now)
    store.start(NewInstance("p", "i1", {"_arm": [task_wait("w1")]}), now=now)
    before = store.queries.counts()

    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("core exploded")

    monkeypatch.setattr(engine, "apply", boom)
    with pytest.raises(RuntimeError):
        store.apply("i1", TaskCompleted(wait_id="w1"), now, trigger_id="t")
    assert store.queries.counts() == before
    assert store.queries.checkpoint("i1").revision == 1


def test_row_lock_serialises_concurrent_triggers(
    store: Store, now: datetime, fake_core: None
) -> None:
    """N threads each apply one trigger to ONE instance: revisions 1..N+1, none lost."""
    n = 24
    store.deployments.deploy(proc(), now)
    store.start(
        NewInstance(
            "p", "i1", {"_arm": [task_wait(f"w{k}") for k in range(n)] + [task_wait("keep")]}
        ),
        now=now,
    )
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            store.apply("i1", TaskCompleted(wait_id=f"w{k}", variables={f"v{k}": k}), now)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    cp = store.queries.checkpoint("i1")
    assert cp.revision == n + 1
    assert set(cp.waits) == {"keep"}
    assert cp.scopes["s0"].variables == {f"v{k}": k for k in range(n)}
    assert sorted(f.revision for f in store.queries.history("i1")) == list(range(1, n + 2))

"""The rows a trigger writes: what stays in place, and what is not written at all.

Each test drives the real Store on a real database and reads what the server itself
recorded (page items, row versions, rows), so it fails when the mechanism it names is
removed: the checkpoint UPDATE kept HOT by ``instances.waiting_nodes`` (migration
0013), a hold row left as it was when its wait is unchanged, the facts of one step
written as one row (persistence/fact_rows.py), processed trigger ids kept through the
redelivery window and swept after it (persistence/processed.py), and no row inserted
and deleted by one transaction (read off the WAL).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text, update

from dormant.engine_core.checkpoint import ROW_IDENTITY, WaitKind, encode, encode_row_json
from dormant.engine_core.triggers import JobCompleted, MessageReceived, SetVariables
from dormant.persistence.console_queries import ConsoleQueries, InstanceFilter
from dormant.persistence.processed import sweep_processed
from dormant.persistence.results import Applied
from dormant.persistence.store import NewInstance, Store
from dormant.persistence.tables import instances
from tests.integration.console.kit import MODEL

pytestmark = pytest.mark.integration

# HEAP_HOT_UPDATED in a tuple's t_infomask2 (PostgreSQL's src/include/access/htup_details.h):
# the row's next version was written on the same page with no index entry.
_HEAP_HOT_UPDATED = 0x4000


@pytest.fixture
def pg_store(pg_empty_database: Any) -> Iterator[Store]:
    from dormant.persistence import migrate

    url = pg_empty_database()
    migrate.upgrade(url)
    s = Store(url)
    yield s
    s.close()


def _waiting_at_paid(store: Store, now: datetime) -> str:
    """An instance of the console's payment model whose token waits at 'paid' (its
    message catch event, with a subscription row)."""
    return _job_done(store, now).instance_id


def _job_done(store: Store, now: datetime) -> Applied:
    """``_waiting_at_paid``'s instance, and what its job's result applied."""
    store.deployments.deploy(MODEL.read_bytes(), now)
    store.start(NewInstance("payment", "i1", {"flag": "/nonexistent", "order": "o-1"}), now=now)
    cp = store.queries.checkpoint("i1")
    job = next(w.id for w in cp.waits.values() if w.kind is WaitKind.JOB)
    return store.apply("i1", JobCompleted(wait_id=job), now)


def _paid(store: Store, iid: str, now: datetime, trigger_id: str | None = None) -> Applied:
    """The message ``_waiting_at_paid``'s instance waits for, applied: it ends it."""
    wait = next(
        w for w in store.queries.checkpoint(iid).waits.values() if w.kind is WaitKind.MESSAGE
    )
    assert wait.message_name is not None
    trigger = MessageReceived(
        wait_id=wait.id, name=wait.message_name, correlation_key=wait.correlation_key
    )
    return store.apply(iid, trigger, now, trigger_id=trigger_id)


def test_a_trigger_that_moves_no_token_updates_the_instance_row_hot(
    pg_store: Store, now: datetime
) -> None:
    """Setting a variable rewrites the checkpoint but moves no token: the UPDATE is HOT
    (no entry in any of the instance table's indexes), while the console's "waits at
    node" filter still finds the instance."""
    iid = _waiting_at_paid(pg_store, now)
    with pg_store.engine.begin() as conn:
        # pageinspect reads the page through the shared buffers: what the UPDATE left
        # there, flushed or not (no CHECKPOINT, which flushes every database of the
        # server and took a minute beside the rest of the suite).
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS pageinspect"))
        at = conn.execute(text("SELECT ctid::text FROM instances WHERE id = :i"), {"i": iid})
        block, item = (int(n) for n in at.scalar_one().strip("()").split(","))
    pg_store.apply(iid, SetVariables(variables={"note": "x" * 100}), now)
    with pg_store.engine.connect() as conn:
        # The version the UPDATE replaced: flagged HOT-updated, its successor on the page.
        flags = list(
            conn.execute(
                text(
                    "SELECT t_infomask2 FROM heap_page_items(get_raw_page('instances', :p)) "
                    "WHERE lp = :lp"
                ),
                {"p": block, "lp": item},
            ).scalars()
        )
    assert len(flags) == 1 and flags[0] & _HEAP_HOT_UPDATED, flags
    page = ConsoleQueries(pg_store.engine).instance_page(InstanceFilter(waiting_at="paid"))
    assert [r.id for r in page.rows] == [iid]


def test_a_trigger_that_keeps_a_wait_leaves_its_hold_row_untouched(
    pg_store: Store, now: datetime
) -> None:
    """The subscription of a wait the step keeps is neither updated nor deleted and
    re-inserted: the same row version (``xmin``, ``ctid``) before and after."""
    iid = _waiting_at_paid(pg_store, now)
    query = text("SELECT xmin::text, ctid::text FROM subscriptions WHERE instance_id = :i")
    with pg_store.engine.connect() as conn:
        before = conn.execute(query, {"i": iid}).all()
    pg_store.apply(iid, SetVariables(variables={"note": "x"}), now)
    with pg_store.engine.connect() as conn:
        after = conn.execute(query, {"i": iid}).all()
    assert len(before) == 1
    assert after == before


def test_the_facts_of_one_step_are_one_row_and_read_back_one_by_one(
    store: Store, now: datetime
) -> None:
    """A job's result records several facts at one revision: one ``facts`` row holds
    them, and the history (the Client's, the CLI's, the console's) lists each one, in
    the order recorded."""
    applied = _job_done(store, now)
    iid, revision = applied.instance_id, applied.revision
    history = store.queries.history(iid)
    of_step = [(f.kind, f.details) for f in history if f.revision == revision]
    assert len(of_step) > 1, of_step
    assert of_step == [(f.kind, dict(f.details)) for f in applied.facts]
    with store.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT count(*) FROM facts WHERE instance_id = :i AND revision = :r"),
            {"i": iid, "r": revision},
        ).scalar_one()
    assert rows == 1
    bundle = ConsoleQueries(store.engine).instance_bundle(iid)[1]
    assert [(f.kind, f.revision, f.details) for f in bundle] == [
        (f.kind, f.revision, f.details) for f in history
    ]


def test_a_step_row_is_pairs_and_one_written_before_them_reads_the_same() -> None:
    """A step's row lists ``[kind, details]`` pairs (``[kind]`` with no details); a row
    of the earlier ``{"facts": [{"kind", "details"}]}`` form reads back alike."""
    from types import SimpleNamespace

    from dormant.engine_core.effects import Fact
    from dormant.persistence.fact_rows import STEP_KIND, fact_rows, fact_views

    at = datetime(2026, 1, 1, tzinfo=UTC)
    facts_at = [(3, at, Fact("NodeLeft", {"node": "a"})), (3, at, Fact("Completed", {}))]
    (row,) = fact_rows("i", facts_at)
    assert (row["kind"], row["details"]) == (
        STEP_KIND,
        [["NodeLeft", {"node": "a"}], ["Completed"]],
    )
    earlier = {
        "facts": [
            {"kind": "NodeLeft", "details": {"node": "a"}},
            {"kind": "Completed", "details": {}},
        ]
    }
    views = [
        [(v.kind, v.details, v.revision) for v in fact_views([SimpleNamespace(**r)])]
        for r in (row, row | {"details": earlier})
    ]
    assert views[0] == views[1] == [("NodeLeft", {"node": "a"}, 3), ("Completed", {}, 3)]


def test_a_stored_checkpoint_leaves_its_id_and_key_to_the_row(store: Store, now: datetime) -> None:
    """The row's ``checkpoint`` holds neither the instance id nor the process key (its
    ``id`` and ``key`` columns do); every reader gets them back, and a document
    written whole, as before, reads and applies alike."""
    iid = _waiting_at_paid(store, now)
    with store.engine.connect() as conn:
        stored = conn.execute(text("SELECT checkpoint FROM instances WHERE id = :i"), {"i": iid})
        document = stored.scalar_one()
    document = document if isinstance(document, dict) else json.loads(document)
    assert not ROW_IDENTITY & set(document), sorted(document)
    cp = store.queries.checkpoint(iid)
    assert (cp.instance_id, cp.process_key) == (iid, "payment")
    whole = encode(cp)
    assert ROW_IDENTITY <= set(whole)
    with store.engine.begin() as conn:
        conn.execute(update(instances).where(instances.c.id == iid).values(checkpoint=whole))
    assert store.queries.checkpoint(iid) == cp
    assert store.apply(iid, SetVariables(variables={"n": 1}), now).changed
    assert store.queries.instance(iid).variables["n"] == 1


def test_postgresql_keeps_the_documents_as_the_text_written(pg_store: Store, now: datetime) -> None:
    """The checkpoint and a step's facts are stored as the engine's compact text, not
    re-rendered from ``jsonb``'s binary form (migration 0024)."""
    applied = _job_done(pg_store, now)
    cp = pg_store.queries.checkpoint(applied.instance_id)
    with pg_store.engine.connect() as conn:
        stored = conn.execute(
            text("SELECT checkpoint::text FROM instances WHERE id = :i"), {"i": cp.instance_id}
        ).scalar_one()
        step = conn.execute(
            text("SELECT details::text FROM facts WHERE instance_id = :i AND revision = :r"),
            {"i": cp.instance_id, "r": applied.revision},
        ).scalar_one()
    assert stored == encode_row_json(cp)
    assert ": " not in step and step.startswith("[[")


def test_a_processed_trigger_id_is_kept_through_the_redelivery_window_then_swept(
    store: Store, now: datetime
) -> None:
    """Within its retention a redelivered trigger is refused as a duplicate (its id is
    still there after the sweep); past it the sweep deletes the id, slice by slice."""
    iid = _waiting_at_paid(store, now)
    retention = store.settings.processed_trigger_retention_seconds
    first = store.apply(iid, SetVariables(variables={"n": 1}), now, trigger_id="t-1")
    store.apply(iid, SetVariables(variables={"n": 2}), now, trigger_id="t-2")
    assert first.changed
    just_inside = now + timedelta(seconds=retention - 1)
    assert sweep_processed(store.engine, just_inside, retention) == 0
    again = store.apply(iid, SetVariables(variables={"n": 3}), just_inside, trigger_id="t-1")
    assert again.duplicate and not again.changed
    assert store.queries.instance(iid).variables["n"] == 2
    past = now + timedelta(seconds=retention + 1)
    assert sweep_processed(store.engine, past, retention, limit=1) == 1
    assert sweep_processed(store.engine, past, retention, limit=1) == 1
    assert sweep_processed(store.engine, past, retention, limit=1) == 0


def test_the_retention_must_outlast_every_redelivery() -> None:
    from dormant.engine_core.errors import InvalidSetting
    from dormant.persistence.settings import Settings

    assert Settings().processed_trigger_retention_seconds >= 10 * 60
    with pytest.raises(InvalidSetting, match="DORMANT_PROCESSED_TRIGGER_RETENTION_SECONDS"):
        Settings.from_env({"DORMANT_PROCESSED_TRIGGER_RETENTION_SECONDS": "300"})


def test_beat_sweeps_processed_trigger_ids_past_their_retention(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The beat's ``dormant.processed.sweep`` deletes the ids past retention and keeps
    the fresh ones."""
    from dormant.persistence.settings import Settings
    from dormant.tasks import app as app_module
    from dormant.tasks import wire
    from dormant.tasks.operations import processed_sweep

    assert wire.PROCESSED_SWEEP in app_module.app.conf.beat_schedule
    broker = f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    app_module.configure(Settings.from_env(database_url=sqlite_url, broker_url=broker))
    try:
        store = app_module.store()
        fresh = datetime.now(UTC)
        old = fresh - timedelta(seconds=store.settings.processed_trigger_retention_seconds + 60)
        iid = _waiting_at_paid(store, old)
        store.apply(iid, SetVariables(variables={"n": 1}), old, trigger_id="old")
        store.apply(iid, SetVariables(variables={"n": 2}), fresh, trigger_id="fresh")
        assert processed_sweep.apply().result == 1
        with store.engine.connect() as conn:
            kept = conn.execute(text("SELECT trigger_id FROM processed_triggers")).scalars()
            assert list(kept) == ["fresh"]
    finally:
        app_module.configure(Settings.from_env())


def _database_oid(conn: Any) -> int:
    """This database's OID, as the WAL's block references name it (the server is
    shared: a neighbour's records name another)."""
    oid: int = conn.execute(
        text("SELECT oid FROM pg_database WHERE datname = current_database()")
    ).scalar_one()
    return oid


def _heap_writes(conn: Any, start: str) -> list[tuple[str, str, str]]:
    """Every heap INSERT and DELETE PostgreSQL logged since ``start`` in this database
    (the server is shared: a neighbour's records name another database's OID):
    (transaction, kind, the tuple's place: relation, block and line pointer)."""
    database = _database_oid(conn)
    rows = conn.execute(
        text(
            "SELECT xid, record_type, description, block_ref FROM "
            "pg_get_wal_records_info(CAST(:s AS pg_lsn), pg_current_wal_lsn()) "
            "WHERE resource_manager = 'Heap'"
        ),
        {"s": start},
    ).all()
    found = []
    for r in rows:
        kind = str(r.record_type).removesuffix("+INIT")
        if kind in ("INSERT", "DELETE") and f"/{database}/" in str(r.block_ref):
            place = str(r.block_ref).split("rel ", 1)[1].split(" fork")[0]
            block = str(r.block_ref).split(" blk ", 1)[1].split()[0]
            line = str(r.description).split()[1].rstrip(",")
            found.append((str(r.xid), kind, f"{place}/{block}/{line}"))
    return found


def test_no_trigger_writes_a_row_its_own_transaction_deletes(
    pg_store: Store, now: datetime
) -> None:
    """A start, its job's result and the message after it: read off the WAL, no tuple
    is inserted and deleted by one transaction (a row that would be both is one never
    to write)."""
    with pg_store.engine.begin() as conn:
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_walinspect"))
        start = str(conn.execute(text("SELECT pg_current_wal_lsn()")).scalar_one())
    iid = _waiting_at_paid(pg_store, now)
    assert _paid(pg_store, iid, now, trigger_id="m-1").status == "completed"
    with pg_store.engine.connect() as conn:
        writes = _heap_writes(conn, start)
    inserted = {(x, at) for x, kind, at in writes if kind == "INSERT"}
    deleted = {(x, at) for x, kind, at in writes if kind == "DELETE"}
    assert deleted, writes  # the job's deadline and the subscription went
    assert inserted & deleted == set()


def _indexes_written(conn: Any, start: str, end: str) -> set[str]:
    """The indexes of this database that PostgreSQL logged an entry in between two WAL
    positions."""
    database = _database_oid(conn)
    refs = conn.execute(
        text(
            "SELECT block_ref FROM pg_get_wal_records_info(CAST(:s AS pg_lsn), "
            "CAST(:e AS pg_lsn)) WHERE resource_manager IN ('Btree', 'Gin')"
        ),
        {"s": start, "e": end},
    ).scalars()
    nodes = {
        str(r).split(f"/{database}/", 1)[1].split()[0] for r in refs if f"/{database}/" in str(r)
    }
    return {
        conn.execute(
            text("SELECT pg_filenode_relation(0, CAST(:n AS oid))::text"), {"n": n}
        ).scalar_one()
        for n in nodes
    }


def test_an_instance_writes_index_entries_only_where_a_query_reads_them(
    pg_store: Store, now: datetime
) -> None:
    """An instance with no business key, parent or start key adds no entry to those
    columns' indexes, and the UPDATE that ends it (no live token left) none to the
    index of waiting nodes (migration 0023): its last write touches only the indexes
    that list ended instances. Its job's outbox row adds only its primary key's."""
    position = text("SELECT pg_current_wal_lsn()::text")
    with pg_store.engine.begin() as conn:
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_walinspect"))
        started_at = conn.execute(position).scalar_one()
    iid = _waiting_at_paid(pg_store, now)
    with pg_store.engine.connect() as conn:
        ending_at = conn.execute(position).scalar_one()
    assert _paid(pg_store, iid, now).status == "completed"
    with pg_store.engine.connect() as conn:
        ended_at = conn.execute(position).scalar_one()
        of_instances = set(
            conn.execute(
                text("SELECT indexname FROM pg_indexes WHERE tablename = 'instances'")
            ).scalars()
        )
        of_outbox = set(
            conn.execute(
                text("SELECT indexname FROM pg_indexes WHERE tablename = 'outbox'")
            ).scalars()
        )
        written = _indexes_written(conn, started_at, ending_at)
        running = written & of_instances
        ending = _indexes_written(conn, ending_at, ended_at) & of_instances
    assert "ix_instances_waiting_nodes" in running
    assert running.isdisjoint(
        {
            "ix_instances_business_key_created_at_id",
            "ix_instances_parent_id",
            "uq_instances_running_start_key",
        }
    ), running
    assert written & of_outbox == {"pk_outbox"}  # the job's row: its key, nothing else
    assert ending == {
        "pk_instances",
        "ix_instances_created_at_id",
        "ix_instances_key_version_created_at_id",
        "ix_instances_status_created_at_id",
        "ix_instances_tenant_id_created_at_id",
    }

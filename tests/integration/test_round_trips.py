"""A trigger's transaction is two round trips on PostgreSQL: BEGIN rides with its first
statement, COMMIT with its last (persistence/round_trips.py).

What the driver sends is recorded at psycopg's own surface: every command a cursor or
the connection executes, grouped by the pipeline it was sent in. Two groups for a
message, a start and a job's result — and nothing sent outside them — is two round
trips; four separate commands would be four. The transactions the Store opens late stay
transactions: a statement run through SQLAlchemy first gets its BEGIN, a failure rolls
every write back, a statement after the COMMIT is refused, and a pooled connection goes
back to the pool out of autocommit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import pq
from sqlalchemy import event, text

from bench.models import MESSAGE, SERVICE
from dormant.engine_core.errors import UnknownInstance
from dormant.engine_core.triggers import JobCompleted, SetVariables
from dormant.persistence import round_trips, savepoints
from dormant.persistence.routing import Router
from dormant.persistence.settings import Settings
from dormant.persistence.store import NewInstance, Store
from dormant.tasks.wire import redelivery
from tests.conftest import _truncate

pytestmark = pytest.mark.integration


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    _truncate(pg_url)
    store = Store(settings=Settings(database_url=pg_url, broker_url="memory://"))
    now = datetime.now(UTC)
    store.deployments.deploy(MESSAGE, now)
    store.deployments.deploy(SERVICE, now)
    try:
        yield store
    finally:
        store.close()


class Sent:
    """The commands psycopg sends, by pipeline: ``groups`` has one list per pipeline,
    ``outside`` the commands sent on their own (each its own round trip)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.groups: list[list[str]] = []
        self.outside: list[str] = []
        self._open = 0
        sent = self

        pipeline = psycopg.Connection.pipeline

        def counted_pipeline(conn: Any) -> Any:
            inner = pipeline(conn)

            class Counted:
                def __enter__(self) -> Any:
                    sent._open += 1
                    sent.groups.append([])
                    return inner.__enter__()

                def __exit__(self, *exc: Any) -> Any:
                    sent._open -= 1
                    return inner.__exit__(*exc)

            return Counted()

        def recording(original: Any) -> Any:
            def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
                word = (query.decode() if isinstance(query, bytes) else str(query)).split()[0]
                (sent.groups[-1] if sent._open else sent.outside).append(word.upper())
                return original(self, query, *args, **kwargs)

            return execute

        monkeypatch.setattr(psycopg.Connection, "pipeline", counted_pipeline)
        # (``Connection.execute`` runs its command through a cursor: recorded there.)
        monkeypatch.setattr(psycopg.Cursor, "execute", recording(psycopg.Cursor.execute))


def _committed_before_the_block_ended(store: Store) -> list[bool]:
    """At each SQLAlchemy commit of ``store``'s engine: was the server transaction
    already over (its COMMIT sent with the last statement), so the driver sent none?"""
    seen: list[bool] = []

    def commit(conn: Any) -> None:
        status = conn.connection.driver_connection.info.transaction_status
        seen.append(status == pq.TransactionStatus.IDLE)

    event.listen(store.engine, "commit", commit)
    return seen


def _processed(store: Store, instance_id: str) -> int:
    """The processed trigger ids kept for ``instance_id``."""
    with store.read() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM processed_triggers WHERE instance_id = :i"),
                {"i": instance_id},
            ).scalar_one()
        )


def test_a_message_trigger_is_two_round_trips(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    router = Router(pg_store, redelivery)
    for n in (0, 1):
        pg_store.start(NewInstance("bench_message", f"rt-{n}", {"orderId": f"rt-{n}"}), now=now)
    router.message("bench-go", "rt-0", {}, message_id="rt-0", ttl_seconds=None, now=now)

    sent = Sent(monkeypatch)
    committed = _committed_before_the_block_ended(pg_store)
    out = router.message("bench-go", "rt-1", {}, message_id="rt-1", ttl_seconds=None, now=now)
    assert out.delivered_to == ["rt-1"] and out.recorded
    assert sent.groups == [["BEGIN", "SELECT"], ["WITH", "COMMIT"]]
    assert sent.outside == []
    assert committed == [True]


def test_a_start_and_a_job_result_are_two_round_trips_each(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    pg_store.start(NewInstance("bench_service", "warm", {}), now=now)  # the definition is cached
    sent = Sent(monkeypatch)
    started = pg_store.start(NewInstance("bench_service", "rt-s", {}), now=now)
    assert started.changed and started.outbox_rows
    assert sent.groups == [["BEGIN", "SELECT"], ["WITH", "COMMIT"]]  # definition, write

    [job] = pg_store.queries.holds("rt-s")["deadlines"]
    sent.groups.clear()
    sent.outside.clear()
    done = pg_store.apply(
        "rt-s", JobCompleted(wait_id=job["wait_id"], variables={}), now, trigger_id="rt-s:j"
    )
    assert done.status == "completed"
    assert sent.groups == [["BEGIN", "SELECT"], ["WITH", "COMMIT"]]  # lock, write
    assert sent.outside == []


def test_a_producers_one_trigger_is_one_round_trip(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Client's start or message writes its inbox row before it publishes: BEGIN, the
    INSERT and COMMIT go in one pipeline (a batch, or one with an audit row, as ever)."""
    from dormant.persistence import inbox

    sent = Sent(monkeypatch)
    committed = _committed_before_the_block_ended(pg_store)
    [row_id] = inbox.record_many(pg_store.engine, [("dormant.signal", "signal.x", {"n": 1})])
    assert sent.groups == [["BEGIN", "INSERT", "COMMIT"]]
    assert sent.outside == []
    assert committed == [True]
    with pg_store.read() as conn:
        stored = conn.execute(
            text("SELECT kind, payload FROM inbox WHERE id = :i"), {"i": row_id}
        ).one()
    assert stored.kind == "dormant.signal"
    assert stored.payload == {"routing_key": "signal.x", "kwargs": {"n": 1}}


def test_a_redelivered_start_and_a_repeated_trigger_change_nothing(pg_store: Store) -> None:
    """The write and its COMMIT go together, so a start whose instance exists, or a
    trigger id applied meanwhile, must fail the write itself: a unique violation rolls
    the whole statement back (never written-then-committed, then noticed). A job's
    outcome needs no processed id: its repeat finds no running attempt, stale."""
    now = datetime.now(UTC)
    first = pg_store.start(NewInstance("bench_service", "rt-dup", {}, trigger_id="s"), now=now)
    again = pg_store.start(NewInstance("bench_service", "rt-dup", {}, trigger_id="s"), now=now)
    assert first.changed and not again.changed and again.duplicate
    with pg_store.read() as conn:
        rows = conn.execute(text("SELECT count(*) FROM outbox")).scalar_one()
        facts = conn.execute(text("SELECT count(*) FROM facts")).scalar_one()
    assert rows == len(first.outbox_rows)  # the second start wrote no job row
    variables = SetVariables(variables={"x": 1})
    pg_store.apply("rt-dup", variables, now, trigger_id="rt-dup:v")
    repeated = pg_store.apply("rt-dup", variables, now, trigger_id="rt-dup:v")
    assert repeated.duplicate and not repeated.changed
    [job] = pg_store.queries.holds("rt-dup")["deadlines"]
    result = JobCompleted(wait_id=job["wait_id"], variables={})
    assert pg_store.apply("rt-dup", result, now, trigger_id="rt-dup:j").changed
    stale = pg_store.apply("rt-dup", result, now, trigger_id="rt-dup:j")
    assert not stale.changed and not stale.duplicate
    assert [f.kind for f in stale.facts] == ["Stale"]
    with pg_store.read() as conn:
        after = conn.execute(text("SELECT count(*) FROM facts")).scalar_one()
        processed = conn.execute(text("SELECT trigger_id FROM processed_triggers")).scalars()
        assert sorted(processed) == ["rt-dup:v"]  # neither the start's nor the job's
    assert after > facts


def test_a_redelivered_start_ends_its_pipeline_cleanly_and_logs_no_warning(
    pg_store: Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The duplicate's INSERT fails inside the pipeline; the COMMIT behind it is then
    "pipeline aborted" by the server, which is expected, not news. When the error came
    back before the COMMIT was sent, psycopg raised it inside the pipeline block and
    logged the aborted COMMIT as a WARNING ("error ignored terminating"): a redelivered
    start is routine (an acknowledgement lost), so the noise taught operators to ignore
    warnings. The write is held back here until the server has answered, so that order
    happens every time rather than when the server is fast."""
    now = datetime.now(UTC)
    new = NewInstance("bench_service", "rt-quiet", {}, trigger_id="q")
    pg_store.start(new, now=now)
    execute = psycopg.Cursor.execute

    def answered_before_commit(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        result = execute(self, query, *args, **kwargs)
        if str(query).startswith("WITH"):
            time.sleep(0.05)  # the server's answer (the unique violation) is in by now
        return result

    monkeypatch.setattr(psycopg.Cursor, "execute", answered_before_commit)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = pg_store.start(new, now=now)
    assert again.duplicate and not again.changed
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    assert pg_store.start(NewInstance("bench_service", "rt-next", {}), now=now).changed


def test_a_late_opened_transaction_is_still_one_transaction(pg_store: Store) -> None:
    """A first statement run through SQLAlchemy gets its BEGIN from the engine's hook:
    an error later in the block rolls back what it wrote."""
    with pytest.raises(RuntimeError), pg_store.transaction() as conn:
        conn.execute(text("INSERT INTO processed_triggers VALUES ('rt-x', 'rt-t', now())"))
        raise RuntimeError("after the first write")
    kept = _processed(pg_store, "rt-x")
    assert kept == 0


def test_nothing_runs_after_the_commit_and_the_pool_gets_its_connection_back_transactional(
    pg_store: Store,
) -> None:
    statement = text("SELECT 1 AS one")
    with pytest.raises(round_trips.StatementAfterCommit), pg_store.transaction() as conn:
        assert [r.one for r in round_trips.last(conn, statement, None)] == [1]
        conn.execute(statement)  # outside the transaction that just committed: refused
    with pg_store.engine.connect() as conn:
        assert conn.connection.driver_connection.autocommit is False
        assert round_trips.first(conn, statement, None)[0].one == 1  # not opened late


def test_an_exception_inside_a_pipeline_rolls_back_and_never_pools_the_connection(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A time limit's exception (any non-driver exception) raised while a pipeline is
    half sent or half read: the transaction is rolled back and the connection
    invalidated, so no later trigger reads the answers it left on the wire."""
    now = datetime.now(UTC)
    pg_store.start(NewInstance("bench_service", "rt-int", {}), now=now)
    [job] = pg_store.queries.holds("rt-int")["deadlines"]
    trigger = JobCompleted(wait_id=job["wait_id"], variables={})
    invalidated: list[object] = []
    event.listen(pg_store.engine, "invalidate", lambda *a: invalidated.append(a))
    execute = psycopg.Cursor.execute

    def interrupted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        result = execute(self, query, *args, **kwargs)
        if str(query).startswith("WITH"):
            raise RuntimeError("the soft time limit, mid-pipeline")
        return result

    monkeypatch.setattr(psycopg.Cursor, "execute", interrupted)
    with pytest.raises(RuntimeError, match="mid-pipeline"):
        pg_store.apply("rt-int", trigger, now, trigger_id="rt-int:j")
    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    assert len(invalidated) == 1
    assert pg_store.queries.instance("rt-int").status == "active"  # nothing of it committed
    done = pg_store.apply("rt-int", trigger, now, trigger_id="rt-int:j")
    assert done.changed and done.status == "completed"


def test_a_write_built_for_one_flush_commits_as_ever_and_is_not_compiled_per_object(
    pg_store: Store,
) -> None:
    """Only a prebuilt statement (compiled once per object) rides with the COMMIT; one
    built for this flush alone runs through SQLAlchemy's own cache, and the block's end
    commits it."""
    from sqlalchemy import insert

    from dormant.persistence.tables import processed_triggers
    from dormant.persistence.writes import Writes

    before = round_trips._driven.cache_info().currsize
    with pg_store.transaction() as conn:
        writes = Writes(conn)
        writes.add(
            insert(processed_triggers).values(
                instance_id="rt-w", trigger_id="rt-w1", at=datetime.now(UTC)
            )
        )
        writes.flush(last=True)
    assert round_trips._driven.cache_info().currsize == before
    kept = _processed(pg_store, "rt-w")
    assert kept == 1


def test_a_start_whose_job_ran_first_is_a_read_then_one_round_trip(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The definition read in autocommit on the driver (``round_trips.reading``), then
    BEGIN, the one write statement and COMMIT together (Store._start_job_first)."""
    from sqlalchemy.engine import Connection

    from dormant.engine_core.effects import DispatchJob
    from dormant.persistence.store import JobRun

    class Runner:
        def may_run(self, job_type: str) -> bool:
            return True

        def __call__(self, job: DispatchJob) -> JobRun:
            return JobRun(JobCompleted(wait_id=job.wait_id, variables={}), now)

    now = datetime.now(UTC)
    pg_store.start(NewInstance("bench_service", "warm", {}), now=now)  # the model is loaded
    executed: list[str] = []
    execute = Connection.execute

    def counted(self: Connection, statement: Any, *args: Any, **kwargs: Any) -> Any:
        executed.append(str(statement).split()[0])
        return execute(self, statement, *args, **kwargs)

    monkeypatch.setattr(Connection, "execute", counted)
    sent = Sent(monkeypatch)
    done = pg_store.start(NewInstance("bench_service", "rt-first", {}), now=now, job_first=Runner())
    assert done.status == "completed"
    assert sent.outside == ["SELECT"]  # the definition, on its own
    assert sent.groups == [["BEGIN", "WITH", "COMMIT"]]
    assert executed == []  # neither through SQLAlchemy's execute


def _waiting_on_a_job(store: Store, *ids: str) -> dict[str, str]:
    """Start ``ids`` (one-job instances): each one's job wait id."""
    now = datetime.now(UTC)
    for instance_id in ids:
        store.start(NewInstance("bench_service", instance_id, {}), now=now)
    return {i: store.queries.holds(i)["deadlines"][0]["wait_id"] for i in ids}


def _completed(store: Store, instance_id: str, wait_id: str) -> Any:
    now = datetime.now(UTC)
    done = JobCompleted(wait_id=wait_id, variables={})
    return store.apply(instance_id, done, now, trigger_id=f"{instance_id}:j")


def test_a_trigger_in_a_batch_sends_its_savepoint_and_release_with_its_statements(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two round trips per trigger inside a batch too, not four
    (persistence/savepoints.py; round_trips ``savepoint``)."""
    waits = _waiting_on_a_job(pg_store, "rt-b0", "rt-b1")
    sent = Sent(monkeypatch)
    with savepoints.one_transaction(pg_store.engine):
        for instance_id, wait_id in waits.items():
            assert _completed(pg_store, instance_id, wait_id).status == "completed"
    assert sent.groups == [["SAVEPOINT", "SELECT"], ["WITH", "RELEASE"]] * 2
    assert sent.outside == []  # the batch's own BEGIN and COMMIT are the driver's


def test_a_trigger_that_fails_in_a_batch_rolls_back_its_savepoint_only(
    pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure in Python after the savepoint was sent (an unknown instance), and one
    the server answers inside the pipeline (a redelivered start meets its row): each
    is rolled back to its savepoint, and the triggers around them commit."""
    waits = _waiting_on_a_job(pg_store, "rt-f0", "rt-f1")
    sent = Sent(monkeypatch)
    with savepoints.one_transaction(pg_store.engine):
        assert _completed(pg_store, "rt-f0", waits["rt-f0"]).changed
        with pytest.raises(UnknownInstance):
            _completed(pg_store, "rt-nobody", "w-1")
        again = pg_store.start(NewInstance("bench_service", "rt-f0", {}), now=datetime.now(UTC))
        assert not again.changed
        assert _completed(pg_store, "rt-f1", waits["rt-f1"]).changed
    assert sent.outside.count("ROLLBACK") == 2, sent.outside
    statuses = {i: pg_store.queries.instance(i).status for i in waits}
    assert statuses == {i: "completed" for i in waits}


def test_a_savepoint_inside_a_trigger_s_savepoint_is_sqlalchemy_s_own(pg_store: Store) -> None:
    """A nested savepoint's last statement carries no RELEASE of the outer one: it rolls
    back alone, and the outer savepoint's statements before and after it commit."""
    engine = pg_store.engine
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE rt_nested (n int)"))
    insert = text("INSERT INTO rt_nested VALUES (:n)")
    try:
        with savepoints.one_transaction(engine) as conn:
            with round_trips.savepoint(conn):
                round_trips.first(conn, insert, {"n": 1})
                with pytest.raises(LookupError), round_trips.savepoint(conn):
                    round_trips.last(conn, insert, {"n": 2})
                    raise LookupError("the nested block fails")
                round_trips.last(conn, insert, {"n": 3})
        with engine.connect() as conn:
            kept = [n for (n,) in conn.execute(text("SELECT n FROM rt_nested ORDER BY n"))]
        assert kept == [1, 3]
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE rt_nested"))

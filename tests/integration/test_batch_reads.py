"""A trigger applied inside a batch (persistence/savepoints.py) sees what the triggers
before it in the same batch wrote, as it would had each committed on its own.

The routing of a keyed message start reads before it writes (is an instance with that
start key running?). Inside a batch those reads must see the batch's own uncommitted
rows: on a connection of their own they did not, so the second of two keyed starts in
one batch lost the unique-index race to its own batch, found no running instance to
join, and the message went nowhere (no instance, no ``DuplicateStart`` fact).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import select
from sqlalchemy.exc import ProgrammingError

from dormant.persistence import savepoints
from dormant.persistence.routing import Router
from dormant.persistence.settings import Settings
from dormant.persistence.store import Store
from dormant.persistence.tables import instances
from dormant.tasks.wire import redelivery
from tests.conftest import _truncate
from tests.integration.waitkit import end, message_start, model, start, user_task

pytestmark = pytest.mark.integration

NAME = "open-account"


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    _truncate(pg_url)
    store = Store(settings=Settings(database_url=pg_url, broker_url="memory://"))
    nodes = message_start("ms", NAME) + user_task("ut") + end()
    xml = model("keyed", nodes, [("ms", "ut"), ("ut", "end")], messages={NAME: "=acct"})
    store.deployments.deploy(xml, datetime.now(UTC))
    try:
        yield store
    finally:
        store.close()


def test_two_keyed_starts_in_one_batch_make_one_instance_and_one_join(pg_store: Store) -> None:
    router = Router(pg_store, redelivery)
    now = datetime.now(UTC)
    with savepoints.one_transaction(pg_store.engine):
        first, second = (
            router.message(NAME, "a-1", {"acct": "a-1"}, message_id=mid, ttl_seconds=None, now=now)
            for mid in ("m-1", "m-2")
        )
    assert first.started and not first.joined
    assert second.joined == first.started, (second.started, second.joined, second.failed)
    with pg_store.read() as conn:
        assert len(conn.execute(select(instances.c.id)).all()) == 1
    kinds = [f.kind for f in pg_store.queries.history(first.started[0])]
    assert kinds.count("DuplicateStart") == 1


def test_a_read_inside_a_batch_sees_the_batch_and_a_failed_read_spoils_nothing(
    pg_store: Store,
) -> None:
    router = Router(pg_store, redelivery)
    now = datetime.now(UTC)
    with savepoints.one_transaction(pg_store.engine):
        out = router.message(
            NAME, "b-1", {"acct": "b-1"}, message_id="m-3", ttl_seconds=None, now=now
        )
        with pytest.raises(ProgrammingError), pg_store.read() as conn:
            conn.exec_driver_sql("SELECT no_such_column FROM instances")
        with pg_store.read() as conn:
            assert conn.execute(select(instances.c.id)).scalars().all() == out.started
    with pg_store.read() as conn:
        assert conn.execute(select(instances.c.id)).scalars().all() == out.started


def test_a_batch_reads_a_process_s_latest_version_once_for_all_its_starts(
    pg_store: Store,
) -> None:
    """Its starts commit together, so one read of the latest version serves them all;
    outside a batch every start reads it again (a deploy in between is seen)."""
    from sqlalchemy import event

    from dormant.persistence.store import NewInstance

    xml = model("plain", start() + user_task("ut") + end(), [("start", "ut"), ("ut", "end")])
    now = datetime.now(UTC)
    pg_store.deployments.deploy(xml, now)
    lookups: list[str] = []

    def seen(conn: object, cursor: object, statement: str, *_: object) -> None:
        if "FROM definitions" in statement and "ORDER BY definitions.version DESC" in statement:
            lookups.append(statement)

    event.listen(pg_store.engine, "before_cursor_execute", seen)
    try:
        with savepoints.one_transaction(pg_store.engine):
            for n in range(3):
                pg_store.start(NewInstance("plain", f"batched-{n}", {}), now=now)
        assert len(lookups) == 1
        for n in range(2):
            pg_store.start(NewInstance("plain", f"alone-{n}", {}), now=now)
        assert len(lookups) == 3
    finally:
        event.remove(pg_store.engine, "before_cursor_execute", seen)
    with pg_store.read() as conn:
        assert len(conn.execute(select(instances.c.id)).all()) == 5

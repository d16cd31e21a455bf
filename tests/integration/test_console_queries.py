"""The console's lists on both backends: every filter, keyset pages, and the indexes used.

Instances are started and failed in-process through the Store (the real engine, the
real transaction), so a page of filters is checked against instances whose state the
test knows exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from dormant.engine_core.checkpoint import WaitKind
from dormant.engine_core.errors import InvalidOperation
from dormant.engine_core.triggers import JobCompleted, JobFailed
from dormant.persistence.console_queries import ConsoleQueries, IncidentFilter, InstanceFilter
from dormant.persistence.store import NewInstance
from tests.integration.console.kit import MODEL

pytestmark = pytest.mark.integration


def _job_wait(store: Any, iid: str) -> str:
    cp = store.queries.checkpoint(iid)
    return next(w.id for w in cp.waits.values() if w.kind is WaitKind.JOB)


@pytest.fixture
def world(store: Any, now: datetime) -> dict[str, Any]:
    return _world(store, now)


@pytest.fixture
def pg_store(pg_empty_database: Any) -> Iterator[Any]:
    from dormant.persistence import migrate
    from dormant.persistence.store import Store

    url = pg_empty_database()
    migrate.upgrade(url)
    s = Store(url)
    yield s
    s.close()


def _world(store: Any, now: datetime) -> dict[str, Any]:
    """30 instances, one second apart: 0-9 fail at 'charge' (an open incident), 10-19
    wait at 'paid' for their message, 20-29 still wait for their job at 'charge'."""
    store.deployments.deploy(MODEL.read_bytes(), now)
    ids = []
    for i in range(30):
        iid = f"inst-{i:02d}"
        at = now + timedelta(seconds=i)
        variables: dict[str, Any] = {"flag": "/nonexistent"}
        if 10 <= i < 20:
            variables["order"] = f"o-{i}"
        store.start(NewInstance("payment", iid, variables, business_key=f"bk-{i % 3}"), now=at)
        if i < 10:
            store.apply(iid, JobFailed(wait_id=_job_wait(store, iid), error="boom"), at)
        elif i < 20:
            store.apply(iid, JobCompleted(wait_id=_job_wait(store, iid)), at)
        ids.append(iid)
    return {"ids": ids, "now": now, "q": ConsoleQueries(store.engine)}


def _all(q: ConsoleQueries, f: InstanceFilter, limit: int = 7) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = q.instance_page(f, cursor, limit=limit)
        seen += [r.id for r in page.rows]
        assert len(page.rows) <= limit
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


def test_instance_pages_walk_every_instance_once_newest_first(world: dict[str, Any]) -> None:
    q = world["q"]
    assert _all(q, InstanceFilter()) == list(reversed(world["ids"]))
    assert _all(q, InstanceFilter(), limit=30) == list(reversed(world["ids"]))
    with pytest.raises(InvalidOperation, match="page cursor 'garbage' is not one this console"):
        q.instance_page(InstanceFilter(), "garbage")


def test_every_instance_filter(world: dict[str, Any]) -> None:
    q, ids, now = world["q"], world["ids"], world["now"]

    def newest_first(sel: list[str]) -> list[str]:
        return sorted(sel, reverse=True)

    assert _all(q, InstanceFilter(has_open_incident=True)) == newest_first(ids[:10])
    assert _all(q, InstanceFilter(status="active_incidents")) == newest_first(ids[:10])
    assert _all(q, InstanceFilter(status="active")) == newest_first(ids[10:])
    assert _all(q, InstanceFilter(waiting_at="paid")) == newest_first(ids[10:20])
    assert _all(q, InstanceFilter(waiting_at="charge")) == newest_first(ids[:10] + ids[20:])
    assert _all(q, InstanceFilter(waiting_at="done")) == []
    assert _all(q, InstanceFilter(business_key="bk-1")) == newest_first(ids[1::3])
    assert _all(q, InstanceFilter(key="payment", version=1)) == newest_first(ids)
    assert _all(q, InstanceFilter(version=2)) == []
    assert _all(q, InstanceFilter(key="other")) == []
    window = InstanceFilter(
        started_from=now + timedelta(seconds=5), started_to=now + timedelta(seconds=12)
    )
    assert _all(q, window) == newest_first(ids[5:12])
    both = InstanceFilter(has_open_incident=True, business_key="bk-0", waiting_at="charge")
    assert _all(q, both) == newest_first(ids[0:10:3])
    # The tenant (docs/tenants.md): every instance here is the default tenant's.
    assert _all(q, InstanceFilter(tenant="<default>")) == newest_first(ids)
    assert _all(q, InstanceFilter(tenant="acme")) == []


def test_incident_pages_filters_and_process_summary(world: dict[str, Any]) -> None:
    q = world["q"]
    rows = []
    cursor = None
    while True:
        page = q.incident_page(IncidentFilter(state="unresolved"), cursor, limit=4)
        rows += page.rows
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert [r.instance_id for r in rows] == sorted(world["ids"][:10], reverse=True)
    assert {(r.node_id, r.state, r.cause_class) for r in rows} == {("charge", "open", "JobFailed")}
    assert len(q.incident_page(IncidentFilter(node_id="charge", cause_class="JobFailed")).rows)
    assert q.incident_page(IncidentFilter(cause_class="KeyError")).rows == []
    assert q.incident_page(IncidentFilter(state="resolved")).rows == []
    assert q.incident_page(IncidentFilter(tenant="acme")).rows == []
    assert {r.tenant_id for r in q.incident_page(IncidentFilter(tenant="<default>")).rows} == {
        "<default>"
    }
    assert q.cause_classes() == ["JobFailed"]

    [summary] = q.processes()
    assert (summary.key, summary.version) == ("payment", 1)
    assert summary.counts == {"active_incidents": 10, "active": 20}
    assert q.open_incidents_by_node() == {"payment": {"charge": 10}}
    assert q.definition_source("payment", 1) is not None
    assert q.definition_source("payment", 2) is None


def test_postgresql_answers_each_list_from_an_index(pg_store: Any, now: datetime) -> None:
    """With sequential scans priced out, each list query's plan is an index read: the
    migrations' indexes exist and the queries spell what they index (the GIN index
    over ``waiting_nodes`` answers the containment the query asks)."""
    world = _world(pg_store, now)
    cases = {
        "ix_instances_created_at_id": InstanceFilter(),
        "ix_instances_status_created_at_id": InstanceFilter(status="active"),
        "ix_instances_status_created_at_id ": InstanceFilter(has_open_incident=True),
        "ix_instances_key_version_created_at_id": InstanceFilter(key="payment", version=1),
        "ix_instances_business_key_created_at_id": InstanceFilter(business_key="bk-1"),
        "ix_instances_waiting_nodes": InstanceFilter(waiting_at="paid"),
    }
    q: ConsoleQueries = world["q"]
    for index, f in cases.items():
        plan = _plan(q, f)
        assert index.strip() in plan, f"{f} did not use {index}:\n{plan}"


def _plan(q: ConsoleQueries, f: InstanceFilter) -> str:
    sql = str(
        q.instance_query(f).compile(
            dialect=q.engine.dialect, compile_kwargs={"literal_binds": True}
        )
    )
    with q.engine.connect() as conn:
        conn.execute(text("SET enable_seqscan = off"))
        return "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql))

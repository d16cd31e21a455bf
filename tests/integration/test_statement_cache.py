"""Every statement of a trigger's transaction is compiled once per process, then cached.

Compiling SQL is Python work under the instance's row lock. A statement that
SQLAlchemy cannot cache (a multi-row VALUES list is one) is compiled anew at every
trigger; compiling the one write statement (persistence/writes.py) of each trigger was
about 1 ms of a 5 ms in-process message trigger before rows became cacheable. This pins
it on PostgreSQL, the production database: after one warm-up round of each path —
start, message, job result, a user task with candidate rows (several hold rows), its
completion — every statement of a second round is a cache hit. That includes the job
result's statement carrying the DELETE of the job rows published since the last write
(persistence/published_jobs.py): one row in the first round, two in the second, one
array parameter either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import default

from bench.models import MESSAGE, SERVICE
from dormant.engine_core.triggers import JobCompleted, TaskCompleted
from dormant.persistence import deployments, round_trips, routing, writes
from dormant.persistence import store as store_module
from dormant.persistence.routing import Router
from dormant.persistence.settings import Settings
from dormant.persistence.store import NewInstance, Store
from dormant.tasks.wire import redelivery
from tests.conftest import _truncate

pytestmark = pytest.mark.integration

TASKS = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
    'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">'
    '<bpmn:process id="cached_tasks" isExecutable="true"><bpmn:startEvent id="start"/>'
    '<bpmn:userTask id="review"><bpmn:extensionElements><zeebe:userTask/>'
    '<zeebe:assignmentDefinition candidateUsers="ann, bob" candidateGroups="ops, =team"/>'
    "</bpmn:extensionElements></bpmn:userTask>"
    '<bpmn:endEvent id="end"/>'
    '<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="review"/>'
    '<bpmn:sequenceFlow id="f2" sourceRef="review" targetRef="end"/>'
    "</bpmn:process></bpmn:definitions>"
)


@pytest.fixture
def pg_store(pg_url: str) -> Iterator[Store]:
    _truncate(pg_url)
    store = Store(settings=Settings(database_url=pg_url, broker_url="memory://"))
    try:
        yield store
    finally:
        store.close()


def _round(store: Store, router: Router, n: int, now: datetime) -> None:
    store.start(NewInstance("bench_message", f"m-{n}", {"orderId": f"m-{n}"}), now=now)
    router.message("bench-go", f"m-{n}", {}, message_id=f"msg-{n}", ttl_seconds=None, now=now)
    # Job rows published (as tasks/outbox.py does) before a write that carries their
    # DELETE: a start carries one, the first job's result n + 1 (1, then 2).
    rows = [
        store.start(NewInstance("bench_service", f"s-{n}-{k}", {"i": n}), now=now).outbox_ids[0]
        for k in range(n + 2)
    ]
    store.outbox.job_published(rows[0])
    store.start(NewInstance("bench_message", f"m-{n}-b", {"orderId": f"m-{n}-b"}), now=now)
    assert store.outbox.published_jobs.pending() == []  # the start's statement took it
    for row_id in rows[1:]:
        store.outbox.job_published(row_id)
    [job] = store.queries.holds(f"s-{n}-0")["deadlines"]
    store.apply(
        f"s-{n}-0", JobCompleted(wait_id=job["wait_id"], variables={}), now, trigger_id=f"s-{n}:j"
    )
    assert store.outbox.published_jobs.pending() == []  # the result's statement took them
    store.start(NewInstance("cached_tasks", f"t-{n}", {"team": ["x", "y"]}), now=now)
    [task] = store.queries.user_tasks(f"t-{n}")
    _, wait_id = store.queries.task(task.id)
    store.apply(f"t-{n}", TaskCompleted(wait_id=wait_id), now, trigger_id=f"t-{n}:done")


def test_a_second_round_of_triggers_compiles_nothing(pg_store: Store) -> None:
    now = datetime.now(UTC)
    for model in (MESSAGE, SERVICE, TASKS):
        pg_store.deployments.deploy(model, now)
    router = Router(pg_store, redelivery)
    pg_store.outbox.published_jobs.bound_seconds = 600  # no timer's delete in between
    _round(pg_store, router, 0, now)  # warm-up: each shape compiled once

    seen: list[tuple[Any, list[str]]] = []
    objects: list[Any] = []
    rewritten: list[list[str]] = []  # statements SQLAlchemy rewrites at each execution

    def record(_conn: Any, _cursor: Any, statement: str, _p: Any, context: Any, _m: Any) -> None:
        seen.append((getattr(context, "cache_hit", None), statement.split(None, 3)[:3]))
        compiled = getattr(context, "compiled", None)
        objects.append(getattr(compiled, "statement", None))
        if getattr(compiled, "post_compile_params", None):
            rewritten.append(statement.split(None, 3)[:3])

    event.listen(pg_store.engine, "before_cursor_execute", record)
    reused = writes._composite_of_prebuilt.cache_info().hits
    driven = round_trips._driven.cache_info()
    try:
        _round(pg_store, router, 1, now)
    finally:
        event.remove(pg_store.engine, "before_cursor_execute", record)
    compiled = [s for status, s in seen if status is not None]
    assert len(compiled) >= 4  # the round ran its other statements through the cache
    misses = [(status, s) for status, s in seen if status not in (None, default.CACHE_HIT)]
    assert misses == []
    # The statements that ride with BEGIN or COMMIT (persistence/round_trips.py) run on
    # the driver, compiled once per process and statement object: none compiled in
    # this round, so none was a new object either.
    after = round_trips._driven.cache_info()
    assert after.misses == driven.misses
    assert after.hits - driven.hits >= 12
    # No write's statement has an expanding IN (hold rows' and published jobs' DELETEs
    # take one array parameter): its string would be rewritten at every trigger.
    assert [s for s in rewritten if s[0] in ("WITH", "DELETE", "UPDATE", "INSERT")] == []
    assert [s[0] for _, s in seen].count("WITH") >= 4  # the writes went as one statement each
    # The lock and the message's first statement (its lookup and lock in one) are built
    # once per process, not per trigger (their construction and cache key were a tenth
    # of a message trigger's time); so is a start's definition lookup
    # (persistence/deployments.py): six starts a round.
    assert sum(s[:1] == ["SELECT"] for _, s in seen) >= 6 + 1 + 2
    for prebuilt in (
        store_module._LOCK[True],
        routing._FIRST_DELIVERY[True],
        deployments._LATEST_DEFINITION,
    ):
        assert round_trips._driven(prebuilt, pg_store.engine.dialect) is not None
    # Writes of prebuilt statements only (the starts, the message, the job's result, the
    # task's completion) reuse their composite statement: nothing of it built again.
    assert writes._composite_of_prebuilt.cache_info().hits - reused >= 6


def test_a_message_with_one_holder_is_two_statements_in_one_transaction(
    pg_store: Store,
) -> None:
    """The duplicate check and the holders lookup ride the lock (``Router._deliver_first``):
    no read before the write transaction, whose statements are that one and the one
    write statement (with BEGIN and COMMIT, two round trips: test_round_trips.py)."""
    now = datetime.now(UTC)
    pg_store.deployments.deploy(MESSAGE, now)
    router = Router(pg_store, redelivery)
    for n in (0, 1):
        pg_store.start(NewInstance("bench_message", f"one-{n}", {"orderId": f"one-{n}"}), now=now)
    router.message("bench-go", "one-0", {}, message_id="one-0", ttl_seconds=None, now=now)

    statements: list[tuple[str, bool]] = []
    commits: list[int] = []

    def record(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        in_write_transaction = bool(conn.info.get(round_trips._LATE))
        statements.append((statement.split(None, 1)[0], in_write_transaction))

    def committed(_conn: Any) -> None:
        commits.append(1)

    event.listen(pg_store.engine, "before_cursor_execute", record)
    event.listen(pg_store.engine, "commit", committed)
    try:
        out = router.message("bench-go", "one-1", {}, message_id="one-1", ttl_seconds=None, now=now)
    finally:
        event.remove(pg_store.engine, "before_cursor_execute", record)
        event.remove(pg_store.engine, "commit", committed)
    assert out.delivered_to == ["one-1"] and out.recorded
    assert statements == [("SELECT", True), ("WITH", True)]  # lookup + lock, the write
    assert len(commits) == 1


@pytest.mark.parametrize("keyed", [True, False])
def test_the_message_lookup_is_served_by_the_subscriptions_index(
    pg_store: Store, keyed: bool
) -> None:
    """``IS NOT DISTINCT FROM`` is never served by an index: a message's lookup written
    so scanned every subscription at every message. With sequential scans priced out,
    the plan of the message's first statement finds subscriptions by (kind, name, key,
    tenant) in ix_subscriptions_kind_name_key_tenant, for a correlation key and for none."""
    compiled = routing._FIRST_DELIVERY[keyed].compile(dialect=pg_store.engine.dialect)
    given = {"message_id": "m", "name": "n", "tenant": "t", **({"key": "k"} if keyed else {})}
    with pg_store.engine.begin() as conn:
        conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        plan = "\n".join(
            row[0]
            for row in conn.exec_driver_sql(
                "EXPLAIN " + compiled.string, compiled.construct_params(given)
            )
        )
    assert "Seq Scan on subscriptions" not in plan, plan
    # The key is in the index condition, not a filter over every (kind, name) match.
    conditions = [line for line in plan.splitlines() if "Index Cond" in line]
    assert any("correlation_key" in line for line in conditions), plan
    assert any("tenant_id" in line for line in conditions), plan

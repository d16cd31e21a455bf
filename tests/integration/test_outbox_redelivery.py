"""A follow-up trigger the broker loses after it was published is published again.

The engine's own triggers (a call activity's child start, the child's answer to its
parent, thrown messages and signals, buffered deliveries) stay in the outbox, stamped
published, until their consumer applied them; beat's sweep publishes one again when it
was not consumed in time. Here the broker loses the child's start (its queue is
wiped, as a Redis restart without persistence would), and the parent still completes.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import func, select

from dormant.persistence import clock
from dormant.persistence.settings import Settings
from dormant.persistence.store import NewInstance
from dormant.persistence.tables import outbox
from tests.integration.conftest import Stack

HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?><bpmn:definitions '
    'xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
    'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">'
)
MODELS = (
    f'{HEAD}<bpmn:process id="child" isExecutable="true"><bpmn:startEvent id="cs"/>'
    '<bpmn:scriptTask id="work"><bpmn:extensionElements>'
    '<zeebe:script expression="=n * 2" resultVariable="doubled"/></bpmn:extensionElements>'
    '</bpmn:scriptTask><bpmn:endEvent id="ce"/>'
    '<bpmn:sequenceFlow id="c1" sourceRef="cs" targetRef="work"/>'
    '<bpmn:sequenceFlow id="c2" sourceRef="work" targetRef="ce"/></bpmn:process>'
    '<bpmn:process id="parent" isExecutable="true"><bpmn:startEvent id="ps"/>'
    '<bpmn:callActivity id="call"><bpmn:extensionElements>'
    '<zeebe:calledElement processId="child"/></bpmn:extensionElements></bpmn:callActivity>'
    '<bpmn:endEvent id="pe"/>'
    '<bpmn:sequenceFlow id="p1" sourceRef="ps" targetRef="call"/>'
    '<bpmn:sequenceFlow id="p2" sourceRef="call" targetRef="pe"/></bpmn:process>'
    "</bpmn:definitions>"
)


def _lose_everything_queued(stack: Stack) -> None:
    """What a broker restart without persistence does to queued messages."""
    if stack.kind == "pg_redis":
        from tests.redis_lock import flush_borrowed

        assert flush_borrowed(stack.broker_url), "the test's Redis db lock is gone"
        return
    import sqlalchemy

    engine = sqlalchemy.create_engine(stack.broker_url.removeprefix("sqla+"))
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text("DELETE FROM kombu_message"))
    engine.dispose()


def test_a_follow_up_lost_by_the_broker_is_published_again(bare_stack: Stack) -> None:
    from dormant.tasks import app as app_module
    from dormant.tasks.outbox import publish_ids

    s = bare_stack
    s.env["DORMANT_OUTBOX_REDELIVER_AFTER_SECONDS"] = "2"
    s.client.deploy(MODELS)
    store: Any = s.client._store
    app_module.configure(Settings.from_env(database_url=s.database_url, broker_url=s.broker_url))
    try:
        started = store.start(NewInstance("parent", "p-1", {"n": 21}), now=clock.now())
        assert publish_ids(started.outbox_ids) == 1  # the child's start is on the broker...
    finally:
        app_module.configure(Settings.from_env())
    _lose_everything_queued(s)  # ...and the broker loses it
    with store.engine.connect() as conn:
        kept = conn.execute(select(func.count()).select_from(outbox)).scalar_one()
    assert kept == 1, "a published follow-up stays in the outbox until consumed"

    s.worker_and_beat()
    done = s.wait_status("p-1", "completed", timeout=40)
    assert done.variables["doubled"] == 42
    # The consumer acknowledges a follow-up after its own commit, so the parent may
    # show completed a moment before the last row is acknowledged: wait for it.
    left = -1
    give_up = time.monotonic() + 20
    while left != 0 and time.monotonic() < give_up:
        with store.engine.connect() as conn:
            left = conn.execute(select(func.count()).select_from(outbox)).scalar_one()
        time.sleep(0.2)
    assert left == 0, "every consumed follow-up acknowledged its row"


def test_a_published_follow_up_is_kept_until_its_own_consumer_acknowledges_it(
    store: Any, now: Any
) -> None:
    from datetime import timedelta

    store.deployments.deploy(MODELS, now)
    (row_id,) = store.start(NewInstance("parent", "p-2", {"n": 1}), now=now).outbox_ids
    (row,) = store.outbox.outbox_rows([row_id])
    store.outbox.mark_published(row_id, until_consumed=True)
    assert store.outbox.pending_outbox(0, now=now) == []  # published: not the sweeper's, yet
    later = clock.now() + timedelta(seconds=61)
    redo = store.outbox.pending_outbox(0, now=later, redeliver_after_seconds=60)
    assert [r.id for r in redo] == [row_id]  # not consumed in time: published again
    store.outbox.consume_outbox(row_id, "someone-else's-trigger")  # a reused id, another row
    assert store.outbox.outbox_rows([row_id]) != []
    store.outbox.consume_outbox(row_id, row.payload["trigger_id"])
    assert store.outbox.outbox_rows([row_id]) == []

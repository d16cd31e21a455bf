"""Tenants on real workers (PostgreSQL + Redis): a tenant's producer cannot reach another
tenant's instances (start, message, signal, task completion), a plain Celery producer
without a tenant is the default tenant's, a called process runs in its parent's
tenant, and a tenant's jobs are served from its own queue by ``dormant worker
--tenants`` (docs/tenants.md).

Every negative check is ordered, never slept on: the other tenant's instance is started
first, so it is the oldest holder, the one a message or signal would reach first were
the tenant not part of the lookup (persistence/routing.py ``HOLDER_ORDER``).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery

from dormant.engine_core.errors import InvalidModel, UnknownProcess, UnknownTask
from tests.integration.conftest import Stack, running_stack, wait_for
from tests.integration.test_breadth import call_parent, job
from tests.integration.waitkit import (
    end,
    message_catch,
    message_start,
    model,
    signal_catch,
    start,
    user_task,
)

pytestmark = pytest.mark.integration

ACME = "acme"


@pytest.fixture(scope="module")
def tenant_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """A worker and a beat (no ``--tenants``: the default tenant's jobs and every
    trigger), and a job worker for tenant ``acme`` alone."""
    with running_stack("pg_redis", "tenants", request, tmp_path_factory) as s:
        s.worker("acme-jobs", 1, tenants=ACME)
        yield s


def acme_client(stack: Stack) -> Any:
    from dormant.tasks.client import Client

    return Client(stack.database_url, stack.broker_url, tenant=ACME)


def plain_send(stack: Stack, task: str, **kwargs: Any) -> None:
    """What a producer with only Celery sends: no tenant field."""
    Celery(broker=stack.broker_url).send_task(task, kwargs=kwargs)


def waiting_for(stack: Stack, iid: str, kind: str) -> Any:
    return wait_for(
        lambda: any(w.kind == kind for w in stack.client.instance(iid).waits),
        what=f"instance {iid} to wait for a {kind}",
    )


def kept(stack: Stack, iid: str) -> Any:
    return wait_for(
        lambda: stack.client.failed_triggers(iid), what=f"a failed trigger kept for {iid}"
    )[0]


def flow(key: str, *, with_job: bool) -> str:
    nodes = [start("s"), message_catch("paid", "tn-paid"), signal_catch("go", "tn-go")]
    nodes.append(user_task("review", "Review"))
    steps = ["s", "paid", "go", "review"]
    if with_job:
        nodes.append(job("work", "test-tenant"))
        steps.append("work")
    nodes.append(end("e"))
    steps.append("e")
    return model(
        key,
        "".join(nodes),
        list(itertools.pairwise(steps)),
        messages={"tn-paid": "=orderId"},
        signals=["tn-go"],
    )


def test_a_start_reaches_only_the_producers_tenant(tenant_stack: Stack) -> None:
    stack, home, acme = tenant_stack, tenant_stack.client, acme_client(tenant_stack)
    acme.deploy(flow("tn-start", with_job=False))
    with pytest.raises(UnknownProcess, match="for tenant '<default>'"):
        home.start("tn-start")
    with pytest.raises(InvalidModel, match="another tenant"):
        home.deploy(flow("tn-start", with_job=False))
    # A plain Celery producer names no tenant: the default tenant's, refused on the
    # worker and kept for an operator; no instance is made.
    iid = uuid.uuid4().hex
    plain_send(stack, "dormant.start", key="tn-start", instance_id=iid, variables={})
    assert kept(stack, iid).error_class == "UnknownProcess"
    assert home.instances(key="tn-start") == []
    # A start with the tenant on the wire is acme's.
    theirs = uuid.uuid4().hex
    plain_send(
        stack,
        "dormant.start",
        key="tn-start",
        instance_id=theirs,
        variables={"orderId": "o-9"},
        tenant=ACME,
    )
    assert waiting_for(stack, theirs, "message")
    assert acme.instance(theirs).tenant == ACME


def test_messages_signals_and_tasks_stay_in_their_tenant(tenant_stack: Stack) -> None:
    stack, home, acme = tenant_stack, tenant_stack.client, acme_client(tenant_stack)
    acme.deploy(flow("tn-acme", with_job=True))
    home.deploy(flow("tn-home", with_job=False))
    theirs = acme.start("tn-acme", {"orderId": "o-1"})
    waiting_for(stack, theirs, "message")  # the older holder of the two
    ours = home.start("tn-home", {"orderId": "o-1"})
    waiting_for(stack, ours, "message")

    # A message of the default tenant (the plain producer's wire: no tenant field).
    plain_send(stack, "dormant.message", name="tn-paid", correlation_key="o-1")
    waiting_for(stack, ours, "signal")
    assert waiting_for(stack, theirs, "message")
    assert acme.send_message("tn-paid", "o-1", receipt=20).correlations == 1
    waiting_for(stack, theirs, "signal")

    home.signal("tn-go")
    waiting_for(stack, ours, "user_task")
    assert any(w.kind == "signal" for w in home.instance(theirs).waits)
    acme.signal("tn-go")
    waiting_for(stack, theirs, "user_task")

    (task,) = acme.user_tasks()
    assert task.instance_id == theirs and task.tenant == ACME
    assert [t.instance_id for t in home.user_tasks(tenant=ACME)] == [theirs]
    with pytest.raises(UnknownTask, match="for tenant '<default>'"):
        home.complete_task(task.id)
    with pytest.raises(UnknownTask):
        acme.user_task(home.user_tasks(tenant="<default>", instance_id=ours)[0].id)
    plain_send(stack, "dormant.complete_task", task_id=task.id, variables={})
    assert kept(stack, theirs).error_class == "UnknownTask"
    assert acme.user_tasks()[0].id == task.id  # still open

    acme.complete_task(task.id)
    done = stack.wait_status(theirs, "completed")
    # Its job was served from acme's own queue by the --tenants worker.
    assert done.variables["served_tenant"] == ACME
    assert done.variables["served_key"] == "tenant.jobs"
    assert done.tenant == ACME
    assert {i.id for i in home.instances(tenant=ACME)} >= {theirs}
    assert ours not in {i.id for i in home.instances(tenant=ACME)}


def test_message_starts_and_called_processes_stay_in_their_tenant(tenant_stack: Stack) -> None:
    stack, home, acme = tenant_stack, tenant_stack.client, acme_client(tenant_stack)
    begin = message_start("s", "tn-begin") + end("e")
    acme.deploy(model("tn-begin", begin, [("s", "e")], messages={"tn-begin": None}))
    assert home.send_message("tn-begin", receipt=20).outcome == "dropped"
    assert acme.instances(key="tn-begin") == []
    assert acme.send_message("tn-begin", receipt=20).correlations == 1
    (begun,) = acme.instances(key="tn-begin")
    assert begun.tenant == ACME

    acme.deploy(model("tn-child", start("s") + end("e"), [("s", "e")]))
    acme.deploy(call_parent("tn-parent", "tn-child"))
    parent = acme.start("tn-parent")
    stack.wait_status(parent, "completed")
    (child,) = acme.instances(key="tn-child")
    assert child.tenant == ACME
    # A process of another tenant is not one acme's call activity can start.
    home.deploy(model("tn-home-child", start("s") + end("e"), [("s", "e")]))
    acme.deploy(call_parent("tn-xparent", "tn-home-child"))
    caller = acme.start("tn-xparent")
    (incident,) = stack.wait_status(caller, "active_incidents").incidents
    assert incident.cause_class == "UnknownProcess" and "tenant 'acme'" in incident.cause
    assert home.instances(key="tn-home-child") == []


def test_an_api_activation_takes_its_tenants_jobs_only(tenant_stack: Stack) -> None:
    """The REST API's jobs (``"api": true`` types) carry their tenant; an activation
    with ``tenantIds`` hands out those tenants' jobs alone (persistence/api_keys.py)."""
    from dormant.persistence import api_keys, clock

    engine, now = tenant_stack.client._store.engine, clock.now()
    job = {"job_type": "tn-api", "wait_id": "w1", "node_id": "n", "attempt": 1}
    api_keys.offer(
        engine,
        idempotency_key="tn-api:i1:w1:1",
        instance_id="tn-api-i1",
        variables={},
        headers={},
        now=now,
        tenant=ACME,
        **job,
    )
    a_minute = timedelta(minutes=1)
    assert api_keys.activate(engine, "tn-api", "w", a_minute, 10, now, ["<default>"]) == []
    (taken,) = api_keys.activate(engine, "tn-api", "w", a_minute, 10, now, [ACME])
    assert taken.tenant == ACME and taken.instance_id == "tn-api-i1"


def test_open_incidents_are_counted_per_tenant(tenant_stack: Stack) -> None:
    """``dormant_tenant_incidents_open{tenant}`` (docs/metrics.md): an incident of an
    acme instance (no ``orderId`` for its correlation key) counts for acme."""
    from dormant.tasks.metrics import DatabaseCollector

    stack, acme = tenant_stack, acme_client(tenant_stack)
    acme.deploy(flow("tn-broken", with_job=False))
    stack.wait_status(acme.start("tn-broken"), "active_incidents")
    (gauge,) = [
        m
        for m in DatabaseCollector(stack.database_url).collect()
        if m.name == "dormant_tenant_incidents_open"
    ]
    counted = {s.labels["tenant"]: s.value for s in gauge.samples}
    assert counted.get(ACME, 0) >= 1
    assert counted.get("<default>", 0) == 0

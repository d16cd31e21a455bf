"""The Store with the real step function and real BPMN, on PostgreSQL and SQLite.

What is asserted is the shell's half: the hold rows follow the checkpoint the core
returns, through timers, messages (incl. the same name as a keyed start, docs/waits.md
Messages), user tasks and cancellation.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from dormant.engine_core.triggers import Cancel, TaskCompleted
from dormant.persistence.routing import Router
from dormant.persistence.store import NewInstance, Store
from dormant.scheduler import claim_due, fire
from dormant.tasks.wire import redelivery

NS = (
    'xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
    'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t"'
)

TIMER_THEN_TASK = f"""<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions {NS}>
  <bpmn:process id="wait" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="t"/>
    <bpmn:intermediateCatchEvent id="t">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT1H</bpmn:timeDuration>
      </bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="t" targetRef="u"/>
    <bpmn:userTask id="u" name="Approve"/>
    <bpmn:sequenceFlow id="f3" sourceRef="u" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>
"""

# A keyed message start and a mid-flow catch on the SAME message name.
ORDER = f"""<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions {NS}>
  <bpmn:message id="m" name="order">
    <bpmn:extensionElements><zeebe:subscription correlationKey="=orderId"/>
    </bpmn:extensionElements>
  </bpmn:message>
  <bpmn:process id="order" isExecutable="true">
    <bpmn:startEvent id="ms"><bpmn:messageEventDefinition messageRef="m"/></bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="ms" targetRef="c"/>
    <bpmn:intermediateCatchEvent id="c"><bpmn:messageEventDefinition messageRef="m"/>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="c" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>
"""


def test_timer_then_user_task(store: Store, now: datetime) -> None:
    store.deployments.deploy(TIMER_THEN_TASK, now)
    a = store.start(NewInstance("wait", "i1", {"x": 1}), now=now)
    assert a.status == "active"
    [dl] = store.queries.holds("i1")["deadlines"]
    assert dl["due_at"] == now + timedelta(hours=1)
    later = now + timedelta(hours=1)
    [claim] = claim_due(store, later)
    assert fire(store, "i1", claim.wait_id, claim.claim_token, later).status == "fired"
    assert store.queries.holds("i1")["deadlines"] == []
    [task] = store.queries.user_tasks("i1")
    instance_id, wait_id = store.queries.task(task.id)
    store.apply(instance_id, TaskCompleted(wait_id=wait_id, variables={"ok": True}), later)
    view = store.queries.instance("i1")
    assert view.status == "completed" and view.variables == {"x": 1, "ok": True}
    c = store.queries.counts()
    assert (c["deadlines"], c["subscriptions"], c["user_tasks"]) == (0, 0, 0)


def test_cancel_withdraws_every_hold(store: Store, now: datetime) -> None:
    store.deployments.deploy(TIMER_THEN_TASK, now)
    store.start(NewInstance("wait", "i1", {}), now=now)
    store.apply("i1", Cancel(), now)
    assert store.queries.instance("i1").status == "terminated"
    assert store.queries.counts()["deadlines"] == 0


def test_same_message_name_starts_and_wakes(store: Store, now: datetime) -> None:
    """docs/waits.md (Messages): key K wakes the waiting instance (no second one); K2 starts one."""
    store.deployments.deploy(ORDER, now)
    router = Router(store, redelivery)
    first = router.message(
        "order", "K", {"orderId": "K"}, message_id="1", ttl_seconds=None, now=now
    )
    [iid] = first.started
    assert [s["correlation_key"] for s in store.queries.holds(iid)["subscriptions"]] == ["K"]
    wake = router.message("order", "K", {}, message_id="2", ttl_seconds=None, now=now)
    assert (wake.delivered_to, wake.started) == ([iid], [])
    assert store.queries.instance(iid).status == "completed"
    other = router.message(
        "order", "K2", {"orderId": "K2"}, message_id="3", ttl_seconds=None, now=now
    )
    assert len(other.started) == 1
    assert len(store.queries.instances(key="order")) == 2

"""A cron timer start (Zeebe's six-field form) through the real worker and beat.

On the embedded default (SQLite + the server-less broker): deploy a process whose start
event's ``timeCycle`` is ``*/2 * * * * *`` (every two seconds, seconds first, as Spring
and Zeebe write it); beat's deadline scan fires it, the worker starts instances, and the
start timer row stays armed on the rule's calendar: every due time it records is a whole
even second, which an interval counted from the deploy would not keep.
"""

from __future__ import annotations

from datetime import UTC

import pytest
from sqlalchemy import create_engine, select

from dormant.persistence.tables import start_timers
from tests.integration.conftest import Stack, wait_for

CRON = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d"
    targetNamespace="t">
  <bpmn:process id="cron_tick" isExecutable="true">
    <bpmn:startEvent id="ts">
      <bpmn:timerEventDefinition><bpmn:timeCycle>*/2 * * * * *</bpmn:timeCycle>
      </bpmn:timerEventDefinition>
    </bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="ts" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>
"""


def due_times(stack: Stack) -> list[object]:
    engine = create_engine(stack.database_url)
    try:
        with engine.connect() as conn:
            return [r.due_at for r in conn.execute(select(start_timers.c.due_at))]
    finally:
        engine.dispose()


@pytest.mark.parametrize("stack_urls", ["embedded"], indirect=True)
def test_cron_timer_start_fires_on_its_calendar(stack: Stack) -> None:
    c = stack.client
    c.deploy(CRON)
    [first] = due_times(stack)
    seen = {first}
    started = wait_for(
        lambda: len(c.instances(key="cron_tick")) >= 3 and c.instances(key="cron_tick"),
        timeout=30,
        what="three instances started by the cron timer",
    )
    assert {i.status for i in started} <= {"completed", "active"}
    wait_for(lambda: all(i.status == "completed" for i in c.instances(key="cron_tick")))
    seen.update(due_times(stack))
    assert len(seen) >= 2, "the row moved on to later due times"
    for due in seen:
        moment = due.replace(tzinfo=UTC) if due.tzinfo is None else due  # type: ignore[attr-defined]
        assert moment.microsecond == 0 and moment.second % 2 == 0, f"off the calendar: {due}"

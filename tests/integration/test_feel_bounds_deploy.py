"""A hostile timer start expression is refused at deploy, on the embedded default.

A timer start's expression is evaluated while the deploy runs (its first due time is
computed then): without FEEL's bounds this one would build a billion-item list inside
the deploy, holding the embedded database locked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dormant.engine_core.errors import InvalidModel

EXPRESSION = '="PT" + string(count(for x in 1..1000000000 return x)) + "S"'
HOSTILE = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d"
    targetNamespace="t">
  <bpmn:process id="hostile" isExecutable="true">
    <bpmn:startEvent id="ts">
      <bpmn:timerEventDefinition>
        <bpmn:timeDuration>EXPRESSION</bpmn:timeDuration>
      </bpmn:timerEventDefinition>
    </bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="ts" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>
""".replace("EXPRESSION", EXPRESSION)


def test_hostile_timer_start_expression_is_refused_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DORMANT_DATABASE_URL", raising=False)
    monkeypatch.delenv("DORMANT_BROKER_URL", raising=False)
    from dormant.tasks.client import Client

    client = Client()  # the embedded default: a SQLite file in the working directory
    with pytest.raises(InvalidModel) as info:
        client.deploy(HOSTILE)
    message = str(info.value)
    assert "\n" not in message
    assert "'ts'" in message and "over the limit of 100,000" in message
    assert client.instances(key="hostile") == []
    # The refusal left nothing armed: a benign version of the same key deploys fine.
    benign = HOSTILE.replace('="PT" + string(count(for x in 1..1000000000 return x)) + "S"', "PT1H")
    assert client.deploy(benign).version == 1

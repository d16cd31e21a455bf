"""The BPMN models the benchmarks run, written once and loaded by dormant AND SpiffWorkflow.

Expressions are written so both engines read them: dormant reads FEEL (a leading ``=``
makes an expression), SpiffWorkflow evaluates Python. ``bench_step`` gives Spiff a
script engine that drops the leading ``=`` so ``=again`` (a boolean variable) and
``="PT1H"`` (a string literal) mean the same thing to both.
"""

from __future__ import annotations

_HEAD = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
                  xmlns:zeebe="http://camunda.org/schema/zeebe/1.0"
                  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
                  id="bench-definitions" targetNamespace="http://dormant.dev/bench">
"""

# start -> user task -> service task -> timer (1 h) -> end
LINEAR = (
    _HEAD
    + """  <bpmn:process id="bench_linear" name="Bench linear" isExecutable="true">
    <bpmn:startEvent id="start"><bpmn:outgoing>f1</bpmn:outgoing></bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="review" />
    <bpmn:userTask id="review" name="Review">
      <bpmn:incoming>f1</bpmn:incoming><bpmn:outgoing>f2</bpmn:outgoing>
    </bpmn:userTask>
    <bpmn:sequenceFlow id="f2" sourceRef="review" targetRef="charge" />
    <bpmn:serviceTask id="charge" name="Charge">
      <bpmn:extensionElements><zeebe:taskDefinition type="bench-charge" /></bpmn:extensionElements>
      <bpmn:incoming>f2</bpmn:incoming><bpmn:outgoing>f3</bpmn:outgoing>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f3" sourceRef="charge" targetRef="cool" />
    <bpmn:intermediateCatchEvent id="cool" name="Cool off">
      <bpmn:incoming>f3</bpmn:incoming><bpmn:outgoing>f4</bpmn:outgoing>
      <bpmn:timerEventDefinition id="cool-timer">
        <bpmn:timeDuration xsi:type="bpmn:tFormalExpression">="PT1H"</bpmn:timeDuration>
      </bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f4" sourceRef="cool" targetRef="end" />
    <bpmn:endEvent id="end"><bpmn:incoming>f4</bpmn:incoming></bpmn:endEvent>
  </bpmn:process>
</bpmn:definitions>
"""
)

# start -> merge -> user task "work" -> xor: again -> merge | default -> end
LOOP = (
    _HEAD
    + """  <bpmn:process id="bench_loop" name="Bench loop" isExecutable="true">
    <bpmn:startEvent id="start"><bpmn:outgoing>f1</bpmn:outgoing></bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="merge" />
    <bpmn:exclusiveGateway id="merge">
      <bpmn:incoming>f1</bpmn:incoming><bpmn:incoming>f_again</bpmn:incoming>
      <bpmn:outgoing>f2</bpmn:outgoing>
    </bpmn:exclusiveGateway>
    <bpmn:sequenceFlow id="f2" sourceRef="merge" targetRef="work" />
    <bpmn:userTask id="work" name="Work">
      <bpmn:incoming>f2</bpmn:incoming><bpmn:outgoing>f3</bpmn:outgoing>
    </bpmn:userTask>
    <bpmn:sequenceFlow id="f3" sourceRef="work" targetRef="again" />
    <bpmn:exclusiveGateway id="again" default="f_done">
      <bpmn:incoming>f3</bpmn:incoming>
      <bpmn:outgoing>f_again</bpmn:outgoing><bpmn:outgoing>f_done</bpmn:outgoing>
    </bpmn:exclusiveGateway>
    <bpmn:sequenceFlow id="f_again" sourceRef="again" targetRef="merge">
      <bpmn:conditionExpression xsi:type="bpmn:tFormalExpression">=again</bpmn:conditionExpression>
    </bpmn:sequenceFlow>
    <bpmn:sequenceFlow id="f_done" sourceRef="again" targetRef="end" />
    <bpmn:endEvent id="end"><bpmn:incoming>f_done</bpmn:incoming></bpmn:endEvent>
  </bpmn:process>
</bpmn:definitions>
"""
)

# start -> message catch "bench-go" (key = orderId) -> end   (bench_triggers, bench_flat)
MESSAGE = (
    _HEAD
    + """  <bpmn:process id="bench_message" name="Bench message" isExecutable="true">
    <bpmn:startEvent id="start"><bpmn:outgoing>f1</bpmn:outgoing></bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait" />
    <bpmn:intermediateCatchEvent id="wait" name="Go">
      <bpmn:incoming>f1</bpmn:incoming><bpmn:outgoing>f2</bpmn:outgoing>
      <bpmn:messageEventDefinition id="wait-def" messageRef="msg-go" />
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end" />
    <bpmn:endEvent id="end"><bpmn:incoming>f2</bpmn:incoming></bpmn:endEvent>
  </bpmn:process>
  <bpmn:message id="msg-go" name="bench-go">
    <bpmn:extensionElements><zeebe:subscription correlationKey="=orderId" /></bpmn:extensionElements>
  </bpmn:message>
</bpmn:definitions>
"""
)

# start -> service task (job "bench-noop-job") -> end   (completed instances/s)
SERVICE = (
    _HEAD
    + """  <bpmn:process id="bench_service" name="Bench service" isExecutable="true">
    <bpmn:startEvent id="start"><bpmn:outgoing>f1</bpmn:outgoing></bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="job" />
    <bpmn:serviceTask id="job" name="Job">
      <bpmn:extensionElements><zeebe:taskDefinition type="bench-noop-job" /></bpmn:extensionElements>
      <bpmn:incoming>f1</bpmn:incoming><bpmn:outgoing>f2</bpmn:outgoing>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="job" targetRef="end" />
    <bpmn:endEvent id="end"><bpmn:incoming>f2</bpmn:incoming></bpmn:endEvent>
  </bpmn:process>
</bpmn:definitions>
"""
)

# The same with the job "bench-eager-job", which the bench's workers run in place
# (DORMANT_JOB_TYPES marks it eager: bench/harness.py): one Celery task per instance.
SERVICE_EAGER = SERVICE.replace(
    'id="bench_service" name="Bench service"',
    'id="bench_service_eager" name="Bench service, eager job"',
).replace("bench-noop-job", "bench-eager-job")

# start -> timer (due far in the future: waits, never fires) -> end   (bench_flat memory)
TIMER = (
    _HEAD
    + """  <bpmn:process id="bench_timer" name="Bench timer" isExecutable="true">
    <bpmn:startEvent id="start"><bpmn:outgoing>f1</bpmn:outgoing></bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait" />
    <bpmn:intermediateCatchEvent id="wait">
      <bpmn:incoming>f1</bpmn:incoming><bpmn:outgoing>f2</bpmn:outgoing>
      <bpmn:timerEventDefinition id="wait-timer">
        <bpmn:timeDuration xsi:type="bpmn:tFormalExpression">="P30D"</bpmn:timeDuration>
      </bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end" />
    <bpmn:endEvent id="end"><bpmn:incoming>f2</bpmn:incoming></bpmn:endEvent>
  </bpmn:process>
</bpmn:definitions>
"""
)

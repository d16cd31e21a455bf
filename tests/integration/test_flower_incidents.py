"""Flower's task list shows a trigger that raised an incident as such: the trigger task's
result starts with ``INCIDENT`` and names the incident (docs/incidents.md). A real
``dormant worker --events`` and Flower on PostgreSQL + Redis, read through Flower's API."""

from __future__ import annotations

import json
import sys
import urllib.request
from base64 import b64encode
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Proc, Stack, _urls, wait_for
from tests.integration.test_metrics import _free_port
from tests.integration.test_tasks import HEAD

pytestmark = pytest.mark.integration

NO_FLOW = (
    f'{HEAD}<bpmn:process id="fl-gate" isExecutable="true"><bpmn:startEvent id="start"/>'
    '<bpmn:exclusiveGateway id="gate"/><bpmn:endEvent id="end"/>'
    '<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="gate"/>'
    '<bpmn:sequenceFlow id="f2" sourceRef="gate" targetRef="end">'
    '<bpmn:conditionExpression xsi:type="bpmn:tFormalExpression">=go</bpmn:conditionExpression>'
    "</bpmn:sequenceFlow></bpmn:process></bpmn:definitions>"
)


def _get(url: str) -> Any:
    request = urllib.request.Request(url)
    request.add_header("Authorization", "Basic " + b64encode(b"ops:secret").decode())
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_flower_lists_the_trigger_that_raised_an_incident_as_incident(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with _urls("pg_redis", tmp_path, request) as urls:
        stack = Stack(*urls, tmp_path)
        try:
            worker = Proc(
                "worker-events",
                stack.dormant("worker", "--events", "--concurrency", "1"),
                stack.env,
                tmp_path,
            )
            stack.procs.append(worker)
            port = _free_port()
            flower = Proc(
                "flower",
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "dormant.tasks.app",
                    "flower",
                    f"--port={port}",
                    "--address=127.0.0.1",
                    "--basic-auth=ops:secret",
                ],
                stack.env,
                tmp_path,
            )
            stack.procs.append(flower)
            flower.start(ready="Visit me at")
            worker.start()
            c = stack.client
            c.deploy(NO_FLOW)
            fine = c.start("fl-gate", {"go": True})
            failing = c.start("fl-gate", {"go": False})
            stack.wait_status(fine, "completed")
            stack.wait_status(failing, "active_incidents")
            (incident,) = c.incidents(failing)

            def listed() -> dict[str, Any] | None:
                tasks = _get(f"http://127.0.0.1:{port}/api/tasks?taskname=dormant.start")
                results = [t for t in tasks.values() if t.get("state") == "SUCCESS"]
                return {str(t.get("result")): t for t in results} if len(results) == 2 else None

            results = wait_for(listed, timeout=30, what="both starts in Flower's task list")
            flagged = [r for r in results if "INCIDENT" in r]
            assert len(flagged) == 1, results
            assert (
                incident.id in flagged[0] and "gate" in flagged[0] and "NoFlowTaken" in flagged[0]
            )
            assert f"instance={failing}" in flagged[0]
            (other,) = [r for r in results if "INCIDENT" not in r]
            assert f"instance={fine}" in other and other.strip("'\"").startswith("applied")
        finally:
            stack.close()

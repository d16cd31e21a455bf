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

from tests.integration.conftest import JOBS_MODULE, Proc, Stack, _urls, wait_for
from tests.integration.test_metrics import _free_port
from tests.integration.test_tasks import HEAD, job, linear

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


def test_flower_finds_a_job_out_of_retries_hides_values_and_tells_workers_apart(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Issue 28: searching Flower for ``INCIDENT`` found nothing for a job that ran out of
    retries (its task shows only its exception, which Flower does not search); Flower
    showed job variable values the console hides; two workers on one host were both
    ``celery@<host>``."""
    with _urls("pg_redis", tmp_path, request) as urls:
        stack = Stack(*urls, tmp_path)
        try:
            workers = [
                Proc(
                    f"worker-{name}",
                    stack.dormant(
                        "worker",
                        "--events",
                        "--concurrency",
                        "1",
                        "--include",
                        JOBS_MODULE,
                        "--name",
                        name,
                    ),
                    stack.env,
                    tmp_path,
                )
                for name in ("alpha", "beta")
            ]
            stack.procs.extend(workers)
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
            for worker in workers:
                worker.start()
            c = stack.client
            c.deploy(linear("fl-job", job("test-fail")))
            iid = c.start("fl-job", {"card": "4111-secret-card"})
            stack.wait_status(iid, "active_incidents")
            (incident,) = c.incidents(iid)
            base = f"http://127.0.0.1:{port}/api"

            def found() -> dict[str, Any] | None:
                hits = _get(f"{base}/tasks?search=INCIDENT")
                # Flower records the task when it starts; its result comes with the
                # next event, a moment later
                done = hits and all(h.get("result") is not None for h in hits.values())
                return hits if done else None

            hits = wait_for(found, timeout=30, what="INCIDENT in Flower's search")
            [notice] = hits.values()
            assert notice["name"] == "dormant.incident.raised"
            assert incident.id in str(notice["result"]) and "ValueError" in str(notice["result"])
            assert f"instance={iid}" in str(notice["result"])

            jobs = wait_for(
                lambda: _get(f"{base}/tasks?taskname=test-fail") or None,
                timeout=30,
                what="the job in Flower's task list",
            )
            shown = json.dumps(jobs) + json.dumps(_get(f"{base}/tasks?taskname=dormant.start"))
            assert "'card'" in shown and "4111-secret-card" not in shown

            names = wait_for(
                lambda: (w := _get(f"{base}/workers?refresh=1")) and len(w) == 2 and sorted(w),
                timeout=30,
                what="both workers in Flower",
            )
            assert [n.split("@")[0] for n in names] == ["alpha", "beta"], names
        finally:
            stack.close()

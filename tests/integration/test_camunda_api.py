"""Camunda 8's own Python SDK (PyPI ``camunda-orchestration-sdk``, the dev extra)
against a real ``dormant api`` process, on PostgreSQL + Redis with a real dormant
worker and beat (docs/camunda-api.md).

The SDK is used as a Camunda team uses it: ``deploy_resources_from_files``,
``create_process_instance`` (with ``await_completion``), its own job worker loop
(``create_job_worker``: activation by long polling, completion, failure, BPMN error),
messages, signals, user tasks and incidents. The job types below are marked
``{"api": true}`` in ``DORMANT_JOB_TYPES``: they are never sent to Celery (no Celery
task of those names exists, so a job that went there would fail).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Proc, Stack, running_stack, wait_for

sdk = pytest.importorskip("camunda_orchestration_sdk")  # the dev extra installs it

pytestmark = pytest.mark.timeout(240)

API_TYPES = ("api-double", "api-flaky", "api-reject", "api-patched", "api-agent", "api-tool")
ZEEBE = 'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0"'


def _bpmn(process_id: str, body: str, flows: str) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" {ZEEBE}
    id="d-{process_id}" targetNamespace="http://dormant.dev/tests">
  <bpmn:process id="{process_id}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    {body}
    <bpmn:endEvent id="end"/>
    {flows}
  </bpmn:process>
</bpmn:definitions>
"""


def _service(process_id: str, job_type: str, retries: int = 3) -> str:
    task = f"""<bpmn:serviceTask id="work">
      <bpmn:extensionElements>
        <zeebe:taskDefinition type="{job_type}" retries="{retries}"/>
      </bpmn:extensionElements>
    </bpmn:serviceTask>"""
    flows = """<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="work"/>
    <bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="end"/>"""
    return _bpmn(process_id, task, flows)


def _caught_error(process_id: str, job_type: str) -> str:
    body = f"""<bpmn:serviceTask id="work">
      <bpmn:extensionElements>
        <zeebe:taskDefinition type="{job_type}"/>
      </bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:boundaryEvent id="rejected" attachedToRef="work">
      <bpmn:errorEventDefinition errorRef="err"/>
    </bpmn:boundaryEvent>
    <bpmn:endEvent id="refused"/>"""
    flows = """<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="work"/>
    <bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="end"/>
    <bpmn:sequenceFlow id="f3" sourceRef="rejected" targetRef="refused"/>"""
    text = _bpmn(process_id, body, flows)
    return text.replace(
        "<bpmn:process ", '<bpmn:error id="err" errorCode="REJECTED"/>\n  <bpmn:process ', 1
    )


def _message_wait(process_id: str) -> str:
    body = """<bpmn:intermediateCatchEvent id="paid">
      <bpmn:messageEventDefinition messageRef="msg"/>
    </bpmn:intermediateCatchEvent>"""
    flows = """<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="paid"/>
    <bpmn:sequenceFlow id="f2" sourceRef="paid" targetRef="end"/>"""
    text = _bpmn(process_id, body, flows)
    message = f"""<bpmn:message id="msg" name="{process_id}-paid">
    <bpmn:extensionElements>
      <zeebe:subscription correlationKey="=orderId"/>
    </bpmn:extensionElements>
  </bpmn:message>
  <bpmn:process """
    return text.replace("<bpmn:process ", message, 1)


def _signal_wait(process_id: str) -> str:
    body = """<bpmn:intermediateCatchEvent id="go">
      <bpmn:signalEventDefinition signalRef="sig"/>
    </bpmn:intermediateCatchEvent>"""
    flows = """<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="go"/>
    <bpmn:sequenceFlow id="f2" sourceRef="go" targetRef="end"/>"""
    text = _bpmn(process_id, body, flows)
    return text.replace(
        "<bpmn:process ", f'<bpmn:signal id="sig" name="{process_id}-go"/>\n  <bpmn:process ', 1
    )


def _user_task(process_id: str) -> str:
    body = """<bpmn:userTask id="approve" name="Approve">
      <bpmn:extensionElements><zeebe:userTask/></bpmn:extensionElements>
    </bpmn:userTask>"""
    flows = """<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="approve"/>
    <bpmn:sequenceFlow id="f2" sourceRef="approve" targetRef="end"/>"""
    return _bpmn(process_id, body, flows)


def _start_vars(variables: dict[str, Any]) -> Any:
    return sdk.ProcessInstanceCreationInstructionBaseVariables.from_dict(variables)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ApiStack:
    def __init__(self, stack: Stack, url: str) -> None:
        self.stack = stack
        self.url = url

    def camunda(self) -> Any:
        from camunda_orchestration_sdk import CamundaClient

        return CamundaClient(configuration=self.configuration)

    @property
    def configuration(self) -> Any:
        return {"CAMUNDA_REST_ADDRESS": self.url, "CAMUNDA_AUTH_STRATEGY": "NONE"}

    def deploy(self, tmp: Path, name: str, text: str) -> Any:
        path = tmp / name
        path.write_text(text)
        with self.camunda() as camunda:
            return camunda.deploy_resources_from_files([path])

    def instance_id(self, key: str) -> str:
        from dormant.persistence import api_keys

        found = api_keys.dormant_id(self.stack.client._store.engine, "instance", int(key))
        assert found is not None, f"no instance behind key {key}"
        return found


@pytest.fixture(scope="module", params=["pg_redis", "embedded"])
def api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiStack]:
    """A ``dormant api`` process on each shape: PostgreSQL + Redis, and the embedded
    default (SQLite and the server-less broker), with a worker and a beat."""
    job_types = json.dumps({t: {"api": True} for t in API_TYPES})
    with running_stack(
        request.param, "camunda-api", request, tmp_path_factory, DORMANT_JOB_TYPES=job_types
    ) as stack:
        port = _free_port()
        proc = Proc("api", stack.dormant("api", "--port", str(port)), stack.env, stack.tmp)
        stack.procs.append(proc)
        proc.start(ready="REST API on")
        yield ApiStack(stack, f"http://127.0.0.1:{port}")


def test_topology_and_deploy_name_dormant_and_the_uploaded_files(
    api: ApiStack, tmp_path: Path
) -> None:
    with api.camunda() as camunda:
        topology = camunda.get_topology()
    assert topology.gateway_version == "8.8.0"
    assert topology.to_dict()["dormant"] is True

    deployed = api.deploy(tmp_path, "double.bpmn", _service("api-double-p", "api-double"))
    (process,) = deployed.processes
    assert process.process_definition_id == "api-double-p"
    assert process.resource_name == "double.bpmn"
    assert str(process.process_definition_key).isdigit()
    assert api.stack.client.deployment(int(api.stack.client.deployments(1)[0].key)) is not None


def test_sdk_job_worker_completes_jobs_and_await_completion_returns_the_variables(
    api: ApiStack, tmp_path: Path
) -> None:
    from camunda_orchestration_sdk import ProcessCreationById

    api.deploy(tmp_path, "double.bpmn", _service("api-double-p", "api-double"))
    seen: list[str] = []

    def double(job: Any) -> dict[str, Any]:
        seen.append(str(job.job_key))
        return {"doubled": job.variables.to_dict()["x"] * 2}

    with api.camunda() as camunda, sdk_workers(api, {"api-double": double}):
        created = camunda.create_process_instance(
            data=ProcessCreationById(
                process_definition_id="api-double-p",
                variables=_start_vars({"x": 21}),
                await_completion=True,
                request_timeout=60000,
            )
        )
        assert created.variables.to_dict()["doubled"] == 42
        fetched = camunda.get_process_instance(created.process_instance_key)
    assert str(fetched.state) in ("COMPLETED", "ProcessInstanceStateEnum.COMPLETED")
    view = api.stack.client.instance(api.instance_id(str(created.process_instance_key)))
    assert view.status == "completed"
    assert view.variables["doubled"] == 42
    assert seen, "the SDK's worker ran the job"


@contextmanager
def sdk_workers(api: ApiStack, handlers: dict[str, Callable[[Any], Any]]) -> Iterator[None]:
    """The SDK's own job workers (``CamundaAsyncClient.create_job_worker``,
    ``run_workers``: its poll loop), on an event loop of their own thread; stopped at
    the end."""
    from camunda_orchestration_sdk import CamundaAsyncClient, WorkerConfig

    loop = asyncio.new_event_loop()
    workers: list[Any] = []
    started = threading.Event()

    async def main() -> None:
        async with CamundaAsyncClient(configuration=api.configuration) as camunda:
            for job_type, handler in handlers.items():
                config = WorkerConfig(job_type=job_type, job_timeout_milliseconds=30000)
                workers.append(camunda.create_job_worker(config, handler))
            started.set()
            await camunda.run_workers()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(30), "the SDK's workers did not start"
    try:
        yield
    finally:
        for worker in workers:
            loop.call_soon_threadsafe(worker.stop)
        thread.join(30)


def test_a_bpmn_error_from_the_worker_takes_the_boundary_and_a_failure_opens_an_incident(
    api: ApiStack, tmp_path: Path
) -> None:
    from camunda_orchestration_sdk import (
        IncidentSearchQuery,
        IncidentSearchQueryFilter,
        JobError,
        JobFailure,
        ProcessCreationById,
    )

    api.deploy(tmp_path, "reject.bpmn", _caught_error("api-reject-p", "api-reject"))
    api.deploy(tmp_path, "flaky.bpmn", _service("api-flaky-p", "api-flaky", retries=3))
    fixed = threading.Event()

    def reject(job: Any) -> dict[str, Any]:
        raise JobError("REJECTED", "no stock", {"why": "stock"})

    def flaky(job: Any) -> dict[str, Any]:
        if not fixed.is_set():
            # the worker counts retries: none left is an incident at once, whatever
            # the model's retries="3" would allow
            raise JobFailure("payment gateway down", retries=0)
        return {"charged": True}

    handlers = {"api-reject": reject, "api-flaky": flaky}
    with api.camunda() as camunda, sdk_workers(api, handlers):
        rejected = camunda.create_process_instance(
            data=ProcessCreationById(process_definition_id="api-reject-p")
        )
        flaky_run = camunda.create_process_instance(
            data=ProcessCreationById(process_definition_id="api-flaky-p")
        )
        rejected_id = api.instance_id(str(rejected.process_instance_key))
        view = api.stack.wait_status(rejected_id, "completed", timeout=60)
        assert view.variables["why"] == "stock"
        reached = {f.details.get("node") for f in api.stack.client.history(rejected_id)}
        assert "refused" in reached and "end" not in reached, reached

        def incident() -> Any:
            found = camunda.search_incidents(
                data=IncidentSearchQuery(
                    filter_=IncidentSearchQueryFilter(
                        process_instance_key=str(flaky_run.process_instance_key)
                    )
                )
            )
            return next((i for i in found.items if str(i.state).endswith("ACTIVE")), None)

        open_incident = wait_for(incident, 60, what="the failed job's incident")
        assert "payment gateway down" in open_incident.error_message
        assert "after 1 attempt" in open_incident.error_message
        assert open_incident.element_id == "work"
        fixed.set()
        camunda.resolve_incident(open_incident.incident_key)
        api.stack.wait_status(
            api.instance_id(str(flaky_run.process_instance_key)), "completed", timeout=60
        )


def test_messages_signals_user_tasks_and_cancellation(api: ApiStack, tmp_path: Path) -> None:
    from camunda_orchestration_sdk import (
        CancelProcessInstanceRequest,
        MessageCorrelationRequest,
        MessagePublicationRequest,
        ProcessCreationById,
        SignalBroadcastRequest,
        UserTaskAssignmentRequest,
        UserTaskCompletionRequest,
        UserTaskSearchQuery,
        UserTaskSearchQueryFilter,
    )
    from camunda_orchestration_sdk.errors import NotFoundError

    api.deploy(tmp_path, "paid.bpmn", _message_wait("api-paid-p"))
    api.deploy(tmp_path, "go.bpmn", _signal_wait("api-go-p"))
    api.deploy(tmp_path, "approve.bpmn", _user_task("api-approve-p"))
    with api.camunda() as camunda:
        correlate = MessageCorrelationRequest(
            name="api-paid-p-paid",
            correlation_key="o-1",
            variables=sdk.MessageCorrelationRequestVariables.from_dict({"amount": 5}),
        )
        with pytest.raises(NotFoundError):
            camunda.correlate_message(data=correlate)  # nobody waits yet
        first = camunda.create_process_instance(
            data=ProcessCreationById(
                process_definition_id="api-paid-p", variables=_start_vars({"orderId": "o-1"})
            )
        )
        second = camunda.create_process_instance(
            data=ProcessCreationById(
                process_definition_id="api-paid-p", variables=_start_vars({"orderId": "o-2"})
            )
        )

        def correlated() -> Any:
            try:
                return camunda.correlate_message(data=correlate)
            except NotFoundError:
                return None  # its subscription is not written yet

        result = wait_for(correlated, 60, what="a subscription for o-1")
        assert str(result.process_instance_key) == str(first.process_instance_key)
        view = api.stack.wait_status(api.instance_id(str(first.process_instance_key)), "completed")
        assert view.variables["amount"] == 5

        published = camunda.publish_message(
            data=MessagePublicationRequest(
                name="api-paid-p-paid", correlation_key="o-2", time_to_live=60000
            )
        )
        assert str(published.message_key).isdigit()
        api.stack.wait_status(api.instance_id(str(second.process_instance_key)), "completed")

        waiting = camunda.create_process_instance(
            data=ProcessCreationById(process_definition_id="api-go-p")
        )
        waiting_id = api.instance_id(str(waiting.process_instance_key))
        wait_for(
            lambda: api.stack.client.instance(waiting_id).waits or None,
            60,
            what="the signal wait",
        )
        camunda.broadcast_signal(data=SignalBroadcastRequest(signal_name="api-go-p-go"))
        api.stack.wait_status(waiting_id, "completed")

        approval = camunda.create_process_instance(
            data=ProcessCreationById(process_definition_id="api-approve-p")
        )

        def task() -> Any:
            found = camunda.search_user_tasks(
                data=UserTaskSearchQuery(
                    filter_=UserTaskSearchQueryFilter(
                        process_instance_key=str(approval.process_instance_key)
                    )
                )
            )
            return found.items[0] if found.items else None

        open_task = wait_for(task, 60, what="the user task")
        assert open_task.element_id == "approve"
        camunda.assign_user_task(
            open_task.user_task_key, data=UserTaskAssignmentRequest(assignee="ann")
        )
        wait_for(
            lambda: camunda.get_user_task(open_task.user_task_key).assignee == "ann" or None,
            60,
            what="the assignment",
        )
        camunda.complete_user_task(
            open_task.user_task_key,
            data=UserTaskCompletionRequest(
                variables=sdk.UserTaskCompletionRequestVariables.from_dict({"approved": True})
            ),
        )
        view = api.stack.wait_status(
            api.instance_id(str(approval.process_instance_key)), "completed"
        )
        assert view.variables["approved"] is True

        doomed = camunda.create_process_instance(
            data=ProcessCreationById(
                process_definition_id="api-paid-p", variables=_start_vars({"orderId": "x"})
            )
        )
        doomed_id = api.instance_id(str(doomed.process_instance_key))
        wait_for(lambda: api.stack.client.instance(doomed_id).waits or None, 60, what="its wait")
        camunda.cancel_process_instance(
            doomed.process_instance_key, data=CancelProcessInstanceRequest()
        )
        api.stack.wait_status(doomed_id, "terminated")
        assert str(camunda.get_process_instance(doomed.process_instance_key).state).endswith(
            "TERMINATED"
        )


def test_c8ctl_deploys_creates_lists_and_publishes(api: ApiStack, tmp_path: Path) -> None:
    """Camunda's npm CLI, ``c8ctl`` (tests/integration/npm_clients.py installs it),
    against the same ``dormant api``."""
    import subprocess

    from tests.integration.npm_clients import c8ctl_command, c8ctl_env

    command = c8ctl_command()
    env = c8ctl_env(api.url, tmp_path / "home")

    def c8ctl(*args: str) -> str:
        done = subprocess.run(
            [*command, *args, "--json"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"c8ctl {args}: {done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    model = tmp_path / "c8-paid.bpmn"
    model.write_text(_message_wait("c8-paid-p"))
    deployed = c8ctl("deploy", str(model))
    assert "c8-paid-p" in deployed
    created = c8ctl(
        "create", "pi", "--id", "c8-paid-p", "--variables", json.dumps({"orderId": "c8-1"})
    )
    keys = wait_for(
        lambda: api.stack.client.instances(key="c8-paid-p") or None, 60, what="the start"
    )
    assert len(keys) == 1
    instance_id = keys[0].id
    own_key = str(api_key(api, instance_id))
    assert re.search(rf"\b{own_key}\b", created), created
    wait_for(lambda: api.stack.client.instance(instance_id).waits or None, 60, what="its wait")
    listed = c8ctl("list", "pi", "--id", "c8-paid-p")
    assert re.search(rf"\b{own_key}\b", listed), listed
    c8ctl("publish", "msg", "c8-paid-p-paid", "--correlationKey", "c8-1")
    api.stack.wait_status(instance_id, "completed")


def api_key(api: ApiStack, instance_id: str) -> int:
    from dormant.persistence import api_keys

    return api_keys.key_of(api.stack.client._store.engine, "instance", instance_id)


def test_refusals_are_problem_documents_and_bodiless_posts_are_accepted(
    api: ApiStack, tmp_path: Path
) -> None:
    """What Modeler and c8ctl send as they send it: a multipart deploy with a
    ``tenantId`` part, a POST with a JSON content type and no body; every refusal an
    RFC 9457 problem naming what was wrong."""
    import httpx

    fields = ("type", "title", "status", "detail", "instance")
    with httpx.Client(base_url=api.url, timeout=30) as http:
        deployed = http.post(
            "/v2/deployments",
            files=[
                ("tenantId", (None, "<default>")),
                ("resources", ("modeler.bpmn", _signal_wait("api-modeler-p"), "application/xml")),
            ],
            headers={"Authorization": ""},
        )
        assert deployed.status_code == 200, deployed.text
        (entry,) = deployed.json()["deployments"]
        assert entry["processDefinition"]["resourceName"] == "modeler.bpmn"
        assert deployed.json()["tenantId"] == "<default>"

        missing = http.get("/v2/process-instances/999999999")
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/problem+json"
        assert set(fields) <= set(missing.json())

        bodiless = http.post(
            "/v2/incidents/999999999/resolution",
            content=b"",
            headers={"Content-Type": "application/json"},
        )
        assert bodiless.status_code == 404, bodiless.text  # read as {}, not refused

        bad = http.post("/v2/jobs/activation", json={"worker": "w", "timeout": 1000})
        assert bad.status_code == 400
        assert "type" in bad.json()["detail"] and "maxJobsToActivate" in bad.json()["detail"]

        broken = http.post(
            "/v2/deployments", files=[("resources", ("broken.bpmn", b"<nope", "application/xml"))]
        )
        assert broken.status_code == 400 and broken.json()["detail"]

        unknown = http.post("/v2/clock", json={})
        assert unknown.status_code == 404 and set(fields) <= set(unknown.json())

        # A tenant's deploy, start and instance carry its tenantId (docs/tenants.md);
        # another tenant (the default one here) cannot start its process.
        theirs = http.post(
            "/v2/deployments",
            files=[
                ("tenantId", (None, "api-acme")),
                ("resources", ("acme.bpmn", _signal_wait("api-acme-p"), "application/xml")),
            ],
        )
        assert theirs.status_code == 200 and theirs.json()["tenantId"] == "api-acme"
        entry = theirs.json()["deployments"][0]["processDefinition"]
        assert entry["tenantId"] == "api-acme"
        create = {"processDefinitionId": "api-acme-p"}
        refused = http.post("/v2/process-instances", json=create)
        assert refused.status_code == 404 and "tenant '<default>'" in refused.json()["detail"]
        started = http.post("/v2/process-instances", json=create | {"tenantId": "api-acme"})
        assert started.status_code == 200 and started.json()["tenantId"] == "api-acme"
        key = started.json()["processInstanceKey"]
        shown = wait_for(lambda: http.get(f"/v2/process-instances/{key}").json().get("tenantId"))
        assert shown == "api-acme"
        bad_tenant = http.post("/v2/process-instances", json=create | {"tenantId": "a b"})
        assert bad_tenant.status_code == 400 and "tenantId" in bad_tenant.json()["detail"]


def _form_task(process_id: str, form_id: str) -> str:
    body = f"""<bpmn:userTask id="review" name="Review">
      <bpmn:extensionElements>
        <zeebe:userTask/>
        <zeebe:formDefinition formId="{form_id}"/>
      </bpmn:extensionElements>
    </bpmn:userTask>"""
    flows = """<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="review"/>
    <bpmn:sequenceFlow id="f2" sourceRef="review" targetRef="end"/>"""
    return _bpmn(process_id, body, flows)


def test_a_deployed_form_is_kept_and_served_as_the_user_tasks_form(
    api: ApiStack, tmp_path: Path
) -> None:
    """A ``.form`` deployed through the API is the Store's form (versioned, kept); a
    user task linking it by ``formId`` answers it from ``GET .../form``."""
    from camunda_orchestration_sdk import (
        ProcessCreationById,
        UserTaskSearchQuery,
        UserTaskSearchQueryFilter,
    )

    schema = {
        "id": "api-review-form",
        "type": "default",
        "components": [{"key": "ok", "label": "OK?", "type": "checkbox"}],
    }
    (tmp_path / "review.form").write_text(json.dumps(schema))
    (tmp_path / "review.bpmn").write_text(_form_task("api-review-p", "api-review-form"))
    with api.camunda() as camunda:
        deployed = camunda.deploy_resources_from_files(
            [tmp_path / "review.form", tmp_path / "review.bpmn"]
        )
        (form,) = deployed.forms
        assert form.form_id == "api-review-form" and form.resource_name == "review.form"
        assert str(form.form_key).isdigit()
        created = camunda.create_process_instance(
            data=ProcessCreationById(process_definition_id="api-review-p")
        )

        def task() -> Any:
            found = camunda.search_user_tasks(
                data=UserTaskSearchQuery(
                    filter_=UserTaskSearchQueryFilter(
                        process_instance_key=str(created.process_instance_key)
                    )
                )
            )
            return found.items[0] if found.items else None

        open_task = wait_for(task, 60, what="the user task")
        assert str(open_task.form_key) == str(form.form_key)
        served = camunda.get_user_task_form(open_task.user_task_key)
    assert served.form_id == "api-review-form"
    assert served.version == form.version
    assert json.loads(served.schema) == schema
    assert str(served.form_key) == str(form.form_key)


def test_patching_a_jobs_retries_and_timeout_reaches_the_engines_job(
    api: ApiStack, tmp_path: Path
) -> None:
    """``PATCH /v2/jobs/{key}``: the timeout moves the engine's deadline (the job is
    dispatched again when it passes), the retries set the attempts left, which the
    next activation reports."""
    from camunda_orchestration_sdk import (
        JobActivationRequest,
        JobChangeset,
        JobCompletionRequest,
        JobUpdateRequest,
        ProcessCreationById,
    )

    api.deploy(tmp_path, "patched.bpmn", _service("api-patched-p", "api-patched", retries=2))

    def activate(camunda: Any) -> Any:
        found = camunda.activate_jobs(
            data=JobActivationRequest(
                type_="api-patched", timeout=60000, max_jobs_to_activate=1, request_timeout=1000
            )
        )
        return found.jobs[0] if found.jobs else None

    with api.camunda() as camunda:
        created = camunda.create_process_instance(
            data=ProcessCreationById(process_definition_id="api-patched-p")
        )
        first = wait_for(lambda: activate(camunda), 60, what="the first activation")
        assert first.retries == 2
        camunda.update_job(
            first.job_key,
            data=JobUpdateRequest(changeset=JobChangeset(retries=7, timeout=300)),
        )
        again = wait_for(lambda: activate(camunda), 60, what="the job after its timeout")
        assert str(again.job_key) != str(first.job_key)
        assert again.retries == 7  # a timeout spends no retry: the patched count stands
        camunda.complete_job(again.job_key, data=JobCompletionRequest())
    api.stack.wait_status(api.instance_id(str(created.process_instance_key)), "completed")


def test_element_instances_and_variables_are_searched_and_set(
    api: ApiStack, tmp_path: Path
) -> None:
    """The waiting user task is an element instance of its process instance; variables
    set on the process instance's key (the engine's set-variables) are found by the
    variable search, each value as JSON text."""
    from camunda_orchestration_sdk import (
        ElementInstanceSearchQuery,
        ElementInstanceSearchQueryFilter,
        ProcessCreationById,
        SetVariableRequest,
        VariableSearchQuery,
        VariableSearchQueryFilter,
    )

    api.deploy(tmp_path, "approve.bpmn", _user_task("api-approve-p"))
    with api.camunda() as camunda:
        created = camunda.create_process_instance(
            data=ProcessCreationById(
                process_definition_id="api-approve-p", variables=_start_vars({"x": 1})
            )
        )
        key = str(created.process_instance_key)

        def task_element() -> Any:
            found = camunda.search_element_instances(
                data=ElementInstanceSearchQuery(
                    filter_=ElementInstanceSearchQueryFilter(process_instance_key=key)
                )
            )
            return next((e for e in found.items if e.element_id == "approve"), None)

        element = wait_for(task_element, 60, what="the user task's element instance")
        assert str(element.type_).endswith("USER_TASK") and str(element.state).endswith("ACTIVE")
        again = camunda.get_element_instance(element.element_instance_key)
        assert again.element_id == "approve" and str(again.process_instance_key) == key
        process_element = camunda.get_element_instance(key)
        assert str(process_element.type_).endswith("PROCESS")

        camunda.create_element_instance_variables(
            key,
            data=SetVariableRequest(
                variables=sdk.SetVariableRequestVariables.from_dict({"y": {"deep": [2]}})
            ),
        )

        def variables() -> dict[str, Any] | None:
            found = camunda.search_variables(
                data=VariableSearchQuery(
                    filter_=VariableSearchQueryFilter(process_instance_key=key)
                ),
                truncate_values=False,
            )
            values = {v.name: json.loads(v.value) for v in found.items}
            return values if "y" in values else None

        seen = wait_for(variables, 60, what="the variable set through the API")
    assert seen == {"x": 1, "y": {"deep": [2]}}
    assert api.stack.client.instance(api.instance_id(key)).variables["y"] == {"deep": [2]}


def test_a_deployed_decision_is_evaluated_by_id_and_by_key(api: ApiStack, tmp_path: Path) -> None:
    """``POST /v2/decision-definitions/evaluation``: the deployed DMN (with the decision
    it requires, from its own file), evaluated with the request's variables."""
    from camunda_orchestration_sdk import DecisionEvaluationByID, DecisionEvaluationByKey

    from tests.integration.test_decisions import DMN

    deployed = api.deploy(tmp_path, "api-dish.dmn", DMN.replace("{fall}", "Stew"))
    dish = next(d for d in deployed.decisions if d.decision_definition_id == "dish")
    with api.camunda() as camunda:
        by_id = camunda.evaluate_decision(
            data=DecisionEvaluationByID(
                decision_definition_id="dish",
                variables=sdk.DecisionEvaluationByIdVariables.from_dict({"month": 10}),
            )
        )
        by_key = camunda.evaluate_decision(
            data=DecisionEvaluationByKey(
                decision_definition_key=dish.decision_definition_key,
                variables=sdk.DecisionEvaluationByIdVariables.from_dict({"month": 3}),
            )
        )
    assert json.loads(by_id.output) == "Stew"
    assert json.loads(by_key.output) == "Salad"
    assert by_id.decision_definition_version == dish.version
    assert str(by_key.decision_definition_key) == str(dish.decision_definition_key)

    # How: the required decision first, then the table's input and the rule that made
    # the result (FIRST: r1 alone at month 10, though r2's "-" matches too).
    season, chosen = by_id.to_dict()["evaluatedDecisions"]
    assert season["decisionDefinitionId"] == "season" and json.loads(season["output"]) == "Fall"
    assert season["decisionDefinitionType"] == "LITERAL_EXPRESSION"
    assert season["matchedRules"] == [] and season["evaluatedInputs"] == []
    assert chosen["evaluatedInputs"] == [
        {"inputId": "i1", "inputName": "Season", "inputValue": '"Fall"'}
    ]
    assert chosen["matchedRules"] == [
        {
            "ruleId": "r1",
            "ruleIndex": 1,
            "evaluatedOutputs": [
                {
                    "outputId": "o1",
                    "outputName": "dish",
                    "outputValue": '"Stew"',
                    "ruleId": "r1",
                    "ruleIndex": 1,
                }
            ],
        }
    ]
    (rule,) = by_key.evaluated_decisions[-1].matched_rules
    assert (rule.rule_id, rule.rule_index) == ("r2", 2)


def test_modification_and_migration_are_the_engines_operations(
    api: ApiStack, tmp_path: Path
) -> None:
    """``.../modification`` terminates the token an element instance key names and
    starts one before the activated element; ``.../migration`` moves an instance to
    another version of its process, elements mapped."""
    from camunda_orchestration_sdk import (
        ElementInstanceSearchQuery,
        ElementInstanceSearchQueryFilter,
        MigrateProcessInstanceMappingInstruction,
        ProcessCreationById,
        ProcessInstanceMigrationInstruction,
        ProcessInstanceModificationActivateInstruction,
        ProcessInstanceModificationInstruction,
        ProcessInstanceModificationTerminateByKeyInstruction,
    )

    api.deploy(tmp_path, "moved.bpmn", _message_wait("api-moved-p"))
    api.deploy(tmp_path, "mig.bpmn", _message_wait("api-mig-p"))
    second = api.deploy(
        tmp_path, "mig.bpmn", _message_wait("api-mig-p").replace('"paid"', '"paid2"')
    )
    (v2,) = second.processes
    assert v2.process_definition_version == 2
    with api.camunda() as camunda:
        moved = camunda.create_process_instance(
            data=ProcessCreationById(
                process_definition_id="api-moved-p", variables=_start_vars({"orderId": "m"})
            )
        )
        key = str(moved.process_instance_key)

        def waiting() -> Any:
            found = camunda.search_element_instances(
                data=ElementInstanceSearchQuery(
                    filter_=ElementInstanceSearchQueryFilter(process_instance_key=key)
                )
            )
            return next((e for e in found.items if e.element_id == "paid"), None)

        paid = wait_for(waiting, 60, what="the message wait's element instance")
        camunda.modify_process_instance(
            key,
            data=ProcessInstanceModificationInstruction(
                terminate_instructions=[
                    ProcessInstanceModificationTerminateByKeyInstruction(
                        element_instance_key=paid.element_instance_key
                    )
                ],
                activate_instructions=[
                    ProcessInstanceModificationActivateInstruction(element_id="end")
                ],
            ),
        )
        moved_id = api.instance_id(key)
        api.stack.wait_status(moved_id, "completed")
        reached = {f.details.get("node") for f in api.stack.client.history(moved_id)}
        assert "end" in reached

        migrating = camunda.create_process_instance(
            data=ProcessCreationById(
                process_definition_id="api-mig-p",
                process_definition_version=1,
                variables=_start_vars({"orderId": "g"}),
            )
        )
        migrating_id = api.instance_id(str(migrating.process_instance_key))
        wait_for(lambda: api.stack.client.instance(migrating_id).waits or None, 60, what="wait")
        camunda.migrate_process_instance(
            migrating.process_instance_key,
            data=ProcessInstanceMigrationInstruction(
                target_process_definition_key=v2.process_definition_key,
                mapping_instructions=[
                    MigrateProcessInstanceMappingInstruction(
                        source_element_id="paid", target_element_id="paid2"
                    )
                ],
            ),
        )
        view = wait_for(
            lambda: ((v := api.stack.client.instance(migrating_id)).version == 2 and v) or None,
            60,
            what="the migration",
        )
    assert {w.node_id for w in view.waits} == {"paid2"}


def test_searches_page_by_cursor_both_ways_and_sort(api: ApiStack, tmp_path: Path) -> None:
    """A search walked page by page with the SDK's cursors (``after`` the end cursor,
    ``before`` the start cursor) in the order asked for (``sort``)."""
    from camunda_orchestration_sdk import (
        CursorBasedBackwardPagination,
        CursorBasedForwardPagination,
        ProcessCreationById,
        ProcessInstanceSearchQuery,
        ProcessInstanceSearchQueryFilter,
        ProcessInstanceSearchQuerySortRequest,
        ProcessInstanceSearchQuerySortRequestField,
        SortOrderEnum,
    )

    api.deploy(tmp_path, "paged.bpmn", _signal_wait("api-paged-p"))
    with api.camunda() as camunda:
        created = [
            str(
                camunda.create_process_instance(
                    data=ProcessCreationById(process_definition_id="api-paged-p")
                ).process_instance_key
            )
            for _ in range(5)
        ]
        wait_for(
            lambda: len(api.stack.client.instances(key="api-paged-p")) == 5 or None,
            60,
            what="the five instances",
        )
        newest_first = [
            ProcessInstanceSearchQuerySortRequest(
                field=ProcessInstanceSearchQuerySortRequestField.PROCESSINSTANCEKEY,
                order=SortOrderEnum.DESC,
            )
        ]
        only = ProcessInstanceSearchQueryFilter(process_definition_id="api-paged-p")

        def page(pagination: Any) -> Any:
            return camunda.search_process_instances(
                data=ProcessInstanceSearchQuery(filter_=only, sort=newest_first, page=pagination)
            )

        seen: list[str] = []
        found = page(CursorBasedForwardPagination(limit=2))
        pages = [found]
        while found.items:
            seen += [str(i.process_instance_key) for i in found.items]
            found = page(CursorBasedForwardPagination(limit=2, after=found.page.end_cursor))
            pages.append(found)
        assert found.page.total_items == 5
        back = page(CursorBasedBackwardPagination(limit=2, before=pages[1].page.start_cursor))
    assert seen == sorted(created, key=int, reverse=True)
    assert [str(i.process_instance_key) for i in back.items] == seen[:2]


def test_a_form_embedded_in_the_process_is_served_too(api: ApiStack, tmp_path: Path) -> None:
    """A task whose ``formKey`` is ``camunda-forms:bpmn:ID`` (the form embedded in the
    deployed XML, tests/integration/console/review.bpmn) is served that form."""
    from camunda_orchestration_sdk import (
        ProcessCreationById,
        UserTaskSearchQuery,
        UserTaskSearchQueryFilter,
    )

    model = Path(__file__).parent / "console" / "review.bpmn"
    api.deploy(tmp_path, "review-embedded.bpmn", model.read_text())
    with api.camunda() as camunda:
        created = camunda.create_process_instance(
            data=ProcessCreationById(
                process_definition_id="review", variables=_start_vars({"priority": 50})
            )
        )

        def task() -> Any:
            found = camunda.search_user_tasks(
                data=UserTaskSearchQuery(
                    filter_=UserTaskSearchQueryFilter(
                        process_instance_key=str(created.process_instance_key)
                    )
                )
            )
            return found.items[0] if found.items else None

        open_task = wait_for(task, 60, what="the user task")
        served = camunda.get_user_task_form(open_task.user_task_key)
    assert served.form_id == "review-form"
    assert [c["key"] for c in json.loads(served.schema)["components"]] == [
        "comment",
        "amount",
        "decision",
    ]
    assert str(served.form_key) == str(open_task.form_key)


# What Desktop Modeler (5.x, its Camunda 8 REST client: @camunda8/sdk's CamundaRestClient
# as app/lib/zeebe-api uses it) sends for Deploy and Run against an http:// cluster URL
# with authentication "none": every request carries these headers, the Authorization
# header empty.
MODELER_HEADERS = {
    "content-type": "application/json",
    "authorization": "",
    "user-agent": "camunda8-sdk/rest camunda-modeler",
    "accept": "*/*",
}
MODELER_BOUNDARY = "--------------------------471018244683936217458133"


def _modeler_upload(name: str, text: str) -> bytes:
    """The deploy body as the form-data package writes it: one ``resources`` part (the
    file name Modeler derives from the tab, a type guessed from the extension, unknown
    for .bpmn) and the tenant after it."""
    return (
        f"--{MODELER_BOUNDARY}\r\n"
        f'Content-Disposition: form-data; name="resources"; filename="{name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
        f"{text}\r\n"
        f"--{MODELER_BOUNDARY}\r\n"
        'Content-Disposition: form-data; name="tenantId"\r\n\r\n'
        "<default>\r\n"
        f"--{MODELER_BOUNDARY}--\r\n"
    ).encode()


def test_desktop_modeler_deploys_and_runs_as_it_does_against_camunda(
    api: ApiStack, tmp_path: Path
) -> None:
    """Modeler's Deploy and Run, request by request: topology (it reads
    ``gatewayVersion``; below 8.8.0 it turns task testing off), the multipart deploy,
    topology again, the start by process id with the variables typed into its dialog
    and the tenant; each answer has every field Modeler reads."""
    import httpx

    process_id = "api-modeler-run"
    with httpx.Client(base_url=api.url, timeout=30, headers=MODELER_HEADERS) as http:
        topology = http.get("/v2/topology")
        assert topology.status_code == 200, topology.text
        assert topology.json()["gatewayVersion"] == "8.8.0"
        assert topology.json()["brokers"][0]["partitions"]

        deployed = http.post(
            "/v2/deployments",
            content=_modeler_upload("order run.bpmn", _user_task(process_id)),
            headers={
                "content-type": f"multipart/form-data; boundary={MODELER_BOUNDARY}",
                "accept": "application/json",
            },
        )
        assert deployed.status_code == 200, deployed.text
        answer = deployed.json()
        assert answer["deploymentKey"].isdigit() and answer["tenantId"] == "<default>"
        (entry,) = answer["deployments"]
        definition = entry["processDefinition"]
        assert definition["processDefinitionId"] == process_id
        assert definition["resourceName"] == "order run.bpmn"
        assert definition["processDefinitionKey"].isdigit()
        assert definition["processDefinitionVersion"] == 1
        assert definition["tenantId"] == "<default>"

        assert http.get("/v2/topology").status_code == 200
        started = http.post(
            "/v2/process-instances",
            json={
                "processDefinitionId": process_id,
                "variables": {"order": {"id": "A-1", "total": 12.5}, "rush": True},
                "tenantId": "<default>",
            },
        )
        assert started.status_code == 200, started.text
        run = started.json()
        assert run["processInstanceKey"].isdigit()
        assert run["processDefinitionKey"] == definition["processDefinitionKey"]
        assert run["processDefinitionId"] == process_id
        assert run["processDefinitionVersion"] == 1
        assert run["tenantId"] == "<default>"

    instance_id = api.instance_id(run["processInstanceKey"])
    view = wait_for(
        lambda: api.stack.client.instance(instance_id), what="the run's instance applied"
    )
    assert view.variables == {"order": {"id": "A-1", "total": 12.5}, "rush": True}


AGENT = f"""<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" {ZEEBE}
    id="d-agent" targetNamespace="http://dormant.dev/tests">
  <bpmn:process id="api-agent-p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="agent"/>
    <bpmn:adHocSubProcess id="agent" name="Agent">
      <bpmn:extensionElements>
        <zeebe:taskDefinition type="api-agent"/>
        <zeebe:adHoc outputCollection="toolCallResults"
                     outputElement="={{id: toolCall.id, content: toolCallResult}}"/>
      </bpmn:extensionElements>
      <bpmn:serviceTask id="lookup" name="Look up">
        <bpmn:extensionElements>
          <zeebe:taskDefinition type="api-tool"/>
          <zeebe:ioMapping><zeebe:input source="=toolCall.query" target="query"/></zeebe:ioMapping>
        </bpmn:extensionElements>
      </bpmn:serviceTask>
    </bpmn:adHocSubProcess>
    <bpmn:sequenceFlow id="f2" sourceRef="agent" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>
"""


def test_an_ai_agent_ad_hoc_sub_process_is_driven_by_sdk_job_results(
    api: ApiStack, tmp_path: Path
) -> None:
    """The job-worker implementation (Camunda 8.8's agentic form) with the SDK's own
    calls: the agent's job names a tool with its arguments in ``result``, the tool's
    job sees them, the next agent job sees ``toolCallResults``, and a result saying the
    condition is fulfilled completes the sub-process."""
    from camunda_orchestration_sdk import (
        JobActivationRequest,
        JobCompletionRequest,
        ProcessCreationById,
    )
    from camunda_orchestration_sdk.errors import ApiError
    from camunda_orchestration_sdk.models.job_result_activate_element import (
        JobResultActivateElement,
    )
    from camunda_orchestration_sdk.models.job_result_ad_hoc_sub_process import (
        JobResultAdHocSubProcess,
    )

    api.deploy(tmp_path, "agent.bpmn", AGENT)

    def activate(camunda: Any, job_type: str) -> Any:
        found = camunda.activate_jobs(
            data=JobActivationRequest(
                type_=job_type, timeout=60000, max_jobs_to_activate=1, request_timeout=1000
            )
        )
        return found.jobs[0] if found.jobs else None

    def complete(camunda: Any, job: Any, variables: dict[str, Any], result: Any) -> None:
        data = {"variables": variables, "result": result.to_dict()}
        camunda.complete_job(job.job_key, data=JobCompletionRequest.from_dict(data))

    with api.camunda() as camunda:
        created = camunda.create_process_instance(
            data=ProcessCreationById(
                process_definition_id="api-agent-p", variables=_start_vars({"ask": "why?"})
            )
        )
        first = wait_for(lambda: activate(camunda, "api-agent"), 60, what="the agent's job")
        assert first.kind == "AD_HOC_SUB_PROCESS"
        seen = first.variables.to_dict()
        assert [e["elementId"] for e in seen["adHocSubProcessElements"]] == ["lookup"]
        assert seen["toolCallResults"] == [] and seen["ask"] == "why?"
        call = JobResultActivateElement.from_dict(
            {"elementId": "lookup", "variables": {"toolCall": {"id": "c1", "query": "q1"}}}
        )
        complete(
            camunda,
            first,
            {"turns": 1},
            JobResultAdHocSubProcess(activate_elements=[call], type_="adHocSubProcess"),
        )

        tool = wait_for(lambda: activate(camunda, "api-tool"), 60, what="the tool's job")
        assert tool.variables.to_dict()["query"] == "q1" and tool.kind == "BPMN_ELEMENT"
        # A tool's job takes no ad-hoc result; refused before the job is taken.
        with pytest.raises(ApiError) as refused:
            complete(camunda, tool, {}, JobResultAdHocSubProcess(type_="adHocSubProcess"))
        assert refused.value.status_code == 400
        camunda.complete_job(
            tool.job_key,
            data=JobCompletionRequest.from_dict({"variables": {"toolCallResult": "because"}}),
        )

        again = wait_for(lambda: activate(camunda, "api-agent"), 60, what="the next agent job")
        assert again.variables.to_dict()["toolCallResults"] == [{"id": "c1", "content": "because"}]
        complete(
            camunda,
            again,
            {"answer": "because"},
            JobResultAdHocSubProcess(
                is_completion_condition_fulfilled=True, type_="adHocSubProcess"
            ),
        )
    instance_id = api.instance_id(str(created.process_instance_key))
    api.stack.wait_status(instance_id, "completed")
    assert api.stack.client.instance(instance_id).variables["answer"] == "because"

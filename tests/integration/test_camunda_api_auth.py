"""Who may call the Camunda API (docs/camunda-api.md, "Authentication"): the console's
credentials and roles, one guard (tasks/api/auth.py on tasks/console/security.py), on
``dormant api``'s app and on the console's, where the same routes are mounted.

In process (Starlette's TestClient, a real uvicorn for the SDK) on an embedded
database: a refusal happens before any route runs, so no worker is needed.
"""

from __future__ import annotations

import base64
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from dormant.engine_core.errors import InvalidSetting
from dormant.tasks.api.app import create_app
from dormant.tasks.client import Client
from dormant.tasks.console.config import ConsoleConfig
from dormant.tasks.console.serve import console_app

USER, PASSWORD = "ops", "operator-password-0123"
VIEWER, VIEWER_PASSWORD = "watcher", "viewer-password-01234"
TOKEN = "api-bearer-token-0123456789"
CLIENT_ID, CLIENT_SECRET = "dormant-sdk", "oauth-client-secret-0123"
FIELDS = {"type", "title", "status", "detail", "instance"}
MODEL = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    id="d-auth" targetNamespace="http://dormant.dev/tests">
  <bpmn:process id="auth-p" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:userTask id="review"/>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="review"/>
    <bpmn:sequenceFlow id="f2" sourceRef="review" targetRef="end"/>
  </bpmn:process>
</bpmn:definitions>
"""


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    c = Client(f"sqlite:///{tmp_path_factory.mktemp('api-auth') / 'a.db'}", "memory://")
    try:
        yield c
    finally:
        c._store.close()


def _config(**overrides: Any) -> ConsoleConfig:
    settings: dict[str, Any] = {
        "user": USER,
        "password": PASSWORD,
        "viewer_user": VIEWER,
        "viewer_password": VIEWER_PASSWORD,
        "token": TOKEN,
        "oauth_client_id": CLIENT_ID,
        "oauth_client_secret": CLIENT_SECRET,
        "secret": "s" * 32,
    }
    settings.update(overrides)
    return ConsoleConfig(**settings)


def _local(app: Starlette, address: str = "127.0.0.1") -> TestClient:
    return TestClient(app, base_url="http://127.0.0.1", client=(address, 50000))


def _basic(user: str, password: str) -> dict[str, str]:
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


def _deploy(http: TestClient, headers: dict[str, str]) -> httpx.Response:
    return http.post(
        "/v2/deployments",
        files=[("resources", ("auth.bpmn", MODEL, "application/xml"))],
        headers=headers,
    )


def _problem(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = answer.json()
    assert set(body) >= FIELDS and body["status"] == status
    return body


def test_the_api_takes_the_consoles_credentials_and_a_viewer_only_reads(client: Client) -> None:
    with _local(create_app(client, config=_config())) as http:
        anonymous = _problem(http.get("/v2/topology"), 401)
        assert "DORMANT_CONSOLE_AUTH" in anonymous["detail"]
        assert http.get("/v2/topology").headers["www-authenticate"].startswith("Basic")
        # Modeler's empty header is no credential either, once credentials exist.
        _problem(http.get("/v2/topology", headers={"Authorization": ""}), 401)
        wrong = _problem(http.get("/v2/topology", headers=_basic(USER, "not-the-password")), 401)
        assert wrong["detail"] == "wrong credentials"

        viewer = _basic(VIEWER, VIEWER_PASSWORD)
        assert http.get("/v2/topology", headers=viewer).json()["gatewayVersion"] == "8.8.0"
        searched = http.post("/v2/process-instances/search", json={}, headers=viewer)
        assert searched.status_code == 200, searched.text
        refused = _problem(_deploy(http, viewer), 403)
        assert "viewer may only read" in refused["detail"]
        assert "/v2/deployments" in refused["detail"]

        deployed = _deploy(http, _basic(USER, PASSWORD))
        assert deployed.status_code == 200, deployed.text
        started = http.post(
            "/v2/process-instances",
            json={"processDefinitionId": "auth-p", "variables": {"n": 1}},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert started.status_code == 200, started.text
        assert started.json()["processInstanceKey"].isdigit()
        _problem(http.get("/v2/topology", headers={"Authorization": "Bearer not-the-token"}), 401)


def test_without_credentials_only_a_direct_loopback_request_needs_none(client: Client) -> None:
    app = create_app(client)
    with _local(app) as http:
        # Modeler with "authentication: none" sends an empty Authorization header.
        assert http.get("/v2/topology", headers={"Authorization": ""}).status_code == 200
        assert _deploy(http, {}).status_code == 200
        # A proxy on this machine forwarding a remote user's request is not local.
        proxied = http.get("/v2/topology", headers={"X-Forwarded-For": "203.0.113.9"})
        _problem(proxied, 401)
        _problem(http.get("/v2/topology", headers={"Host": "rebound.example"}), 400)
    with _local(app, address="192.0.2.7") as remote:
        _problem(remote.get("/v2/topology"), 401)
    with pytest.raises(InvalidSetting, match="no credentials"):
        create_app(client, config=ConsoleConfig(host="0.0.0.0"))


def test_the_console_serves_the_same_routes_under_the_apis_guard(client: Client) -> None:
    with _local(console_app(_config(), client=client)) as http:
        _problem(http.get("/v2/topology"), 401)
        topology = http.get("/v2/topology", headers=_basic(USER, PASSWORD))
        assert topology.status_code == 200 and topology.json()["dormant"] is True
        assert _deploy(http, _basic(USER, PASSWORD)).json()["deployments"]
        _problem(_deploy(http, _basic(VIEWER, VIEWER_PASSWORD)), 403)
        _problem(http.get("/v2/no-such-route", headers=_basic(USER, PASSWORD)), 404)
        # The console's own pages keep their own answers, roles included.
        page_refusal = http.post(
            "/instances/x/cancel", headers=_basic(VIEWER, VIEWER_PASSWORD), data={}
        )
        assert page_refusal.status_code == 403
        assert "viewer may only read" in page_refusal.text

        # A session signed in through the form opens the pages, never the API: a
        # cookie is what a foreign page gets sent along with its own request.
        form = http.get("/login").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        assert csrf is not None
        signed = http.post(
            "/login",
            data={"user": USER, "password": PASSWORD, "csrf": csrf.group(1)},
            follow_redirects=False,
        )
        assert signed.status_code == 303
        assert http.get("/processes").status_code == 200
        _problem(http.post("/v2/process-instances/search", json={}), 401)


def test_a_viewer_signed_in_through_the_form_reads_but_may_not_act(client: Client) -> None:
    with _local(console_app(_config(), client=client)) as http:
        csrf = re.search(r'name="csrf" value="([^"]+)"', http.get("/login").text)
        assert csrf is not None
        signed = http.post(
            "/login",
            data={"user": VIEWER, "password": VIEWER_PASSWORD, "csrf": csrf.group(1)},
            follow_redirects=False,
        )
        assert signed.status_code == 303
        page = http.get("/processes")
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert token is not None, "a signed-in page carries its forms' token"
        refused = http.post("/instances/x/cancel", data={"csrf": token.group(1)})
        assert refused.status_code == 403 and "viewer may only read" in refused.text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_python_sdk_signs_in_with_basic_and_oauth_credentials(
    client: Client, tmp_path: Path
) -> None:
    """Camunda's Python SDK in its BASIC and OAUTH modes against ``dormant api``'s app
    under uvicorn (OAUTH: client credentials posted to the API's own token URL)."""
    import uvicorn
    from camunda_orchestration_sdk import CamundaClient
    from camunda_orchestration_sdk.errors import ApiError

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(client, config=_config()), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    path = tmp_path / "auth.bpmn"
    path.write_text(MODEL)

    def sdk(user: str, password: str) -> Any:
        return CamundaClient(
            configuration={
                "CAMUNDA_REST_ADDRESS": f"http://127.0.0.1:{port}",
                "CAMUNDA_AUTH_STRATEGY": "BASIC",
                "CAMUNDA_BASIC_AUTH_USERNAME": user,
                "CAMUNDA_BASIC_AUTH_PASSWORD": password,
            }
        )

    try:
        with sdk(USER, PASSWORD) as camunda:
            assert camunda.get_topology().gateway_version == "8.8.0"
            (process,) = camunda.deploy_resources_from_files([path]).processes
            assert process.process_definition_id == "auth-p"
        with sdk(VIEWER, VIEWER_PASSWORD) as camunda:
            assert camunda.get_topology().gateway_version == "8.8.0"
            with pytest.raises(ApiError) as refused:
                camunda.deploy_resources_from_files([path])
            assert refused.value.status_code == 403
        with sdk(USER, "not-the-password-at-all") as camunda, pytest.raises(ApiError) as wrong:
            camunda.get_topology()
        assert wrong.value.status_code == 401
        oauth = CamundaClient(
            configuration={
                "CAMUNDA_REST_ADDRESS": f"http://127.0.0.1:{port}",
                "CAMUNDA_AUTH_STRATEGY": "OAUTH",
                "CAMUNDA_CLIENT_ID": CLIENT_ID,
                "CAMUNDA_CLIENT_SECRET": CLIENT_SECRET,
                "CAMUNDA_OAUTH_URL": f"http://127.0.0.1:{port}/oauth/token",
                "CAMUNDA_TOKEN_DISK_CACHE_DISABLE": "true",
            }
        )
        with oauth as camunda:
            (again,) = camunda.deploy_resources_from_files([path]).processes
            assert again.process_definition_id == "auth-p"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_the_token_endpoint_issues_bearer_tokens_for_the_configured_client(
    client: Client,
) -> None:
    from dormant.tasks.console import tokens

    config = _config()
    with _local(create_app(client, config=config)) as http:
        form = {"grant_type": "client_credentials", "client_id": CLIENT_ID}
        wrong = http.post("/oauth/token", data={**form, "client_secret": "not-it-at-all"})
        assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
        grant = http.post("/oauth/token", data={**form, "grant_type": "password"})
        assert grant.status_code == 400 and grant.json()["error"] == "unsupported_grant_type"
        issued = http.post(
            "/oauth/token", data={**form, "client_secret": CLIENT_SECRET, "audience": "x"}
        )
        assert issued.status_code == 200, issued.text
        body = issued.json()
        assert body["token_type"] == "Bearer" and body["expires_in"] == tokens.TOKEN_SECONDS
        bearer = {"Authorization": f"Bearer {body['access_token']}"}
        assert _deploy(http, bearer).status_code == 200  # an operator's token
        forged = body["access_token"][:-2] + ("AA" if body["access_token"][-2:] != "AA" else "BB")
        _problem(http.get("/v2/topology", headers={"Authorization": f"Bearer {forged}"}), 401)
    # Another console secret (or a rotated client secret) ends every token issued before;
    # so does the clock passing its expiry.
    assert tokens.valid(config, body["access_token"], time.time())
    assert not tokens.valid(_config(secret="t" * 32), body["access_token"], time.time())
    assert not tokens.valid(config, body["access_token"], time.time() + tokens.TOKEN_SECONDS)
    # The console serves the same endpoint, outside its own guard.
    with _local(console_app(config, client=client)) as console:
        via_console = console.post("/oauth/token", data={**form, "client_secret": CLIENT_SECRET})
        assert via_console.status_code == 200, via_console.text


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {
                "DORMANT_CONSOLE_AUTH": f"ops:{PASSWORD}",
                "DORMANT_CONSOLE_VIEWER_AUTH": f"ops:{PASSWORD}",
            },
            "DORMANT_CONSOLE_VIEWER_AUTH names the same user as DORMANT_CONSOLE_AUTH ('ops')",
        ),
        (
            {"DORMANT_CONSOLE_VIEWER_AUTH": "watcher:short"},
            "DORMANT_CONSOLE_VIEWER_AUTH's password must be at least 16 characters long",
        ),
        (
            {"DORMANT_CONSOLE_OAUTH_CLIENT": "sdk:short"},
            "DORMANT_CONSOLE_OAUTH_CLIENT's client-secret must be at least 16 characters long",
        ),
    ],
)
def test_the_new_credentials_are_refused_at_start_when_unsafe(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidSetting) as refused:
        ConsoleConfig.from_env(env)
    assert message in str(refused.value)

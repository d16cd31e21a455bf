"""Authorizations per tenant on the console's pages (docs/console.md "Users and roles",
tasks/console/authorization.py), in process on an embedded database: lists show only
the asker's tenants, another tenant's instance is a 404 and nothing is sent for it, a
viewer sees no values unless granted, a batch touches only the asker's tenant, an admin
of every tenant acts on all; and the same on the Camunda API (/v2), where a job worker
activates only its tenants' jobs and deploying needs an admin. A refusal happens before
any trigger is sent, so no worker is needed: "nothing changed" is "no inbox row was
written"."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select
from starlette.testclient import TestClient

from dormant.engine_core.errors import InvalidSetting
from dormant.persistence.store import NewInstance
from dormant.persistence.tables import inbox
from dormant.persistence.unmatched import record_unmatched
from dormant.tasks.api.app import create_app as create_api
from dormant.tasks.client import Client
from dormant.tasks.console import create_app
from dormant.tasks.console.authorization import hash_password, parse_grants, parse_users
from dormant.tasks.console.config import ENV_OAUTH_GRANTS, ENV_USERS, ConsoleConfig
from tests.integration.console.kit import MODEL
from tests.integration.waitkit import end, model, script, start

pytestmark = pytest.mark.integration

PASSWORD = "a-password-of-sixteen"
SECRET = "card-4111-secret-value"
ACME = "acme"
# The fewest iterations a hash may have: the tests' sign-ins stay fast.
_HASH = hash_password(PASSWORD, 1_000)
USERS = ";".join(
    f"{name}:{_HASH}:{grants}"
    for name, grants in (
        ("acme-ops", f"operator@{ACME}"),
        ("acme-viewer", f"viewer@{ACME}"),
        ("acme-auditor", f"viewer+values@{ACME}"),
        ("boss", "admin@*"),
    )
)


CONFIG = ConsoleConfig(users=parse_users(USERS, ENV_USERS), secret="s" * 32)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """Instance ``a-1`` of tenant acme, ``d-1`` and ``d-2`` of the default tenant."""
    client = Client(f"sqlite:///{tmp_path_factory.mktemp('authz') / 'a.db'}", "memory://")
    xml = MODEL.read_text()
    client.deploy(xml)
    client.for_tenant(ACME).deploy(xml.replace('id="payment"', 'id="payment-acme"'))
    now = datetime.now(UTC)
    client._store.start(NewInstance("payment-acme", "a-1", {"card": SECRET}), now=now)
    for n in (1, 2):
        client._store.start(NewInstance("payment", f"d-{n}", {"card": SECRET}), now=now)
    # A message of each tenant that went nowhere, for the messages page.
    with client._store.engine.begin() as conn:
        for tenant in (ACME, "<default>"):
            record_unmatched(
                conn,
                f"m-{tenant}",
                f"paid-{tenant}",
                f"key-{tenant}",
                now,
                tenant=tenant,
                kept=100,
                retention_seconds=3600,
            )
    # An instance of acme in incident: its script fails at the start.
    failing = model(
        "broken-acme",
        start() + script("calc", '=assert(false, "no")', "r") + end(),
        [("start", "calc"), ("calc", "end")],
    )
    client.for_tenant(ACME).deploy(failing)
    client._store.start(NewInstance("broken-acme", "b-1", {}), now=now)
    # A user task of the default tenant, for the tasklist.
    client.deploy(MODEL.with_name("review.bpmn").read_text())
    client._store.start(NewInstance("review", "r-1", {"card": SECRET}), now=now)
    try:
        yield client
    finally:
        client._store.close()


@pytest.fixture(scope="module")
def console(client: Client) -> Iterator[TestClient]:
    app = create_app(CONFIG, client=client)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as tc:
        yield tc


@pytest.fixture(scope="module")
def api(client: Client) -> Iterator[TestClient]:
    app = create_api(client, CONFIG)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as tc:
        yield tc


def _as(name: str) -> dict[str, str]:
    pair = base64.b64encode(f"{name}:{PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {pair}"}


def _csrf(tc: TestClient, headers: dict[str, str]) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', tc.get("/login", headers=headers).text)
    assert found, "no CSRF field on the page"
    return found.group(1)


def _sent(client: Client) -> int:
    with client._store.engine.connect() as conn:
        found: int = conn.execute(select(func.count()).select_from(inbox)).scalar_one()
        return found


def _cancel(tc: TestClient, name: str, instance_id: str) -> Any:
    headers = _as(name)
    form = {"csrf": _csrf(tc, headers), "confirm": "1", "next": "/instances"}
    return tc.post(
        f"/instances/{instance_id}/cancel", data=form, headers=headers, follow_redirects=False
    )


def test_lists_show_only_the_askers_tenants(console: TestClient) -> None:
    mine = console.get("/instances", headers=_as("acme-ops")).text
    assert "a-1" in mine and "d-1" not in mine and "d-2" not in mine
    # Asking for another tenant by the filter shows nothing of it.
    theirs = console.get("/instances?tenant=%3Cdefault%3E", headers=_as("acme-ops")).text
    assert "d-1" not in theirs
    every = console.get("/instances", headers=_as("boss")).text
    assert all(i in every for i in ("a-1", "d-1", "d-2"))
    listed = console.get("/processes", headers=_as("acme-ops")).text
    assert "/processes/payment-acme/1" in listed and "/processes/payment/1" not in listed
    assert console.get("/processes/payment/1", headers=_as("acme-ops")).status_code == 404
    assert console.get("/processes/payment/1", headers=_as("boss")).status_code == 200
    messages = console.get("/messages", headers=_as("acme-ops")).text
    assert "paid-acme" in messages and "key-acme" in messages
    assert "paid-&lt;default&gt;" not in messages
    assert "paid-&lt;default&gt;" in console.get("/messages", headers=_as("boss")).text
    assert "key-acme" not in console.get("/messages", headers=_as("acme-viewer")).text
    assert console.get("/parked", headers=_as("acme-ops")).status_code == 403
    assert console.get("/parked", headers=_as("boss")).status_code == 200
    # Nobody in particular reads nothing once users are configured.
    assert "a-1" not in console.get("/instances").text


def test_an_operator_of_one_tenant_cannot_act_on_another(
    console: TestClient, client: Client
) -> None:
    assert console.get("/instances/d-1", headers=_as("acme-ops")).status_code == 404
    assert console.get("/api/instances/d-1", headers=_as("acme-ops")).status_code == 404
    before = _sent(client)
    refused = _cancel(console, "acme-ops", "d-1")
    assert refused.status_code == 404
    assert _sent(client) == before  # nothing was sent for the other tenant's instance
    # The refusal is in the audit trail, which the operator of acme does not read.
    refusals = [e for e in client.audit_log(instance_id="d-1") if e.outcome == "refused"]
    assert [(e.actor, e.action) for e in refusals] == [("acme-ops", "cancel")]
    assert "d-1" in console.get("/audit", headers=_as("boss")).text
    assert "d-1" not in console.get("/audit", headers=_as("acme-ops")).text
    # A viewer of acme reads it and may act on nothing (refused on the headers).
    assert _cancel(console, "acme-viewer", "a-1").status_code == 403
    assert _sent(client) == before


def test_another_tenants_task_is_unknown_and_untouched(console: TestClient, client: Client) -> None:
    task = client.user_tasks(instance_id="r-1")[0]
    assert f"/tasks/{task.id}" in console.get("/tasks", headers=_as("boss")).text
    assert f"/tasks/{task.id}" not in console.get("/tasks", headers=_as("acme-ops")).text
    assert console.get(f"/tasks/{task.id}", headers=_as("acme-ops")).status_code == 404
    headers = _as("acme-ops")
    form = {"csrf": _csrf(console, headers), "vars": "ok=true"}
    done = console.post(
        f"/tasks/{task.id}/complete", data=form, headers=headers, follow_redirects=False
    )
    assert done.status_code == 404
    assert client.user_task(task.id).assignee is None
    claim = console.post(
        f"/tasks/{task.id}/claim", data=form, headers=headers, follow_redirects=False
    )
    assert claim.status_code == 404 and client.user_task(task.id).assignee is None


def test_a_viewer_sees_no_values_unless_granted(console: TestClient) -> None:
    viewer = console.get("/instances/a-1", headers=_as("acme-viewer"))
    assert viewer.status_code == 200 and SECRET not in viewer.text
    auditor = console.get("/instances/a-1", headers=_as("acme-auditor"))
    assert SECRET in auditor.text
    assert SECRET in console.get("/instances/a-1", headers=_as("acme-ops")).text


def test_a_batch_touches_only_the_askers_tenant(console: TestClient) -> None:
    headers = _as("acme-ops")
    form = {"csrf": _csrf(console, headers), "confirm": "1", "process": "payment-acme"}
    asked = console.post(
        "/instances/suspend-matching", data={**form, "confirm": ""}, headers=headers
    )
    assert 'id="confirm-count">1<' in asked.text
    done = console.post(
        "/instances/suspend-matching", data=form, headers=headers, follow_redirects=False
    )
    assert done.status_code == 303
    page = console.get(done.headers["location"], headers=headers).text
    assert "1 selected" in page
    batch = done.headers["location"]
    assert console.get(batch, headers=_as("boss")).status_code == 200
    # A batch of acme is not the default tenant's readers' business (none here reads
    # only that tenant: a reader of no tenant stands in).
    assert console.get(batch).status_code == 404
    assert (
        batch.rpartition("/")[2] not in console.get("/batches").text
    )  # acme's one instance, not the default tenant's two
    other = console.post(
        "/instances/suspend-matching",
        data={**form, "process": "payment", "tenant": "<default>"},
        headers=headers,
        follow_redirects=False,
    )
    assert other.status_code == 303
    assert "one of acme" in console.get(other.headers["location"], headers=headers).text


def test_an_admin_of_every_tenant_acts_on_all(console: TestClient, client: Client) -> None:
    before = _sent(client)
    for instance_id in ("d-2", "a-1"):
        done = _cancel(console, "boss", instance_id)
        assert done.status_code == 303
    assert _sent(client) == before + 2


# -- the Camunda API -------------------------------------------------------------------


def _instances(api: TestClient, name: str) -> dict[str, str]:
    found = api.post("/v2/process-instances/search", json={}, headers=_as(name))
    assert found.status_code == 200
    return {i["processDefinitionId"]: i["processInstanceKey"] for i in found.json()["items"]}


def test_the_api_searches_and_reads_only_the_callers_tenants(api: TestClient) -> None:
    assert set(_instances(api, "acme-ops")) == {"payment-acme", "broken-acme"}
    keys = _instances(api, "boss")
    assert set(keys) == {"payment-acme", "broken-acme", "payment", "review"}
    other = api.get(f"/v2/process-instances/{keys['payment']}", headers=_as("acme-ops"))
    assert other.status_code == 404 and other.json()["title"] == "NOT_FOUND"
    own = api.get(f"/v2/process-instances/{keys['payment-acme']}", headers=_as("acme-ops"))
    assert own.status_code == 200 and own.json()["tenantId"] == ACME


def test_the_apis_incidents_carry_their_tenant_and_filter_by_it(api: TestClient) -> None:
    def tenants(who: str, where: dict[str, Any]) -> list[str]:
        found = api.post("/v2/incidents/search", json={"filter": where}, headers=_as(who))
        assert found.status_code == 200, found.text
        return [i["tenantId"] for i in found.json()["items"]]

    assert tenants("boss", {}) == [ACME]
    assert tenants("boss", {"tenantId": ACME}) == [ACME]
    assert tenants("boss", {"tenantId": "<default>"}) == []
    assert tenants("acme-ops", {}) == [ACME]
    found = api.post("/v2/incidents/search", json={}, headers=_as("boss")).json()["items"][0]
    one = api.get(f"/v2/incidents/{found['incidentKey']}", headers=_as("acme-ops"))
    assert one.status_code == 200 and one.json()["tenantId"] == ACME


def test_the_api_refuses_acting_on_another_tenant(api: TestClient, client: Client) -> None:
    keys = _instances(api, "boss")
    before = _sent(client)
    ops = _as("acme-ops")
    cancel = api.post(f"/v2/process-instances/{keys['payment']}/cancellation", headers=ops)
    assert cancel.status_code == 404
    start = {"processDefinitionId": "payment", "tenantId": "<default>"}
    started = api.post("/v2/process-instances", json=start, headers=ops)
    assert started.status_code == 403 and "operator role" in started.json()["detail"]
    jobs = {"type": "charge", "timeout": 1000, "maxJobsToActivate": 1, "requestTimeout": -1}
    refused = api.post(
        "/v2/jobs/activation", json={**jobs, "tenantIds": ["<default>"]}, headers=ops
    )
    assert refused.status_code == 403
    deploy = api.post(
        "/v2/deployments",
        files={"resources": ("p.bpmn", MODEL.read_bytes(), "application/xml")},
        data={"tenantId": ACME},
        headers=ops,
    )
    assert deploy.status_code == 403 and "admin role" in deploy.json()["detail"]
    assert _sent(client) == before  # nothing was sent
    refused = [e for e in client.audit_log(actor="acme-ops") if e.source == "api"]
    assert {e.action for e in refused} == {
        "cancellation",
        "process-instances",
        "activation",
        "deployments",
    }
    assert all(e.outcome == "refused" for e in refused)
    done = api.post(f"/v2/process-instances/{keys['payment']}/cancellation", headers=_as("boss"))
    assert done.status_code == 204


def test_the_api_shows_values_only_when_granted(api: TestClient) -> None:
    key = _instances(api, "boss")["payment-acme"]
    search = {"filter": {"processInstanceKey": key}}

    def names(who: str) -> list[str]:
        found = api.post("/v2/variables/search", json=search, headers=_as(who))
        assert found.status_code == 200
        return [i["name"] for i in found.json()["items"]]

    assert names("acme-viewer") == []
    assert names("acme-auditor") == ["card"] == names("acme-ops")


def test_the_oauth_clients_token_carries_its_grants(client: Client) -> None:
    config = ConsoleConfig(
        oauth_client_id="acme-worker",
        oauth_client_secret="oauth-client-secret-0123",
        oauth_grants=parse_grants(f"operator@{ACME}", ENV_OAUTH_GRANTS),
        secret="s" * 32,
    )
    app = create_api(client, config)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as tc:
        form = {
            "grant_type": "client_credentials",
            "client_id": "acme-worker",
            "client_secret": "oauth-client-secret-0123",
        }
        token = tc.post("/oauth/token", data=form).json()["access_token"]
        bearer = {"Authorization": f"Bearer {token}"}
        found = tc.post("/v2/process-instances/search", json={}, headers=bearer).json()
        assert {i["tenantId"] for i in found["items"]} == {ACME}
        start = {"processDefinitionId": "payment", "tenantId": "<default>"}
        assert tc.post("/v2/process-instances", json=start, headers=bearer).status_code == 403


@pytest.mark.parametrize(
    ("users", "words"),
    [
        (f"ann:{_HASH}:owner@acme", "role one of viewer, operator, admin"),
        (f"ann:{_HASH}:operator", "a grant is role@tenant"),
        (f"ann:{_HASH}:operator@{'t' * 40}", "more than the limit of 31"),
        (f"ann:{PASSWORD}:operator@acme", "clear passwords are not accepted"),
        (f"ann:pbkdf2_sha256$10$salt${'0' * 64}:viewer@acme", "fewer than the minimum of 1000"),
        (f"ann:{_HASH}:viewer@a;ann:{_HASH}:viewer@b", "named twice"),
        (f"ann:{_HASH}:", "name at least one grant"),
    ],
)
def test_bad_user_settings_are_refused_at_start_up(users: str, words: str) -> None:
    with pytest.raises(InvalidSetting, match=re.escape(words)):
        ConsoleConfig.from_env({ENV_USERS: users})
    # A user of the store may not also be the single-user setting's.
    with pytest.raises(InvalidSetting, match="one entry"):
        ConsoleConfig.from_env(
            {ENV_USERS: f"ops:{_HASH}:viewer@acme", "DORMANT_CONSOLE_AUTH": f"ops:{PASSWORD}"}
        )


def test_hash_password_prints_a_hash_the_settings_accept() -> None:
    from click.testing import CliRunner

    from dormant.tasks.cli import cli
    from dormant.tasks.console.authorization import verify_password

    done = CliRunner().invoke(cli, ["hash-password", "--iterations", "1000"], input="s3cret\n")
    assert done.exit_code == 0, done.output
    encoded = done.output.strip()
    (user,) = parse_users(f"ann:{encoded}:viewer@acme", ENV_USERS)
    assert verify_password(user.password_hash, "s3cret")
    assert not verify_password(user.password_hash, "s3cret!")
    assert CliRunner().invoke(cli, ["hash-password"], input="\n").exit_code == 2

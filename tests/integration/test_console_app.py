"""The console app in-process (Starlette's test client) on both backends: settings it
refuses, a proxy prefix on every URL it writes, the live fragments, bad filters, the
headers every page carries. The browser and the real processes are in
test_console_browser.py and test_console_security.py."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from dormant.engine_core.errors import InvalidSetting
from dormant.persistence.store import NewInstance
from dormant.tasks.console.config import ConsoleConfig, is_loopback
from tests.integration.console.kit import MODEL

pytestmark = pytest.mark.integration


@pytest.fixture
def app_client(db_url: str) -> Iterator[Any]:
    from starlette.testclient import TestClient

    from dormant.tasks.client import Client
    from dormant.tasks.console import create_app

    client = Client(db_url, "memory://")
    client.deploy(MODEL)
    client._store.start(
        NewInstance("payment", "inst-1", {"flag": "/nope"}, business_key="bk"),
        now=datetime.now(UTC),
    )
    app = create_app(ConsoleConfig(secret="s"), client=client)
    with TestClient(
        app, root_path="/ops", base_url="http://127.0.0.1", client=("127.0.0.1", 50000)
    ) as tc:
        yield tc
    client._store.close()


def test_settings_refused_at_start_up() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    with pytest.raises(InvalidSetting, match=r"refusing to serve the console on 10\.1\.2\.3"):
        ConsoleConfig.from_env({}, host="10.1.2.3")
    ConsoleConfig.from_env({}, host="10.1.2.3", read_only=True)  # read-only may run open
    ConsoleConfig.from_env({"DORMANT_CONSOLE_AUTH": "a:" + "b" * 16}, host="10.1.2.3")
    ConsoleConfig.from_env({"DORMANT_CONSOLE_TOKEN": "x" * 16}, host="10.1.2.3")
    for bad, message in (
        ({"DORMANT_CONSOLE_AUTH": "nocolon"}, "without a colon"),
        ({"DORMANT_CONSOLE_AUTH": ":pw"}, "an empty part"),
        ({"DORMANT_CONSOLE_TOKEN": "short"}, "at least 16 characters"),
        ({"DORMANT_CONSOLE_AUTH": "a:b"}, "password must be at least 16 characters"),
    ):
        with pytest.raises(InvalidSetting, match=message):
            ConsoleConfig.from_env(bad)
    # Read-only without credentials off loopback: nobody is "the operator".
    assert not ConsoleConfig(host="0.0.0.0", read_only=True).open_access
    assert ConsoleConfig(host="127.0.0.1").open_access


def test_a_proxy_prefix_is_on_every_url_the_console_writes(app_client: Any) -> None:
    page = app_client.get("/ops/instances?status=active").text
    assert 'data-live="/ops/instances?status=active"' in page
    assert 'href="/ops/instances/inst-1"' in page
    assert 'src="/ops/static/console.js"' in page
    assert app_client.get("/ops/", follow_redirects=False).headers["location"] == ("/ops/processes")
    detail = app_client.get("/ops/instances/inst-1").text
    assert 'data-api="/ops/api/instances/inst-1"' in detail
    assert 'src="/ops/static/bpmn-js/bpmn-navigated-viewer.production.min.js"' in detail


def test_live_fragments_and_the_json_poll(app_client: Any) -> None:
    fragment = app_client.get("/ops/instances?partial=1").text
    assert "<html" not in fragment and 'data-instance="inst-1"' in fragment
    assert "<html" not in app_client.get("/ops/incidents?partial=1").text
    assert "<html" not in app_client.get("/ops/instances/inst-1?partial=1").text
    state = app_client.get("/ops/api/instances/inst-1").json()
    assert state["status"] == "active" and state["revision"] >= 1
    assert state["overlays"]["charge"]["waiting"][0].startswith("job inc-flag, attempt 1")
    assert state["overlays"]["placed"]["completed"] is True
    assert app_client.get("/ops/api/instances/nope").status_code == 404


def test_bad_input_is_a_one_line_error_not_a_crash(app_client: Any) -> None:
    for query, message in (
        ("version=x", "error: version: &#39;x&#39; is not a version number"),
        ("started_from=yesterday", "error: started_from: &#39;yesterday&#39; is not a date"),
        ("after=%21%21", "error: page cursor"),
    ):
        response = app_client.get(f"/ops/instances?{query}")
        assert response.status_code == 400 and message in response.text
    missing = app_client.get("/ops/instances/nope")
    assert missing.status_code == 404 and "error: no instance has id &#39;nope&#39;" in missing.text
    assert "error: page cursor" in app_client.get("/ops/incidents?after=zz").text


def test_every_page_forbids_framing_and_foreign_scripts(app_client: Any) -> None:
    for path in ("/ops/processes", "/ops/instances", "/ops/incidents", "/ops/instances/inst-1"):
        headers = app_client.get(path).headers
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert "default-src 'self'" in headers["content-security-policy"]
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
    app_client.cookies.clear()  # a new visitor: the session (and its CSRF token) is set
    cookie = app_client.get("/ops/processes").headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=lax" in cookie.lower()


def test_the_viewer_ships_with_its_licence(app_client: Any) -> None:
    licence = app_client.get("/ops/static/bpmn-js/LICENSE").text
    assert "Camunda Services GmbH" in licence and "watermark" in licence
    assert app_client.get("/ops/static/bpmn-js/bpmn-js.css").status_code == 200


def test_an_unreadable_checkpoint_is_a_one_line_error_on_its_page(app_client: Any) -> None:
    """An unreadable checkpoint is an incident of its own: its page says so, never a 500."""
    from sqlalchemy import update

    from dormant.persistence.tables import instances

    engine = app_client.app.state.client._store.engine
    with engine.begin() as conn:
        conn.execute(
            update(instances).where(instances.c.id == "inst-1").values(checkpoint={"schema": 99})
        )
    page = app_client.get("/ops/instances/inst-1")
    assert page.status_code == 409 and "cannot be read" in page.text and "schema 99" in page.text
    assert app_client.get("/ops/api/instances/inst-1").status_code == 409

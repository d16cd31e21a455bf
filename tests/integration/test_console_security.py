"""The console's guards, against real ``dormant console`` processes, PostgreSQL, Redis and
a real worker: actions need credentials and a CSRF token, ``--read-only`` acts on
nothing, an open console refuses a non-loopback address, values are shown only to the
signed in, a refusal reads as the CLI prints it, and the access log carries no payload.
"""

from __future__ import annotations

import base64
import html
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Stack, _urls, wait_for
from tests.integration.console.kit import (
    MODEL,
    PASSWORD,
    TOKEN,
    USER,
    Console,
    console_proc,
    free_port,
    open_incident,
)

pytestmark = pytest.mark.integration

SECRET = "card-4111-1111-secret"
BASIC = {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}


@pytest.fixture(scope="module")
def sstack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("console-security")
    with _urls("pg_redis", tmp, request) as urls:
        s = Stack(*urls, tmp)
        try:
            s.worker_and_beat()
            s.client.deploy(MODEL)
            yield s
        finally:
            s.close()


@pytest.fixture(scope="module")
def console(sstack: Stack) -> Console:
    return console_proc(sstack)


def _failing(stack: Stack, tmp_path: Path, name: str = "flag") -> tuple[str, Any, Path]:
    flag = tmp_path / name
    iid = stack.client.start("payment", {"flag": str(flag), "card": SECRET})
    return iid, open_incident(stack, iid), flag


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


def test_actions_need_credentials_and_the_forms_csrf_token(
    sstack: Stack, console: Console, tmp_path: Path
) -> None:
    iid, inc, flag = _failing(sstack, tmp_path)
    revision = sstack.client.instance(iid).revision
    action = f"/incidents/{inc.id}/retry"
    with console.http() as anonymous:
        refused = anonymous.post(action, data={"csrf": "x"})
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == 'Basic realm="dormant console"'
        assert anonymous.post(f"/instances/{iid}/cancel").status_code == 401
        wrong = {"Authorization": "Basic " + base64.b64encode(b"ops:guess").decode()}
        assert anonymous.post(action, headers=wrong).status_code == 401
        assert anonymous.post(action, headers={"Authorization": "Bearer nope"}).status_code == 401
    with console.http(headers=BASIC) as ops:
        page = ops.get(f"/instances/{iid}")
        token = _csrf(page.text)
        assert ops.post(action).status_code == 403  # no token
        assert ops.post(action, data={"csrf": token[::-1]}).status_code == 403  # a wrong one
    with console.http(headers={"Authorization": f"Bearer {TOKEN}"}) as script:
        assert script.post(action, data={"csrf": "forged"}).status_code == 403
    # Nothing of the above reached the instance.
    assert sstack.client.instance(iid).revision == revision
    assert sstack.client.incident(inc.id).state == "open"

    flag.touch()
    with console.http(headers=BASIC) as ops:
        back = f"/instances/{iid}"
        token = _csrf(ops.get(back).text)  # a new session (cookie jar), a new token
        done = ops.post(action, data={"csrf": token, "next": back})
        assert done.status_code == 303 and done.headers["location"] == back
        assert f"retry {inc.id}" in ops.get(back).text
    sstack.wait_status(iid, "completed")


def test_sign_in_form_session_and_csrf(sstack: Stack, console: Console, tmp_path: Path) -> None:
    iid, inc, _ = _failing(sstack, tmp_path)
    with console.http() as browser:
        token = _csrf(browser.get("/login").text)
        assert browser.post("/login", data={"user": USER, "password": PASSWORD}).status_code == 403
        bad = browser.post("/login", data={"csrf": token, "user": USER, "password": "no"})
        assert bad.headers["location"] == "/login"
        assert "error: wrong user or password" in browser.get("/login").text
        ok = browser.post("/login", data={"csrf": token, "user": USER, "password": PASSWORD})
        assert ok.status_code == 303
        page = browser.get(f"/instances/{iid}").text
        assert SECRET in html.unescape(page)  # signed in: values shown
        fresh = _csrf(page)
        assert fresh != token  # signing in starts a new session, with a new token
        # The old, pre-sign-in token no longer opens a form.
        assert browser.post(f"/instances/{iid}/cancel", data={"csrf": token}).status_code == 403
        cancel = browser.post(
            f"/instances/{iid}/cancel", data={"csrf": fresh, "confirm": "1", "next": "//evil"}
        )
        assert cancel.headers["location"] == "/incidents"  # never an off-site redirect
    sstack.wait_status(iid, "terminated")
    assert sstack.client.incident(inc.id).state != "open"


def test_values_are_shown_only_to_the_authenticated(
    sstack: Stack, console: Console, tmp_path: Path
) -> None:
    iid, inc, _ = _failing(sstack, tmp_path)
    with console.http() as anonymous:
        page = html.unescape(anonymous.get(f"/instances/{iid}").text)
        state = anonymous.get(f"/api/instances/{iid}").text
        partial = html.unescape(anonymous.get(f"/instances/{iid}?partial=1").text)
    for text in (page, state, partial):
        assert SECRET not in text
        assert "the flag is not set" not in text  # the cause text may quote values too
    assert "card" in page and "hidden" in page  # names are shown, values are not
    assert f'data-incident="{inc.id}"' in page and "RuntimeError" in page
    assert 'data-action="retry"' not in page  # no buttons for who cannot press them
    with console.http(headers=BASIC) as ops:
        page = html.unescape(ops.get(f"/instances/{iid}").text)
    assert SECRET in page and "the flag is not set" in page
    assert 'data-action="retry"' in page


def test_refusals_read_as_the_cli_prints_them(
    sstack: Stack, console: Console, tmp_path: Path
) -> None:
    _, inc, flag = _failing(sstack, tmp_path)
    flag.touch()
    sstack.client.resolve_incident(inc.id)
    wait_for(lambda: sstack.client.incident(inc.id).state == "resolved", what="resolved")
    cli = sstack.run_cli("incidents", "retry", inc.id)
    assert cli.returncode == 2
    printed = cli.stderr.strip()
    assert printed.startswith(f"error: cannot retry incident '{inc.id}'")
    with console.http(headers=BASIC) as ops:
        token = _csrf(ops.get("/incidents").text)
        ops.post(f"/incidents/{inc.id}/retry", data={"csrf": token, "next": "/incidents"})
        shown = html.unescape(ops.get("/incidents").text)
    assert printed in shown


def test_read_only_refuses_every_action(sstack: Stack, tmp_path: Path) -> None:
    iid, inc, _ = _failing(sstack, tmp_path)
    ro = console_proc(sstack, "--read-only", name="console-ro")
    with ro.http(headers=BASIC) as ops:
        page = ops.get(f"/instances/{iid}").text
        assert "read-only" in page and 'data-action="retry"' not in page
        token = _csrf(page)  # the sign-out form still has one
        for path in (f"/incidents/{inc.id}/retry", f"/instances/{iid}/cancel"):
            refused = ops.post(path, data={"csrf": token})
            assert refused.status_code == 403
            assert refused.text == "refused: this console runs read-only"
    assert sstack.client.incident(inc.id).state == "open"


def test_an_open_console_refuses_a_non_loopback_address(sstack: Stack) -> None:
    env = {k: v for k, v in sstack.env.items() if not k.startswith("DORMANT_CONSOLE_")}
    port = str(free_port())
    refused = subprocess.run(
        sstack.dormant("console", "--host", "0.0.0.0", "--port", port),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "error: refusing to serve the console on 0.0.0.0 with actions enabled and no "
        "credentials: set DORMANT_CONSOLE_AUTH=user:password (or DORMANT_CONSOLE_TOKEN), "
        "pass --read-only, or bind to 127.0.0.1"
    )
    bad = subprocess.run(
        sstack.dormant("console", "--port", port),
        env=env | {"DORMANT_CONSOLE_AUTH": "no-colon"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "DORMANT_CONSOLE_AUTH must be user:password" in bad.stderr


def test_on_loopback_without_credentials_the_local_operator_may_act(
    sstack: Stack, tmp_path: Path
) -> None:
    iid, inc, flag = _failing(sstack, tmp_path)
    local = console_proc(sstack, auth=False, name="console-local")
    flag.touch()
    with local.http() as me:
        page = me.get(f"/instances/{iid}").text
        assert SECRET in html.unescape(page)
        assert me.post(f"/incidents/{inc.id}/retry").status_code == 403  # CSRF still checked
        me.post(f"/incidents/{inc.id}/retry", data={"csrf": _csrf(page)})
    sstack.wait_status(iid, "completed")


def test_the_access_log_names_paths_never_queries_or_bodies(
    sstack: Stack, console: Console
) -> None:
    with console.http() as anonymous:
        anonymous.get("/instances", params={"business_key": "bk-SECRET-42"})
        token = _csrf(anonymous.get("/login").text)
        anonymous.post("/login", data={"csrf": token, "user": USER, "password": PASSWORD})
    wait_for(lambda: "POST /login 303" in console.proc.text(), what="the log line")
    log = console.proc.text()
    assert re.search(r"GET /instances 200 \d+\.\dms", log)
    assert "bk-SECRET-42" not in log and PASSWORD not in log and "business_key" not in log

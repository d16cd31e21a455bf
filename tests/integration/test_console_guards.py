"""The console's guards against a hostile web page and a password guesser, through real
``dormant console`` processes on PostgreSQL and Redis with a real worker: only its own
hosts are answered (DNS rebinding, a foreign Origin), a proxied request is not the
local operator, sign-ins are throttled per client on the form, Basic and bearer paths
alike, a short password refuses to start, sign-out ends a saved cookie, an anonymous
upload is refused on its headers, and values (a correlation key too) stay hidden from
whoever may not see them (docs/console.md, "Authentication")."""

from __future__ import annotations

import base64
import html
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
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
)

pytestmark = pytest.mark.integration

ORDER = "o-SECRET-77"
DROPPED = "o-SECRET-DROPPED-5"
BASIC = {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}
BEARER = {"Authorization": f"Bearer {TOKEN}"}
WRONG_BEARER = {"Authorization": "Bearer not-the-token-0123456789"}
WRONG_BASIC = {"Authorization": "Basic " + base64.b64encode(f"{USER}:guess".encode()).decode()}


@pytest.fixture(scope="module")
def gstack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("console-guards")
    with _urls("pg_redis", tmp, request) as urls:
        s = Stack(*urls, tmp)
        try:
            s.worker_and_beat()
            s.client.deploy(MODEL)
            yield s
        finally:
            s.close()


@pytest.fixture(scope="module")
def waiting(gstack: Stack, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An instance waiting at the message ``paid`` with the correlation key ``ORDER``."""
    flag = tmp_path_factory.mktemp("flag") / "set"
    flag.touch()
    iid: str = gstack.client.start("payment", {"flag": str(flag), "order": ORDER})
    wait_for(
        lambda: any(t.node_id == "paid" for t in gstack.client.instance(iid).tokens),
        30,
        what="the wait at paid",
    )
    return iid


@pytest.fixture(scope="module")
def open_console(gstack: Stack) -> Console:
    return console_proc(gstack, auth=False, name="console-open")


@pytest.fixture(scope="module")
def console(gstack: Stack) -> Console:
    return console_proc(
        gstack, name="console-auth", extra_env={"DORMANT_CONSOLE_HOSTS": "ops.example.com"}
    )


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


def _from(address: str, console: Console, **kwargs: object) -> httpx.Client:
    """A client whose requests leave from another loopback address: another client."""
    transport = httpx.HTTPTransport(local_address=address)
    return console.http(transport=transport, **kwargs)


def test_a_foreign_host_or_origin_is_refused_on_open_and_credentialed_consoles(
    gstack: Stack, open_console: Console, console: Console
) -> None:
    port = open_console.url.rpartition(":")[2]
    rebound = {"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}"}
    with open_console.http() as me:
        page = me.get("/jobs")
        assert page.status_code == 200
        token = _csrf(page.text)
        # DNS rebinding: the browser sends the attacker's name as Host.
        for path in ("/processes", "/jobs", "/processes/", "/api/instances/x"):
            refused = me.get(path, headers=rebound)
            assert refused.status_code == 400, path
            assert "does not answer for that host" in refused.text
        paused = me.post(
            "/jobs/pause", data={"csrf": token, "job_type": "rebound"}, headers=rebound
        )
        assert paused.status_code == 400
        # Our host, a foreign page's Origin (a cross-site form or fetch).
        foreign = me.post(
            "/jobs/pause",
            data={"csrf": token, "job_type": "rebound"},
            headers={"Origin": "http://attacker.example"},
        )
        assert foreign.status_code == 403
        assert me.get("/processes", headers={"Origin": "null"}).status_code == 403
        assert "rebound" not in gstack.client.paused_job_types()
        # The loopback names, any port, are ours; so is a health check by any name.
        assert me.get("/processes", headers={"Host": f"localhost:{port}"}).status_code == 200
        assert me.get("/healthz", headers={"Host": "10.0.0.7:8080"}).text == "ok"
    with console.http(headers=BASIC) as ops:
        assert ops.get("/processes", headers={"Host": "attacker.example"}).status_code == 400
        assert ops.get("/processes", headers={"Host": "ops.example.com"}).status_code == 200
        # A redirect never names the request's host, not even an accepted one.
        slash = ops.get("/processes/", headers={"Host": "ops.example.com"})
        assert slash.status_code in (307, 308) and slash.headers["location"] == "/processes"


def test_a_proxied_request_is_not_the_local_operator(
    gstack: Stack, open_console: Console, waiting: str
) -> None:
    with open_console.http() as me:
        page = me.get(f"/instances/{waiting}").text
        assert ORDER in html.unescape(page)  # direct and local: the operator
        token = _csrf(page)
    for proxy in (
        {"X-Forwarded-For": "203.0.113.9"},
        {"Forwarded": "for=203.0.113.9"},
        {"X-Real-IP": "203.0.113.9"},
    ):
        with open_console.http(headers=proxy) as remote:
            page = html.unescape(remote.get(f"/instances/{waiting}").text)
            assert ORDER not in page and "hidden" in page, proxy
            refused = remote.post("/jobs/pause", data={"csrf": token, "job_type": "proxied"})
            assert refused.status_code == 401, proxy
    assert "proxied" not in gstack.client.paused_job_types()


def test_values_and_correlation_keys_are_hidden_from_who_may_not_see_them(
    gstack: Stack, console: Console, waiting: str
) -> None:
    # A message that went nowhere: its correlation key is listed on /messages, and is a
    # value like a wait's key (docs/console.md, "Messages").
    dropped = gstack.client.send_message("guards-nowhere", DROPPED, message_id="g-1", receipt=60)
    assert dropped.outcome == "dropped"
    unmatched = ("/messages", "/messages?partial=1")
    with console.http() as anonymous:
        page = html.unescape(anonymous.get(f"/instances/{waiting}").text)
        state = anonymous.get(f"/api/instances/{waiting}").text
        listed = [html.unescape(anonymous.get(path).text) for path in unmatched]
    assert "message paid key (hidden)" in page
    for text in (page, state):
        assert ORDER not in text
    for text in listed:
        assert 'data-message-id="g-1"' in text and "hidden: sign in" in text
        assert DROPPED not in text
    with console.http(headers=BASIC) as ops:
        assert f"message paid key {ORDER}" in html.unescape(ops.get(f"/instances/{waiting}").text)
        assert ORDER in ops.get(f"/api/instances/{waiting}").text
        for path in unmatched:
            assert DROPPED in ops.get(path).text
    # Read-only without credentials: nobody is signed in, the local user neither.
    ro = console_proc(gstack, "--read-only", auth=False, name="console-ro-open")
    with ro.http() as me:
        page = html.unescape(me.get(f"/instances/{waiting}").text)
        assert ORDER not in page and "hidden" in page
        assert ORDER not in me.get(f"/api/instances/{waiting}").text
        for path in unmatched:
            text = html.unescape(me.get(path).text)
            assert 'data-message-id="g-1"' in text and DROPPED not in text


def _sign_in(browser: httpx.Client, password: str) -> httpx.Response:
    token = _csrf(browser.get("/login").text)
    return browser.post("/login", data={"csrf": token, "user": USER, "password": password})


def test_password_guessing_is_locked_out_per_client_on_every_path(gstack: Stack) -> None:
    console = console_proc(gstack, name="console-throttle")
    with _from("127.0.0.2", console) as guesser, _from("127.0.0.3", console) as operator:
        for _ in range(10):  # the 10th locks the address out
            assert _sign_in(guesser, "guess").headers["location"] == "/login"
        locked = _sign_in(guesser, "guess")
        assert locked.status_code == 429 and "too many failed sign-ins" in locked.text
        # Locked out, the right password is refused too, without being compared...
        assert _sign_in(guesser, PASSWORD).status_code == 429
        assert guesser.get("/processes", headers=BASIC).status_code == 429
        # ...while another client signs in at once.
        assert _sign_in(operator, PASSWORD).headers["location"] == "/processes"
        assert operator.get("/processes").status_code == 200
    with _from("127.0.0.4", console) as basic, _from("127.0.0.5", console) as bearer:
        for _ in range(10):
            assert basic.get("/processes", headers=WRONG_BASIC).status_code == 401
            assert bearer.get("/processes", headers=WRONG_BEARER).status_code == 401
        assert basic.get("/processes", headers=BASIC).status_code == 429
        assert bearer.get("/processes", headers=BEARER).status_code == 429
    with console.http(headers=BASIC) as ops:  # 127.0.0.1 was never wrong
        metrics = ops.get("/metrics").text
    assert 'dormant_console_sign_in_lockouts_total{scope="client"} 3.0' in metrics
    log = console.proc.text()
    for address in ("127.0.0.2", "127.0.0.4", "127.0.0.5"):
        assert f"sign-in lockout: {address} failed 10 sign-ins; refused for 300 s" in log


def test_a_short_password_or_an_unknown_boolean_refuses_to_start(gstack: Stack) -> None:
    env = {k: v for k, v in gstack.env.items() if not k.startswith("DORMANT_CONSOLE_")}
    port = str(free_port())
    for extra, line in (
        (
            {"DORMANT_CONSOLE_AUTH": "a:b"},
            "error: DORMANT_CONSOLE_AUTH's password must be at least 16 characters long "
            "(as DORMANT_CONSOLE_TOKEN), got 1",
        ),
        (
            {"DORMANT_CONSOLE_SECURE_COOKIES": "ture"},
            "error: DORMANT_CONSOLE_SECURE_COOKIES='ture' is not a boolean: use one of 1, "
            "true, yes, on or 0, false, no, off",
        ),
    ):
        refused = subprocess.run(
            gstack.dormant("console", "--port", port),
            env=env | extra,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 2
        assert refused.stderr.strip() == line
    secure = console_proc(
        gstack, name="console-secure", extra_env={"DORMANT_CONSOLE_SECURE_COOKIES": "True"}
    )
    with secure.http() as browser:
        assert "secure" in browser.get("/login").headers["set-cookie"].lower()


def test_a_cookie_saved_before_sign_out_is_refused_after_it(
    gstack: Stack, console: Console, waiting: str
) -> None:
    with console.http() as browser:
        assert _sign_in(browser, PASSWORD).status_code == 303
        page = browser.get(f"/instances/{waiting}").text
        assert ORDER in html.unescape(page)
        saved, token = browser.cookies["dormant_console"], _csrf(page)
        browser.post("/logout", data={"csrf": token})
    with console.http(cookies={"dormant_console": saved}) as replay:
        page = replay.get(f"/instances/{waiting}").text
        assert ORDER not in html.unescape(page) and "Sign in" in page
        # The saved cookie still carries its CSRF token: only the session is gone.
        refused = replay.post("/jobs/pause", data={"csrf": token, "job_type": "replayed"})
        assert refused.status_code == 401
    assert "replayed" not in gstack.client.paused_job_types()


def _headers_then_wait(console: Console, head: str, sent: int) -> str:
    """Send a request's head and ``sent`` bytes of its body, then read the answer: a
    server that reads the body before answering would wait for the rest for ever."""
    host, port = console.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        part = b'--b\r\nContent-Disposition: form-data; name="f"; filename="f"\r\n\r\n'
        sock.sendall(head.encode() + part + b"x" * sent)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.decode("latin-1")


def test_an_anonymous_upload_is_refused_before_its_body_is_read(
    gstack: Stack, console: Console
) -> None:
    size = 20 * 1024 * 1024
    for path, status in (
        ("/jobs/pause", "401"),
        ("/instances/x/variables", "401"),
        ("/login", "413"),
    ):
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: multipart/form-data; boundary=b\r\n"
            f"Content-Length: {size}\r\n\r\n"
        )
        answer = _headers_then_wait(console, head, 65536)
        assert answer.startswith(f"HTTP/1.1 {status} "), (path, answer[:200])
    ro = console_proc(gstack, "--read-only", name="console-ro-upload")
    head = (
        "POST /jobs/pause HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: {BASIC['Authorization']}\r\n"
        "Content-Type: multipart/form-data; boundary=b\r\n"
        f"Content-Length: {size}\r\n\r\n"
    )
    assert _headers_then_wait(ro, head, 65536).startswith("HTTP/1.1 403 ")


def test_the_settings_boolean_reads_one_set_of_spellings() -> None:
    from dormant.engine_core.errors import InvalidSetting
    from dormant.persistence.settings import Settings, parse_bool

    for word in ("1", "true", "True", "YES", "on"):
        assert parse_bool("X", word) is True
    for word in ("0", "false", "No", "off", ""):
        assert parse_bool("X", word) is False
    for word in ("ture", "y", "2", "enabled"):
        with pytest.raises(InvalidSetting, match=f"X={word!r} is not a boolean"):
            parse_bool("X", word)
    with pytest.raises(InvalidSetting, match="eager='y' is not a boolean"):
        Settings.from_env({"DORMANT_JOB_TYPES": '{"charge": {"eager": "y"}}'})
    eager = Settings.from_env({"DORMANT_JOB_TYPES": '{"charge": {"eager": "on"}}'})
    assert eager.job_types["charge"].eager is True


def test_in_process_a_foreign_host_is_refused_before_routing(tmp_path: Path) -> None:
    """The in-process app answers the same: a foreign Host is refused before routing."""
    from starlette.testclient import TestClient

    from dormant.tasks.client import Client
    from dormant.tasks.console import create_app
    from dormant.tasks.console.config import ConsoleConfig

    client = Client(f"sqlite:///{tmp_path / 'c.db'}", "memory://")
    try:
        app = create_app(ConsoleConfig(secret="s"), client=client)
        with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as tc:
            assert tc.get("/processes").status_code == 200
            assert tc.get("/processes", headers={"Host": "evil.example"}).status_code == 400
            assert tc.get("/processes", headers={"Host": "[::1]:8080"}).status_code == 200
    finally:
        client._store.close()


def test_the_throttle_grows_its_delay_then_locks_an_address_and_then_everyone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The bounds of docs/limits.md, on the throttle itself with a clock of its own."""
    from prometheus_client import REGISTRY

    from dormant.tasks.console.throttle import SignInThrottle

    def lockouts(scope: str) -> float:
        found = REGISTRY.get_sample_value(
            "dormant_console_sign_in_lockouts_total", {"scope": scope}
        )
        return found or 0.0

    now = [1000.0]
    throttle = SignInThrottle(clock=lambda: now[0])
    before = lockouts("client"), lockouts("global")
    delays = [throttle.failed("203.0.113.9") for _ in range(9)]
    assert delays == [0.0, 0.0, 0.0, 0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    assert throttle.refused_for("203.0.113.9") == 0.0
    throttle.failed("203.0.113.9")  # the 10th
    assert throttle.refused_for("203.0.113.9") == 300.0
    assert throttle.refused_for("198.51.100.1") == 0.0  # another address is not locked
    now[0] += 300.0
    assert throttle.refused_for("203.0.113.9") == 0.0  # the lockout ends
    throttle.failed("198.51.100.1")
    throttle.succeeded("198.51.100.1")  # a success forgets the failures
    assert [throttle.failed("198.51.100.1") for _ in range(4)][-1] == 0.25
    # Guessing spread over many addresses: 100 failures within 10 minutes lock everyone.
    for n in range(100 - 15):
        throttle.failed(f"10.0.{n // 200}.{n % 200}")
    assert throttle.refused_for("192.0.2.1") == 60.0
    assert (lockouts("client"), lockouts("global")) == (before[0] + 1, before[1] + 1)
    assert "every sign-in refused for 60 s" in caplog.text

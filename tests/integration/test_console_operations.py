"""The console's operations on running instances, against a real ``dormant console``
process, PostgreSQL, Redis and a real worker: suspend / resume and set variables (then
retry) on the instance page, "retry all matching" on the incidents list reported with
exact counts on the batch page, and every one of these refused without credentials,
without the form's CSRF token, and in ``--read-only`` mode — with nothing changed.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tasks.console import operations
from tests.integration.conftest import Stack, _urls, wait_for
from tests.integration.console.kit import (
    MODEL,
    PASSWORD,
    USER,
    Console,
    console_proc,
    open_incident,
)

pytestmark = pytest.mark.integration

BASIC = {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}
BULK_KEY = "payment-bulk"  # its own process, so a filter selects this test's incidents only


@pytest.fixture(scope="module")
def ostack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("console-operations")
    with _urls("pg_redis", tmp, request) as urls:
        s = Stack(*urls, tmp)
        try:
            s.worker()
            s.beat()
            s.client.deploy(MODEL)
            bulk = tmp / "bulk.bpmn"
            bulk.write_text(MODEL.read_text().replace('id="payment"', f'id="{BULK_KEY}"'))
            s.client.deploy(bulk)
            yield s
        finally:
            s.close()


@pytest.fixture(scope="module")
def console(ostack: Stack) -> Console:
    return console_proc(ostack)


@contextmanager
def _in_process(stack: Stack) -> Iterator[Any]:
    """The console app on the stack's database, in this process (to patch a bound)."""
    from starlette.testclient import TestClient

    from tasks.console import create_app
    from tasks.console.config import ConsoleConfig

    with TestClient(create_app(ConsoleConfig(secret="s"), client=stack.client)) as tc:
        yield tc


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


def _waiting_for_payment(stack: Stack, tmp_path: Path) -> str:
    """An instance past its job, waiting at the message ``paid``."""
    flag = tmp_path / "set"
    flag.touch()
    iid = stack.client.start("payment", {"flag": str(flag), "order": "o-1"})
    wait_for(
        lambda: any(t.node_id == "paid" for t in stack.client.instance(iid).tokens),
        30,
        what="the wait at paid",
    )
    return iid


def _page(ops: object, iid: str) -> str:
    return html.unescape(ops.get(f"/instances/{iid}").text)  # type: ignore[attr-defined]


def test_suspend_then_resume_from_the_instance_page(
    ostack: Stack, console: Console, tmp_path: Path
) -> None:
    iid = _waiting_for_payment(ostack, tmp_path)
    back = f"/instances/{iid}"
    with console.http(headers=BASIC) as ops:
        page = _page(ops, iid)
        assert 'data-action="suspend"' in page and 'id="instance-suspended"' not in page
        done = ops.post(f"{back}/suspend", data={"csrf": _csrf(page), "next": back})
        assert done.status_code == 303 and done.headers["location"] == back
        assert f"suspending {iid}" in _page(ops, iid)  # the CLI's words
        wait_for(lambda: ostack.client.instance(iid).suspended, 30, what="suspended")
        page = _page(ops, iid)
        assert 'id="instance-suspended"' in page and 'data-action="resume"' in page
        assert 'id="suspended-note"' in ops.get(f"{back}?partial=1").text  # live, too
        # Suspending twice is refused, flashed as the CLI prints it.
        ops.post(f"{back}/suspend", data={"csrf": _csrf(page), "next": back})
        assert f"error: instance {iid} is already suspended" in _page(ops, iid)

        ops.post(f"{back}/resume", data={"csrf": _csrf(page), "next": back})
        assert f"resuming {iid}" in _page(ops, iid)
        wait_for(lambda: not ostack.client.instance(iid).suspended, 30, what="resumed")
        page = _page(ops, iid)
        assert 'id="instance-suspended"' not in page and 'data-action="suspend"' in page
        assert 'id="suspended-note"' not in ops.get(f"{back}?partial=1").text
    ostack.client.send_message("paid", "o-1")  # a resumed instance goes on
    ostack.wait_status(iid, "completed")


def test_set_a_variable_then_retry_the_incident_and_the_instance_completes(
    ostack: Stack, console: Console, tmp_path: Path
) -> None:
    iid = ostack.client.start("payment", {"flag": str(tmp_path / "missing"), "note": "x"})
    inc = open_incident(ostack, iid)
    flag = tmp_path / "present"
    flag.touch()
    back = f"/instances/{iid}"
    with console.http(headers=BASIC) as ops:
        page = _page(ops, iid)
        assert 'data-action="set-variables"' in page
        token = _csrf(page)
        # Not JSON where it must be: refused as the CLI refuses it, nothing sent.
        revision = ostack.client.instance(iid).revision
        ops.post(f"{back}/variables", data={"csrf": token, "next": back, "vars": "=1"})
        assert "error: --var '=1' is not of the form name=value" in _page(ops, iid)
        assert ostack.client.instance(iid).revision == revision
        form = {
            "csrf": token,
            "next": back,
            "vars": f"flag={json.dumps(str(flag))}\ntries=2",
            "unset": "note",
            "scope": "s0",
            "retry": "1",
        }
        done = ops.post(f"{back}/variables", data=form)
        assert done.status_code == 303 and done.headers["location"] == back
        assert f"setting flag, tries, -note on {iid} and retrying" in _page(ops, iid)
    view = ostack.wait_status(iid, "completed")
    assert view.variables["flag"] == str(flag) and view.variables["tries"] == 2
    assert "note" not in view.variables
    assert ostack.client.incident(inc.id).state == "resolved"


def test_retry_all_matching_reports_exact_counts_on_the_batch_page(
    ostack: Stack, console: Console, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = ostack.client
    ids = [client.start(BULK_KEY, {"flag": str(tmp_path / f"no-{i}")}) for i in range(4)]
    wait_for(lambda: len(client.incidents(key=BULK_KEY, state="open")) == 4, 60, what="4 incidents")
    client.suspend(ids[0])  # its incident is refused: a suspended instance is not retried
    wait_for(lambda: client.instance(ids[0]).suspended, 30, what="suspended")
    listing = f"/incidents?process={BULK_KEY}&node=charge&cause_class=RuntimeError"
    with console.http(headers=BASIC) as ops:
        page = ops.get(listing).text
        assert 'data-action="retry-matching"' in page
        form = {
            "csrf": _csrf(page),
            "next": listing,
            "process": BULK_KEY,
            "node": "charge",
            "cause_class": "RuntimeError",
        }
        started = ops.post("/incidents/retry-matching", data=form)
        assert started.status_code == 303
        where = started.headers["location"]
        assert where.startswith("/batches/")
        batch_id = where.rsplit("/", 1)[1]
        assert client.batch(batch_id).selected == 4
        client.wait_batch(batch_id, timeout=120)
        shown = html.unescape(ops.get(where).text)
        assert f"batch {batch_id}: incident_retry, 4 selected" in shown  # the flash
        assert "selected 4, retried 3, refused 1: 1 InvalidOperation" in shown
        refused_row = re.search(r'<tr data-target="[^"]+" data-outcome="refused">.*</tr>', shown)
        assert refused_row, "no refused target on the batch page"
        assert f"instance {ids[0]} ({BULK_KEY} v1) is suspended" in refused_row.group(0)
        assert re.search(r'id="batch-applied">3<', shown)
        assert re.search(r'id="batch-refused">1<', shown)
        assert re.search(r'id="batch-state">completed<', shown)
        assert shown.count('data-outcome="refused"') == 1
        assert shown.count('data-outcome="applied"') == 3
        assert BULK_KEY in shown and "RuntimeError" in shown  # the filter
        listed = ops.get("/batches?partial=1").text  # the live fragment of the list
        assert f'data-batch="{batch_id}"' in listed
        # A long batch: every refused target is listed, the rest only up to the cap.
        monkeypatch.setattr(operations, "_ITEMS_SHOWN", 2)
        with _in_process(ostack) as tc:
            capped = html.unescape(tc.get(where).text)
        assert capped.count('data-outcome="refused"') == 1
        assert capped.count('data-outcome="applied"') == 1
        assert f"… and 2 more targets (every one: dormant batches show {batch_id}" in (
            re.sub(r"</?code>", "", capped)
        )
        # No process chosen: refused with the reason, no batch written.
        before = len(client.batches())
        ops.post("/incidents/retry-matching", data={"csrf": form["csrf"], "next": "/incidents"})
        assert "error: nothing selected: give ids, or --process KEY with filters" in html.unescape(
            ops.get("/incidents").text
        )
        assert len(client.batches()) == before


def _actions(iid: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (f"/instances/{iid}/suspend", {}),
        (f"/instances/{iid}/resume", {}),
        (f"/instances/{iid}/variables", {"vars": "x=1", "retry": "1"}),
        ("/incidents/retry-matching", {"process": BULK_KEY}),
    ]


def test_each_action_is_refused_without_credentials_csrf_or_in_read_only(
    ostack: Stack, console: Console, tmp_path: Path
) -> None:
    client = ostack.client
    iid = _waiting_for_payment(ostack, tmp_path)
    revision = client.instance(iid).revision
    batches = len(client.batches())
    ro = console_proc(ostack, "--read-only", name="console-ro")
    with console.http() as anonymous:
        page = _page(anonymous, iid)
        assert 'data-action="suspend"' not in page and "set-variables" not in page
        for path, data in _actions(iid):
            refused = anonymous.post(path, data=data | {"csrf": "x"})
            assert refused.status_code == 401, path
            assert refused.text.startswith("refused: actions need authentication"), path
    with console.http(headers=BASIC) as ops:
        token = _csrf(_page(ops, iid))
        for path, data in _actions(iid):
            for bad in ({}, {"csrf": token[::-1]}):
                refused = ops.post(path, data=data | bad)
                assert refused.status_code == 403, path
                assert "CSRF token is missing or wrong" in refused.text, path
    with ro.http(headers=BASIC) as ops:
        page = _page(ops, iid)
        assert 'data-action="suspend"' not in page and "set-variables" not in page
        assert 'data-action="retry-matching"' not in ops.get(f"/incidents?process={BULK_KEY}").text
        token = _csrf(page)  # the sign-out form still has one
        for path, data in _actions(iid):
            refused = ops.post(path, data=data | {"csrf": token})
            assert refused.status_code == 403, path
            assert refused.text == "refused: this console runs read-only", path
    # Nothing of the above reached the instance, and no batch was written.
    view = client.instance(iid)
    assert view.revision == revision and not view.suspended and "x" not in view.variables
    assert len(client.batches()) == batches

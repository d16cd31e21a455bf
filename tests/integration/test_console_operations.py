"""The console's operations on running instances, against a real ``dormant console``
process, PostgreSQL, Redis and a real worker: suspend / resume, set variables (then
retry), migrate (with a node map; a plan that does not fit refused with its reasons)
and modify on the instance page, "retry all matching" on the incidents list and "cancel
all matching" on the instances list reported with exact counts on the batch page, and
every one of these refused without credentials, without the form's CSRF token, and in
``--read-only`` mode — with nothing changed. Also "migrate all matching" and "set
variables on all matching" on the instances list, and pausing / resuming a job type on
the job types page.
"""

from __future__ import annotations

import base64
import html
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dormant.persistence import job_pause
from dormant.tasks.console import operations
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
MIGRATE_KEY = "payment-migrate"  # gets a v2 in its test; "payment" stays at v1
CANCEL_KEY = "payment-cancel"
RESOLVE_KEY = "payment-resolve"
BULK_MIGRATE_KEY = "payment-bulk-migrate"  # gets a v2 in its test
VARS_KEY = "payment-vars"
JOB_TYPE = "inc-flag"  # the job type of MODEL's service task


@pytest.fixture(scope="module")
def ostack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("console-operations")
    with _urls("pg_redis", tmp, request) as urls:
        s = Stack(*urls, tmp)
        try:
            s.worker_and_beat()
            s.client.deploy(MODEL)
            bulk = tmp / "bulk.bpmn"
            bulk.write_text(MODEL.read_text().replace('id="payment"', f'id="{BULK_KEY}"'))
            s.client.deploy(bulk)
            for key in (MIGRATE_KEY, CANCEL_KEY, RESOLVE_KEY, BULK_MIGRATE_KEY, VARS_KEY):
                model = tmp / f"{key}.bpmn"
                model.write_text(MODEL.read_text().replace('id="payment"', f'id="{key}"'))
                s.client.deploy(model)
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

    from dormant.tasks.console import create_app
    from dormant.tasks.console.config import ConsoleConfig

    app = create_app(ConsoleConfig(secret="s"), client=stack.client)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as tc:
        yield tc


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


def _waiting_for_payment(
    stack: Stack, tmp_path: Path, key: str = "payment", order: str = "o-1"
) -> str:
    """An instance past its job, waiting at the message ``paid``."""
    flag = tmp_path / "set"
    flag.touch()
    iid = stack.client.start(key, {"flag": str(flag), "order": order})
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
    assert ostack.client.incident(inc.id).state == "retried"


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
            "confirm": "1",  # past the confirmation page (test_console_pages.py)
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
        ops.post(
            "/incidents/retry-matching",
            data={"csrf": form["csrf"], "confirm": "1", "next": "/incidents"},
        )
        assert "error: nothing selected: give ids, or --process KEY with filters" in html.unescape(
            ops.get("/incidents").text
        )
        assert len(client.batches()) == before


def test_migrate_from_the_instance_page_onto_a_renamed_node_then_it_goes_on(
    ostack: Stack, console: Console, tmp_path: Path
) -> None:
    client = ostack.client
    iid = _waiting_for_payment(ostack, tmp_path, MIGRATE_KEY, "o-migrate")
    v2 = tmp_path / "v2.bpmn"
    source = MODEL.read_text().replace('id="payment"', f'id="{MIGRATE_KEY}"')
    for attr in ("id", "sourceRef", "targetRef", "bpmnElement"):
        source = source.replace(f'{attr}="paid"', f'{attr}="settled"')
    v2.write_text(source)
    client.deploy(v2)
    back = f"/instances/{iid}"
    with console.http(headers=BASIC) as ops:
        page = _page(ops, iid)
        assert 'data-action="migrate"' in page
        token = _csrf(page)
        # Without the map the plan does not fit: refused with the Client's reasons.
        revision = client.instance(iid).revision
        reasons = client.migration_problems(iid, 2)
        assert reasons
        done = ops.post(f"{back}/migrate", data={"csrf": token, "next": back, "version": "2"})
        assert done.status_code == 303 and done.headers["location"] == back
        shown = _page(ops, iid)
        assert f"error: instance {iid} cannot move to v2: " + "; ".join(reasons) in shown
        # A malformed map and a version that is not one: refused as the CLI refuses them.
        form = {"csrf": token, "next": back, "version": "2", "maps": "paid"}
        ops.post(f"{back}/migrate", data=form)
        assert "error: --map 'paid' is not of the form old_node=new_node" in _page(ops, iid)
        ops.post(f"{back}/migrate", data=form | {"version": "two", "maps": "paid=settled"})
        assert "error: --to 'two' is not a version number" in _page(ops, iid)
        view = client.instance(iid)
        assert view.revision == revision and view.version == 1
        ops.post(f"{back}/migrate", data=form | {"maps": "paid=settled"})
        assert f"migrating {iid} to v2" in _page(ops, iid)
    wait_for(lambda: client.instance(iid).version == 2, 30, what="the migration")
    assert [t.node_id for t in client.instance(iid).tokens] == ["settled"]
    client.send_message("paid", "o-migrate")  # the renamed wait still takes the message
    ostack.wait_status(iid, "completed")


def test_modify_moves_a_token_from_the_instance_page(
    ostack: Stack, console: Console, tmp_path: Path
) -> None:
    iid = _waiting_for_payment(ostack, tmp_path, order="o-modify")
    back = f"/instances/{iid}"
    with console.http(headers=BASIC) as ops:
        page = _page(ops, iid)
        assert 'data-action="modify"' in page
        token = _csrf(page)
        ops.post(f"{back}/modify", data={"csrf": token, "next": back})
        assert "error: nothing to modify: name nodes to cancel or to start before" in (
            _page(ops, iid)
        )
        form = {"csrf": token, "next": back, "cancel": "paid", "start_before": "done"}
        done = ops.post(f"{back}/modify", data=form)
        assert done.status_code == 303 and done.headers["location"] == back
        assert f"modifying {iid}" in _page(ops, iid)
    view = ostack.wait_status(iid, "completed")  # the token skipped the wait at paid
    assert "paid" not in [t.node_id for t in view.tokens]


def test_cancel_all_matching_reports_exact_counts_on_the_batch_page(
    ostack: Stack, console: Console, tmp_path: Path
) -> None:
    client = ostack.client
    waiting = [_waiting_for_payment(ostack, tmp_path, CANCEL_KEY, f"o-c{i}") for i in range(3)]
    # At the job (its flag missing, so an incident): not at paid, so not selected.
    elsewhere = client.start(CANCEL_KEY, {"flag": str(tmp_path / "missing")})
    open_incident(ostack, elsewhere)
    listing = f"/instances?process={CANCEL_KEY}&node=paid"
    with console.http(headers=BASIC) as ops:
        page = ops.get(listing).text
        assert 'data-action="cancel-matching"' in page
        form = {
            "csrf": _csrf(page),
            "confirm": "1",
            "next": listing,
            "process": CANCEL_KEY,
            "node": "paid",
        }
        # A filter the Selector does not have is refused, not dropped: nothing written.
        before = len(client.batches())
        ops.post("/instances/cancel-matching", data=form | {"has_incident": "1"})
        assert "error: 'has open incident' does not filter a bulk operation" in html.unescape(
            ops.get("/instances").text
        )
        assert len(client.batches()) == before
        started = ops.post("/instances/cancel-matching", data=form)
        assert started.status_code == 303
        where = started.headers["location"]
        assert where.startswith("/batches/")
        batch_id = where.rsplit("/", 1)[1]
        client.wait_batch(batch_id, timeout=120)
        shown = html.unescape(ops.get(where).text)
        assert f"batch {batch_id}: cancel, 3 selected" in shown
        assert "selected 3, cancelled 3, refused 0" in shown
        assert shown.count('data-outcome="applied"') == 3
    for iid in waiting:
        ostack.wait_status(iid, "terminated")
    assert client.instance(elsewhere).status == "active_incidents"


def test_resolve_all_matching_on_the_incidents_list(
    ostack: Stack, console: Console, tmp_path: Path
) -> None:
    client = ostack.client
    for i in range(2):
        client.start(RESOLVE_KEY, {"flag": str(tmp_path / f"no-{i}")})
    wait_for(
        lambda: len(client.incidents(key=RESOLVE_KEY, state="open")) == 2, 60, what="2 incidents"
    )
    listing = f"/incidents?process={RESOLVE_KEY}"
    with console.http(headers=BASIC) as ops:
        page = ops.get(listing).text
        assert 'data-action="resolve-matching"' in page and 'data-action="drop-matching"' in page
        form = {"csrf": _csrf(page), "confirm": "1", "next": listing, "process": RESOLVE_KEY}
        started = ops.post("/incidents/resolve-matching", data=form)
        assert started.status_code == 303 and started.headers["location"].startswith("/batches/")
        batch_id = started.headers["location"].rsplit("/", 1)[1]
        client.wait_batch(batch_id, timeout=120)
        shown = html.unescape(ops.get(started.headers["location"]).text)
        assert f"batch {batch_id}: incident_resolve, 2 selected" in shown
        assert "selected 2, resolved 2, refused 0" in shown
    assert client.incidents(key=RESOLVE_KEY, state="open") == []


def _renamed(tmp_path: Path, key: str) -> Path:
    """``key``'s model with the message wait ``paid`` renamed to ``settled``."""
    v2 = tmp_path / f"{key}-v2.bpmn"
    source = MODEL.read_text().replace('id="payment"', f'id="{key}"')
    for attr in ("id", "sourceRef", "targetRef", "bpmnElement"):
        source = source.replace(f'{attr}="paid"', f'{attr}="settled"')
    v2.write_text(source)
    return v2


def _start_batch(ops: Any, path: str, form: dict[str, str]) -> tuple[str, str]:
    started = ops.post(path, data=form)
    assert started.status_code == 303, started.text
    where: str = started.headers["location"]
    assert where.startswith("/batches/"), html.unescape(ops.get("/instances").text)
    return where, where.rsplit("/", 1)[1]


def test_migrate_all_matching_onto_a_renamed_node_then_they_go_on(
    ostack: Stack, console: Console, tmp_path: Path
) -> None:
    client = ostack.client
    orders = [f"o-bm{i}" for i in range(2)]
    ids = [_waiting_for_payment(ostack, tmp_path, BULK_MIGRATE_KEY, o) for o in orders]
    client.deploy(_renamed(tmp_path, BULK_MIGRATE_KEY))
    listing = f"/instances?process={BULK_MIGRATE_KEY}&node=paid"
    with console.http(headers=BASIC) as ops:
        page = ops.get(listing).text
        assert 'data-action="migrate-matching"' in page
        form = {
            "csrf": _csrf(page),
            "confirm": "1",
            "next": listing,
            "process": BULK_MIGRATE_KEY,
            "node": "paid",
        }
        # A malformed map and a target that is no version: refused as the CLI refuses them.
        before = len(client.batches())
        ops.post("/instances/migrate-matching", data=form | {"version_to": "2", "maps": "paid"})
        assert "error: --map 'paid' is not of the form old_node=new_node" in html.unescape(
            ops.get("/instances").text
        )
        ops.post("/instances/migrate-matching", data=form | {"version_to": "v2"})
        assert "error: --to 'v2' is not a version number" in html.unescape(
            ops.get("/instances").text
        )
        assert len(client.batches()) == before
        where, batch_id = _start_batch(
            ops,
            "/instances/migrate-matching",
            form | {"version_to": "2", "maps": "paid=settled"},
        )
        client.wait_batch(batch_id, timeout=120)
        shown = html.unescape(ops.get(where).text)
        assert f"batch {batch_id}: migrate, 2 selected" in shown
        assert "selected 2, migrated 2, refused 0" in shown
        assert shown.count('data-outcome="applied"') == 2
    for iid in ids:
        wait_for(lambda i=iid: client.instance(i).version == 2, 30, what="the migration")
        assert [t.node_id for t in client.instance(iid).tokens] == ["settled"]
    for iid, order in zip(ids, orders, strict=True):
        client.send_message("paid", order)  # the renamed waits still take the message
        ostack.wait_status(iid, "completed")


def test_set_variables_on_all_matching_counted_on_the_batch_page(
    ostack: Stack, console: Console, tmp_path: Path
) -> None:
    client = ostack.client
    ids = [_waiting_for_payment(ostack, tmp_path, VARS_KEY, f"o-v{i}") for i in range(3)]
    listing = f"/instances?process={VARS_KEY}"
    with console.http(headers=BASIC) as ops:
        page = ops.get(listing).text
        assert 'data-action="set-variables-matching"' in page
        form = {"csrf": _csrf(page), "confirm": "1", "next": listing, "process": VARS_KEY}
        before = len(client.batches())
        ops.post("/instances/set-variables-matching", data=form | {"vars": "=1"})
        assert "error: --var '=1' is not of the form name=value" in html.unescape(
            ops.get("/instances").text
        )
        assert len(client.batches()) == before
        where, batch_id = _start_batch(
            ops, "/instances/set-variables-matching", form | {"vars": 'tag="fixed"\nlevel=3'}
        )
        client.wait_batch(batch_id, timeout=120)
        shown = html.unescape(ops.get(where).text)
        assert f"batch {batch_id}: set_variables, 3 selected" in shown
        assert "selected 3, changed 3, refused 0" in shown
    for iid in ids:
        wait_for(
            lambda i=iid: client.instance(i).variables.get("tag") == "fixed", 30, what="the change"
        )
        assert client.instance(iid).variables["level"] == 3


def _held(stack: Stack, iid: str) -> bool:
    """Whether a job of ``iid`` is held by the pause (not sent, not in the outbox)."""
    from sqlalchemy import select

    from dormant.persistence.tables import held_jobs

    with stack.client._store.engine.connect() as conn:
        payloads = conn.execute(
            select(held_jobs.c.payload).where(held_jobs.c.job_type == JOB_TYPE)
        ).scalars()
        return any(p.get("instance_id") == iid for p in payloads)


def test_pause_a_job_type_holds_a_new_job_until_resumed(
    ostack: Stack, console: Console, tmp_path: Path
) -> None:
    client = ostack.client
    with console.http(headers=BASIC) as ops:
        page = ops.get("/jobs").text
        assert 'data-action="pause-job-type"' in page and 'href="/jobs"' in page
        token = _csrf(page)
        done = ops.post("/jobs/pause", data={"csrf": token, "next": "/jobs", "job_type": JOB_TYPE})
        assert done.status_code == 303 and done.headers["location"] == "/jobs"
        try:
            assert f"paused {JOB_TYPE}" in html.unescape(ops.get("/jobs").text)
            ops.post("/jobs/pause", data={"csrf": token, "next": "/jobs", "job_type": JOB_TYPE})
            assert f"error: job type '{JOB_TYPE}' is already paused" in html.unescape(
                ops.get("/jobs").text
            )
            # A worker reads the paused types at most once a second (persistence/
            # job_pause.py): a job sent within that second of the pause may still go.
            time.sleep(2 * job_pause._CACHE_SECONDS)
            flag = tmp_path / "set"
            flag.touch()
            iid = client.start("payment", {"flag": str(flag), "order": "o-pause"})
            wait_for(lambda: _held(ostack, iid), 30, what="the instance's job held")
            live = ops.get("/jobs?partial=1").text  # the live fragment counts it
            assert f'data-job-type="{JOB_TYPE}"' in live and 'data-held="0"' not in live
            assert 'data-action="resume-job-type"' in live
            assert client.instance(iid).status == "active"
            assert "paid" not in [t.node_id for t in client.instance(iid).tokens]
        finally:
            resumed = ops.post(
                "/jobs/resume", data={"csrf": token, "next": "/jobs", "job_type": JOB_TYPE}
            )
        assert resumed.status_code == 303
        # Other tests' instances hold jobs of the type too: at least this one was sent.
        sent = re.search(rf"resumed {JOB_TYPE}: (\d+) held job\(s\) sent", ops.get("/jobs").text)
        assert sent and int(sent.group(1)) >= 1
        assert not _held(ostack, iid)
        assert JOB_TYPE not in client.paused_job_types()
        ops.post("/jobs/resume", data={"csrf": token, "next": "/jobs", "job_type": JOB_TYPE})
        assert f"error: job type '{JOB_TYPE}' is not paused" in html.unescape(ops.get("/jobs").text)
    wait_for(
        lambda: any(t.node_id == "paid" for t in client.instance(iid).tokens),
        30,
        what="the job run after resume",
    )
    client.send_message("paid", "o-pause")
    ostack.wait_status(iid, "completed")


def _actions(iid: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (f"/instances/{iid}/suspend", {}),
        (f"/instances/{iid}/resume", {}),
        (f"/instances/{iid}/variables", {"vars": "x=1", "retry": "1"}),
        (f"/instances/{iid}/migrate", {"version": "1"}),
        (f"/instances/{iid}/modify", {"cancel": "paid", "start_before": "done"}),
        *((f"/instances/{op}-matching", {"process": "payment"}) for op in ("cancel", "suspend")),
        *((f"/incidents/{op}-matching", {"process": BULK_KEY}) for op in ("retry", "drop")),
        ("/instances/migrate-matching", {"process": "payment", "version_to": "1"}),
        ("/instances/set-variables-matching", {"process": "payment", "vars": "x=1"}),
        ("/jobs/pause", {"job_type": JOB_TYPE}),
        ("/jobs/resume", {"job_type": JOB_TYPE}),
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
        assert 'data-action="migrate"' not in page and 'data-action="modify"' not in page
        assert "-matching" not in anonymous.get("/instances?process=payment").text
        assert "pause-job-type" not in anonymous.get("/jobs").text
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
        assert "-matching" not in ops.get("/instances?process=payment").text
        assert "pause-job-type" not in ops.get("/jobs").text
        token = _csrf(page)  # the sign-out form still has one
        for path, data in _actions(iid):
            refused = ops.post(path, data=data | {"csrf": token})
            assert refused.status_code == 403, path
            assert refused.text == "refused: this console runs read-only", path
    # Nothing of the above reached the instance, and no batch was written.
    view = client.instance(iid)
    assert view.revision == revision and not view.suspended and "x" not in view.variables
    assert len(client.batches()) == batches
    assert JOB_TYPE not in client.paused_job_types()

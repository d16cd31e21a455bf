"""The console's pages in-process (Starlette's test client) on both backends, for what
issue 28 asked of them: destructive actions confirm first (bulk ones with their
count), a cancelled node is drawn withdrawn rather than completed, the history speaks
in business terms with the engine's facts behind a toggle, the favicon is served,
disabled buttons look disabled, the process page counts each element. A worker's step
is applied in-process with ``Store.apply`` (the very transaction a worker runs)."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select

from dormant.engine_core.triggers import Cancel, JobCompleted, JobFailed
from dormant.persistence.store import NewInstance
from dormant.persistence.tables import batches, inbox
from dormant.tasks.console.config import ConsoleConfig
from tests.integration.console.kit import MODEL

pytestmark = pytest.mark.integration


@pytest.fixture
def pages(db_url: str) -> Iterator[Any]:
    """The console on a loopback address with no credentials: the local operator's."""
    from starlette.testclient import TestClient

    from dormant.tasks.client import Client
    from dormant.tasks.console import create_app

    client = Client(db_url, "memory://")
    client.deploy(MODEL)
    for n in (1, 2):
        client._store.start(
            NewInstance("payment", f"inst-{n}", {"flag": "/nope"}, business_key=f"bk-{n}"),
            now=datetime.now(UTC),
        )
    app = create_app(ConsoleConfig(secret="s"), client=client)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as tc:
        yield tc
    client._store.close()


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


def _count(tc: Any, table: Any) -> int:
    with tc.app.state.client._store.engine.connect() as conn:
        found: int = conn.execute(select(func.count()).select_from(table)).scalar_one()
        return found


def test_cancel_of_an_instance_asks_first_and_acts_only_when_confirmed(pages: Any) -> None:
    token = _csrf(pages.get("/instances/inst-1").text)
    before = _count(pages, inbox)
    asked = pages.post(
        "/instances/inst-1/cancel", data={"csrf": token, "next": "/instances/inst-1"}
    )
    assert asked.status_code == 200
    page = html.unescape(asked.text)
    assert "Cancel instance?" in page and "Instance inst-1 is terminated" in page
    assert 'name="confirm" value="1"' in page and 'value="/instances/inst-1"' in page
    assert '<a href="/instances/inst-1" id="confirm-no">' in page  # the way back
    assert _count(pages, inbox) == before  # nothing sent
    done = pages.post(
        "/instances/inst-1/cancel",
        data={"csrf": token, "confirm": "1", "next": "/instances/inst-1"},
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"] == "/instances/inst-1"
    assert _count(pages, inbox) == before + 1  # the cancel trigger, durable in the inbox


def test_every_bulk_action_asks_first_with_its_count(pages: Any) -> None:
    listing = "/instances?process=payment"
    token = _csrf(pages.get(listing).text)
    base = {"csrf": token, "next": listing, "process": "payment"}
    for op, extra in (
        ("cancel", {}),
        ("suspend", {}),
        ("migrate", {"version_to": "1"}),
        ("set-variables", {"vars": "x=1"}),
    ):
        asked = pages.post(f"/instances/{op}-matching", data=base | extra)
        assert asked.status_code == 200, op
        assert re.search(r'id="confirm-count">2<', asked.text), op
        assert 'name="confirm" value="1"' in asked.text
        for name, value in extra.items():  # the form's own fields are carried over
            assert f'name="{name}" value="{value}"' in asked.text, op
    narrowed = pages.post("/instances/cancel-matching", data=base | {"business_key": "bk-1"})
    assert re.search(r'id="confirm-count">1<', narrowed.text)
    for op in ("retry", "resolve", "drop"):
        asked = pages.post(f"/incidents/{op}-matching", data=base)
        assert asked.status_code == 200 and 'id="confirm-count">0<' in asked.text, op
        assert 'id="confirm-yes" disabled' in asked.text  # nothing to act on
    assert _count(pages, batches) == 0
    started = pages.post(
        "/instances/cancel-matching", data=base | {"confirm": "1"}, follow_redirects=False
    )
    assert started.status_code == 303 and started.headers["location"].startswith("/batches/")
    assert _count(pages, batches) == 1


def test_a_cancelled_node_is_withdrawn_not_completed(pages: Any) -> None:
    before = pages.get("/api/instances/inst-1").json()["overlays"]
    assert before["charge"]["waiting"] and not before["charge"]["withdrawn"]
    store = pages.app.state.client._store
    store.apply("inst-1", Cancel(), datetime.now(UTC))
    after = pages.get("/api/instances/inst-1").json()
    assert after["status"] == "terminated"
    charge = after["overlays"]["charge"]
    assert charge["withdrawn"] is True and charge["completed"] is False
    assert after["overlays"]["placed"]["completed"] is True  # the start did complete
    page = pages.get("/instances/inst-1").text
    assert 'data-kind="Withdrawn"' in page


def test_the_history_speaks_business_terms_and_the_toggle_shows_the_facts(pages: Any) -> None:
    page = pages.get("/instances/inst-1").text
    assert '<input type="checkbox" id="show-internal"' in page
    history = page[page.index('id="history"') : page.index('id="facts"')]
    facts = page[page.index('id="facts"') :]
    # The history: business_history's lines, no bookkeeping fact among them.
    assert re.search(r'<li data-kind="Started" data-category="instance"', history)
    assert "Hydrated" not in history and "Dehydrated" not in history
    assert "instance started" in history.lower()
    # Behind the toggle: every fact as recorded, the internal ones marked.
    assert re.search(r'<li class="internal" data-kind="Hydrated">', facts)
    assert re.search(r'<li class="internal" data-kind="Dehydrated">', facts)
    assert re.search(r'<li data-kind="Started">', facts)
    css = pages.get("/static/console.css").text
    assert "ol.timeline.facts { display: none; }" in css
    assert "#show-internal:checked ~ #live ol.timeline.facts { display: block; }" in css
    assert "#show-internal:checked ~ #live #history { display: none; }" in css
    live = pages.get("/instances/inst-1?partial=1").text  # the live fragment has both
    assert 'data-category="instance"' in live
    assert '<li class="internal" data-kind="Hydrated">' in live


def test_favicon_and_disabled_buttons(pages: Any) -> None:
    icon = pages.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO header
    assert 'rel="icon" href="/static/favicon.ico"' in pages.get("/processes").text
    assert "button:disabled" in pages.get("/static/console.css").text


def test_the_flows_the_instance_took_are_drawn(pages: Any) -> None:
    """Before the job: only the start's flow. After it, past the gateway to the message
    wait: the gateway (which records no fact) is passed, so both of its flows on the
    way are taken, and the branch not taken is not."""
    assert pages.get("/api/instances/inst-2").json()["taken"] == ["f1"]
    client = pages.app.state.client
    client._store.start(
        NewInstance("payment", "inst-3", {"flag": "/nope", "order": "o-3"}),
        now=datetime.now(UTC),
    )
    job = next(w for w in client._store.queries.checkpoint("inst-3").waits.values() if w.job_type)
    client._store.apply("inst-3", JobCompleted(wait_id=job.id), datetime.now(UTC))
    state = pages.get("/api/instances/inst-3").json()
    assert state["overlays"]["paid"]["waiting"]
    assert state["taken"] == ["f1", "f2", "f4"]  # not f3 (to done), not f5 (not yet)
    page = pages.get("/instances/inst-3").text
    assert '<script type="application/json" id="diagram-taken">["f1", "f2", "f4"]</script>' in page
    # Without an order the gateway takes its default to the end: the branch through
    # the message wait (never reached: no fact names it) is not drawn.
    client._store.start(NewInstance("payment", "inst-4", {"flag": "/nope"}), now=datetime.now(UTC))
    job = next(w for w in client._store.queries.checkpoint("inst-4").waits.values() if w.job_type)
    client._store.apply("inst-4", JobCompleted(wait_id=job.id), datetime.now(UTC))
    done = pages.get("/api/instances/inst-4").json()
    assert done["status"] == "completed" and done["taken"] == ["f1", "f2", "f3"]


def test_the_process_page_counts_each_element(pages: Any) -> None:
    """Waiting (a live token there now), in incident (open incidents there) and passed
    (reached and left, by the instance's facts), per element, on the process page and
    under the diagram as the overlays' data. inst-1 fails its job (an incident at
    charge, its token still there), inst-2 waits at charge, inst-3 moves on to the
    message wait at paid, inst-4 ends at done; inst-5 is cancelled at charge
    (withdrawn: not passed)."""
    client = pages.app.state.client
    store, now = client._store, datetime.now(UTC)

    def job_of(iid: str) -> str:
        return next(w.id for w in store.queries.checkpoint(iid).waits.values() if w.job_type)

    store.apply("inst-1", JobFailed(wait_id=job_of("inst-1"), error="boom", retries=0), now)
    for n, order in ((3, {"order": "o-3"}), (4, {}), (5, {})):
        store.start(NewInstance("payment", f"inst-{n}", {"flag": "/nope"} | order), now=now)
    for iid in ("inst-3", "inst-4"):
        store.apply(iid, JobCompleted(wait_id=job_of(iid)), now)
    store.apply("inst-5", Cancel(), now)

    page = pages.get("/processes/payment/1")
    assert page.status_code == 200
    found = re.search(
        r'<script type="application/json" id="diagram-counts">(.*?)</script>', page.text
    )
    assert found is not None
    counts = json.loads(html.unescape(found.group(1)))
    assert counts["charge"] == {"waiting": 2, "incidents": 1, "passed": 2}
    assert counts["paid"] == {"waiting": 1, "incidents": 0, "passed": 0}
    assert counts["done"] == {"waiting": 0, "incidents": 0, "passed": 1}
    assert counts["placed"]["passed"] == 5
    assert '<tr data-node="charge">' in page.text  # the table beside the diagram
    assert 'src="/static/process.js"' in page.text
    assert "/processes/payment/1" in pages.get("/processes").text  # linked from the list
    assert pages.get("/processes/payment/9").status_code == 404
    assert "dm-counts" in pages.get("/static/process.js").text
    # It refreshes as the lists do (console.js): its own URL, a fragment with the counts.
    assert 'id="live" data-live="/processes/payment/1" data-interval="10000"' in page.text
    live = pages.get("/processes/payment/1?partial=1")
    assert "<html" not in live.text and 'id="diagram-counts"' in live.text
    assert '<tr data-node="charge">' in live.text and 'id="diagram-xml"' not in live.text
    assert pages.get("/processes/payment/9?partial=1").status_code == 404

"""The console's page of parked sweep rows (issue 24: "each failure parked on its own
row with its error and surfaced"), in-process on both backends: every parked inbox and
outbox row listed with its error; retry and drop each ask for a confirmation first,
act only once confirmed, and land in the audit trail; a read-only console shows no
button and refuses the POST."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import insert, select

from dormant.persistence import clock, inbox, parked
from dormant.persistence.tables import inbox as inbox_table
from dormant.persistence.tables import outbox
from dormant.tasks import wire

pytestmark = pytest.mark.integration


@pytest.fixture
def console(db_url: str) -> Iterator[tuple[Any, Any]]:
    from starlette.testclient import TestClient

    from dormant.tasks.client import Client
    from dormant.tasks.console import create_app
    from dormant.tasks.console.config import ConsoleConfig

    client = Client(db_url, "memory://")
    app = create_app(ConsoleConfig(secret="s"), client=client)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as tc:
        yield tc, client
    client._store.close()


def _park_two(client: Any) -> tuple[str, str]:
    engine = client._store.engine
    now = clock.now()
    in_id = inbox.record(engine, wire.START, "trigger.start", {"key": "nowhere"})
    with engine.begin() as conn:
        out_id = conn.execute(
            insert(outbox)
            .values(kind="ThrowSignal", payload=["not", "an", "object"], created_at=now)
            .returning(outbox.c.id)
        ).scalar_one()
    parked.park(engine, "inbox", in_id, "InvalidField: kwargs is not a JSON object", now)
    parked.park(engine, "outbox", out_id, "AttributeError: 'list' has no attribute 'get'", now)
    return f"inbox:{in_id}", f"outbox:{out_id}"


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def test_parked_rows_are_listed_then_retried_and_dropped_once_confirmed(
    console: tuple[Any, Any],
) -> None:
    tc, client = console
    in_ref, out_ref = _park_two(client)
    assert 'href="/parked"' in tc.get("/processes").text
    page = tc.get("/parked")
    assert page.status_code == 200
    text = html.unescape(page.text)
    for ref in (in_ref, out_ref):
        assert f'data-ref="{ref}"' in text
    assert "kwargs is not a JSON object" in text and "'list' has no attribute 'get'" in text
    assert f'data-ref="{in_ref}"' in tc.get("/parked", params={"partial": "1"}).text
    token = _csrf(page.text)

    # One click only asks; nothing is unparked yet.
    asked = tc.post("/parked/retry", data={"csrf": token, "ref": out_ref, "next": "/parked"})
    assert asked.status_code == 200 and "Retry parked row" in asked.text, asked.text
    assert {p.ref for p in client.parked_rows()} == {in_ref, out_ref}
    done = tc.post(
        "/parked/retry",
        data={"csrf": token, "ref": out_ref, "next": "/parked", "confirm": "1"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert {p.ref for p in client.parked_rows()} == {in_ref}
    with client._store.engine.connect() as conn:
        unparked = conn.execute(
            select(outbox.c.parked_at, outbox.c.published_at).where(
                outbox.c.id == int(out_ref.split(":")[1])
            )
        ).one()
    assert unparked == (None, None)  # the next sweep publishes it again

    tc.post("/parked/drop", data={"csrf": token, "ref": in_ref, "confirm": "1"})
    assert client.parked_rows() == []
    with client._store.engine.connect() as conn:
        gone = conn.execute(select(inbox_table.c.id).where(inbox_table.c.id == in_ref[6:]))
        assert gone.first() is None

    trail = {(e.action, e.target) for e in client.audit_log()}
    assert {("parked_retry", out_ref), ("parked_drop", in_ref)} <= trail
    # An unknown row is refused in the CLI's words, flashed on the page.
    again = tc.post("/parked/drop", data={"csrf": token, "ref": in_ref, "confirm": "1"})
    assert f"error: no parked row '{in_ref}'" in html.unescape(again.text)
    assert tc.post("/parked/nonsense", data={"csrf": token}).status_code == 404

    # Read-only: the rows listed, no button, the action refused, nothing changed.
    from starlette.testclient import TestClient

    from dormant.tasks.console import create_app
    from dormant.tasks.console.config import ConsoleConfig

    ref, _ = _park_two(client)
    app = create_app(ConsoleConfig(secret="s", read_only=True), client=client)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as ro:
        page = ro.get("/parked").text
        assert f'data-ref="{ref}"' in page and 'data-action="parked-drop"' not in page
        assert ro.post("/parked/drop", data={"ref": ref, "confirm": "1"}).status_code == 403
    assert ref in {p.ref for p in client.parked_rows()}

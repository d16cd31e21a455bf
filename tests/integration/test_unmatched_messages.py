"""Messages that went nowhere, end to end: a real worker on PostgreSQL + Redis and on
the embedded default; the producer's receipt, the CLI list and the console page."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import Stack, wait_for
from tests.integration.test_tasks import MESSAGE, MESSAGE_DEF, linear

pytestmark = pytest.mark.integration

# Long enough for a loaded machine; the receipt returns as soon as the message settles.
RECEIPT_SECONDS = 60.0


def ok(stack: Stack, *args: str) -> str:
    result = stack.run_cli(*args)
    assert result.returncode == 0, f"dormant {' '.join(args)}: {result.stderr}"
    return result.stdout


@pytest.mark.timeout(600)
def test_a_dropped_message_is_listed_and_its_receipt_says_so(shared_stack: Stack) -> None:
    stack = shared_stack
    client = stack.client
    model = linear("unmatched-flow", MESSAGE, extra=MESSAGE_DEF.replace('"paid"', '"unm-paid"'))
    client.deploy(model)
    iid = client.start("unmatched-flow", {"orderId": "u-1"})
    wait_for(lambda: client.instance(iid).waits, what="message wait")

    # Correlated: the one instance waiting for it, said by the CLI's receipt.
    said = ok(stack, "send-message", "unm-paid", "--key", "u-1", "--receipt", "60")
    assert said.strip().endswith(": correlated to 1 instance"), said
    stack.wait_status(iid, "completed")

    # Dropped: nobody waits for this key; the Client's receipt says so.
    receipt = client.send_message(
        "unm-paid", "u-nobody", message_id="unm-1", receipt=RECEIPT_SECONDS
    )
    assert (receipt.outcome, str(receipt)) == ("dropped", "unm-1: dropped")
    buffered = client.send_message("unm-paid", "u-2", ttl=600, receipt=RECEIPT_SECONDS)
    assert buffered.outcome == "buffered"

    listed = json.loads(ok(stack, "messages", "unmatched", "--name", "unm-paid", "--json"))
    assert [(m["name"], m["correlation_key"], m["message_id"]) for m in listed] == [
        ("unm-paid", "u-nobody", "unm-1")
    ]
    assert listed[0]["at"]
    assert ok(stack, "messages", "unmatched", "--name", "nothing-such").strip() in (
        "",
        "no unmatched messages",
    )
    refused = stack.run_cli("messages", "unmatched", "--limit", "0")
    assert refused.returncode == 2

    from starlette.testclient import TestClient

    from dormant.tasks.console import create_app
    from dormant.tasks.console.config import ConsoleConfig

    app = create_app(ConsoleConfig(secret="s"), client=client)
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as tc:
        nav = tc.get("/processes")
        assert 'href="/messages"' in nav.text
        page = tc.get("/messages", params={"name": "unm-paid"})
        assert page.status_code == 200
        assert 'data-message-id="unm-1"' in page.text and "u-nobody" in page.text
        assert "u-2" not in page.text  # buffered, not dropped
        live = tc.get("/messages", params={"partial": "1"})
        assert 'data-message-id="unm-1"' in live.text

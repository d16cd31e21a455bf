"""Every operator list takes a tenant (issue 27: "every list, filter, batch and metric
takes a tenant"): failed triggers, starts still queued and batches, through a Client
bound to a tenant and through ``dormant --tenant``, on the embedded default. (Instances,
incidents, deployments, tasks and unmatched messages: test_console_authz.py and
test_tenants.py.)"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from dormant.persistence.selection import Selector
from dormant.persistence.store import NewInstance
from dormant.tasks.cli import cli
from dormant.tasks.client import Client
from tests.integration.waitkit import end, model, start, user_task

pytestmark = pytest.mark.integration

ACME = "acme"


def _xml(key: str) -> str:
    return model(key, start() + user_task("ut") + end(), [("start", "ut"), ("ut", "end")])


@pytest.fixture
def urls(tmp_path: Path) -> Iterator[tuple[str, str]]:
    database, broker = f"sqlite:///{tmp_path / 't.db'}", "memory://"
    client = Client(database, broker)
    acme = client.for_tenant(ACME)
    client.deploy(_xml("home"))
    acme.deploy(_xml("away"))
    now = datetime.now(UTC)
    client._store.start(NewInstance("home", "h-1", {}), now=now)
    acme._store.start(NewInstance("away", "a-1", {}, tenant=ACME), now=now)
    kept = client._store.failed
    for instance_id, trigger_id in (("h-1", "t-home"), ("a-1", "t-away")):
        kept.keep_failed(
            "dormant.apply_trigger",
            "dormant.apply_trigger",
            {"instance_id": instance_id},
            RuntimeError("refused"),
            now,
            trigger_id=trigger_id,
            instance_id=instance_id,
        )
    # a start that never made its instance: its tenant is the one its body names
    kept.keep_failed(
        "dormant.start",
        "dormant.start",
        {"key": "away", "instance_id": "a-ghost", "tenant": ACME},
        RuntimeError("refused"),
        now,
        trigger_id="t-ghost",
        instance_id="a-ghost",
    )
    client.start("home", {})  # queued: no worker runs here
    acme.start("away", {})
    client.bulk("cancel", Selector(key="home"))
    acme.bulk("cancel", Selector(key="away"))
    try:
        yield database, broker
    finally:
        acme._store.close()
        client._store.close()


def test_a_bound_client_lists_its_tenants_only(urls: tuple[str, str]) -> None:
    everyone = Client(*urls)
    acme = everyone.for_tenant(ACME)
    assert {f.trigger_id for f in everyone.failed_triggers()} == {"t-home", "t-away", "t-ghost"}
    assert {f.trigger_id for f in acme.failed_triggers()} == {"t-away", "t-ghost"}
    assert {f.trigger_id for f in everyone.failed_triggers(tenant="<default>")} == {"t-home"}
    assert {q.key for q in everyone.queued_starts()} == {"home", "away"}
    assert [q.key for q in acme.queued_starts()] == ["away"]
    assert len(everyone.batches()) == 2
    assert [b.selector["key"] for b in acme.batches()] == ["away"]


def test_the_cli_lists_for_its_tenant(
    urls: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(os.environ, "DORMANT_DATABASE_URL", urls[0])
    monkeypatch.setitem(os.environ, "DORMANT_BROKER_URL", urls[1])
    runner = CliRunner()

    def listed(*args: str) -> list[dict[str, object]]:
        done = runner.invoke(cli, [*args, "--json"], catch_exceptions=False)
        assert done.exit_code == 0, done.output
        rows: list[dict[str, object]] = json.loads(done.output)
        return rows

    acme = ["--tenant", ACME]
    assert {r["trigger_id"] for r in listed(*acme, "triggers", "list")} == {"t-away", "t-ghost"}
    assert {r["trigger_id"] for r in listed("triggers", "list")} == {"t-home", "t-away", "t-ghost"}
    queued = listed(*acme, "instances", "list", "--status", "queued")
    assert [r["key"] for r in queued] == ["away"]

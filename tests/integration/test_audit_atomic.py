"""An operator action done on the spot commits with its audit row or not at all
(issue 27: "in the same transaction as the action"; docs/audit.md).

Each door's write (a deploy, a job type paused, resumed or given limits, a failed
trigger sent again, a parked row retried or dropped) takes the operator's command and
inserts its ``done`` row in its own transaction. Here the audit insert fails: the
action must then have had no effect at all — never an effect without its row. (Before,
the row was written after the action committed, and a failure there left the effect
unrecorded.) On the embedded default: the same code runs on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert

from dormant.persistence import audit, parked
from dormant.persistence.tables import inbox
from dormant.tasks.client import Client
from tests.integration.waitkit import end, model, start, user_task

pytestmark = pytest.mark.integration

XML = model("audited", start() + user_task("ut") + end(), [("start", "ut"), ("ut", "end")])


class AuditDown(RuntimeError):
    pass


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Client]:
    c = Client(f"sqlite:///{tmp_path / 'a.db'}", "memory://").acting_as("ops", "cli")
    try:
        yield c
    finally:
        c._store.close()


@pytest.fixture
def audit_down(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call it to make every audit insert from then on fail."""

    def down() -> None:
        def refuse(bind: Any, rows: list[dict[str, Any]]) -> None:
            raise AuditDown("the audit insert failed")

        monkeypatch.setattr(audit, "record", refuse)

    return down


def _parked_inbox_row(client: Client) -> str:
    now = datetime.now(UTC)
    with client._store.engine.begin() as conn:
        conn.execute(
            insert(inbox).values(id="in-1", kind="dormant.start", payload={}, created_at=now)
        )
    parked.park(client._store.engine, "inbox", "in-1", "a row no sweep could send", now)
    return "inbox:in-1"


def _failed_trigger(client: Client, trigger_id: str) -> str:
    return client._store.failed.keep_failed(
        "dormant.message",
        "dormant.message",
        {"name": "paid", "correlation_key": "o-1", "variables": {}},
        RuntimeError("the first try failed"),
        datetime.now(UTC),
        trigger_id=trigger_id,
    )


def test_a_deploy_is_recorded_with_it_or_not_made(
    client: Client, audit_down: Callable[[], None]
) -> None:
    audit_down()
    with pytest.raises(AuditDown):
        client.deploy(XML)
    assert client.deployments() == []
    assert client.audit_log() == []


def test_job_type_actions_are_recorded_with_them_or_not_done(
    client: Client, audit_down: Callable[[], None]
) -> None:
    client.pause_job_type("paused-before")
    before = client.audit_log()
    audit_down()
    with pytest.raises(AuditDown):
        client.pause_job_type("charge")
    with pytest.raises(AuditDown):
        client.resume_job_type("paused-before")
    with pytest.raises(AuditDown):
        client.set_job_type_limits("charge", concurrency=3)
    assert client.paused_job_types() == {"paused-before": 0}
    assert client._store.flow.limits_of("charge") is None
    assert client.audit_log() == before


def test_a_failed_trigger_or_parked_row_stays_when_its_row_cannot_be_written(
    client: Client, audit_down: Callable[[], None]
) -> None:
    failed_id = _failed_trigger(client, "m-1")
    ref = _parked_inbox_row(client)
    audit_down()
    with pytest.raises(AuditDown):
        client.retry_trigger(failed_id)
    with pytest.raises(AuditDown):
        client.retry_parked(ref)
    with pytest.raises(AuditDown):
        client.drop_parked(ref)
    assert [f.id for f in client.failed_triggers()] == [failed_id]
    assert [p.ref for p in client.parked_rows()] == [ref]
    assert client.audit_log() == []


def test_each_on_the_spot_action_is_recorded_once_with_its_actor(client: Client) -> None:
    failed_id = _failed_trigger(client, "m-2")
    ref = _parked_inbox_row(client)
    deployed = client.deploy(XML)
    client.pause_job_type("charge")
    client.resume_job_type("charge")
    client.set_job_type_limits("charge", concurrency=3)
    client.retry_trigger(failed_id)
    client.retry_parked(ref)
    rows = sorted(client.audit_log(), key=lambda e: e.action)
    assert [(e.action, e.outcome, e.actor, e.source) for e in rows] == [
        (action, "done", "ops", "cli")
        for action in sorted(
            [
                "deploy",
                "job_type_pause",
                "job_type_resume",
                "job_type_set_limits",
                "parked_retry",
                "trigger_retry",
            ]
        )
    ]
    by_action = {e.action: e for e in rows}
    assert by_action["deploy"].target == str(deployed.deployment_key)
    assert by_action["deploy"].params["resources"] == ["audited v1"]
    assert by_action["job_type_resume"].params["held"] == 0
    assert by_action["parked_retry"].target == ref

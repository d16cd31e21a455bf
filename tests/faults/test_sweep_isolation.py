"""Sweeps without head-of-line blocking (issue 24, row 2), on PostgreSQL + Redis with a
real worker and beat.

A trigger a plain Celery producer sent (routing key ``celery``, Celery's default queue)
and kept as failed can be sent again by ``dormant triggers retry``; a row a sweep cannot
process is parked on its own row with its error, and every later row still goes out.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import insert, update

from dormant.engine_core.errors import UnknownInstance
from dormant.persistence import clock, inbox
from dormant.persistence.tables import inbox as inbox_table
from dormant.persistence.tables import outbox
from dormant.tasks import wire
from dormant.tasks.metrics import registry
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import end, message_catch, model, start
from tests.security.kit import failed_for
from tests.security.test_plain_celery import bare_send_task

pytestmark = [pytest.mark.faults, pytest.mark.integration]


def waiting(key: str, message: str) -> str:
    """start -> a message catch keyed by ``=id`` -> end."""
    nodes = start() + message_catch("wait", message) + end()
    return model(key, nodes, [("start", "wait"), ("wait", "end")], messages={message: "=id"})


def test_a_plain_celery_start_kept_as_failed_is_retried(fstack: Stack) -> None:
    """Routing key ``celery`` (undotted): the retry is published, not refused."""
    s = fstack
    s.worker()
    bare_send_task(
        s,
        "dormant.start",
        kwargs={"key": "pc-late", "instance_id": "pc-late-1", "variables": {"id": "pc-late-1"}},
    )
    [failed] = failed_for(s, task="dormant.start", instance_id="pc-late-1")
    assert failed.routing_key == "celery"
    s.client.deploy(waiting("pc-late", "pc-late-go"))
    retried = s.run_cli("triggers", "retry", failed.id)
    assert retried.returncode == 0, retried.stderr
    wait_for(lambda: s.client.instance("pc-late-1").tokens, what="the retried start")
    s.client.send_message("pc-late-go", "pc-late-1")
    s.wait_status("pc-late-1", "completed")


def _backdate(s: Stack, table: Any, seconds: float, *where: Any) -> None:
    """Rows written ``seconds`` ago: past the sweep's age threshold without a wait."""
    with s.client._store.engine.begin() as conn:
        conn.execute(
            update(table).where(*where).values(created_at=clock.now() - timedelta(seconds=seconds))
        )


def parked_refs(s: Stack) -> dict[str, str]:
    return {p.ref: p.error for p in s.client.parked_rows()}


def test_poison_sweep_rows_are_parked_and_lost_triggers_behind_them_are_sent(
    fstack: Stack,
) -> None:
    """A corrupt outbox row and a corrupt inbox row, written before five lost starts
    (in the inbox, never published: their producer died after the write). The relay
    parks each poison row on its own and still sends every lost start."""
    s = fstack
    key = "hol"
    s.client.deploy(waiting(key, "hol-go"))
    engine = s.client._store.engine
    with engine.begin() as conn:
        poison_out = conn.execute(
            insert(outbox)
            .values(kind="ThrowSignal", payload=["not", "an", "object"], created_at=clock.now())
            .returning(outbox.c.id)
        ).scalar_one()
    poison_in = inbox.record(engine, wire.START, "trigger.start", {"key": key})
    with engine.begin() as conn:
        conn.execute(
            update(inbox_table)
            .where(inbox_table.c.id == poison_in)
            .values(payload={"kwargs": "corrupt"})
        )
    lost = [f"hol-{n}" for n in range(5)]
    for iid in lost:
        inbox.record(engine, *wire.start(key, iid, {"id": iid}))
    _backdate(s, outbox, 20, outbox.c.id == poison_out)
    _backdate(s, inbox_table, 10, inbox_table.c.processed_at.is_(None))

    s.worker_and_beat()
    for iid in lost:
        wait_for(lambda iid=iid: _started(s, iid), 60, what=f"lost start {iid} sent again")
    wait_for(lambda: len(parked_refs(s)) == 2, 30, what="2 parked rows")
    refs = parked_refs(s)
    assert set(refs) == {f"outbox:{poison_out}", f"inbox:{poison_in}"}
    assert "AttributeError" in refs[f"outbox:{poison_out}"]
    assert "kwargs is not a JSON object" in refs[f"inbox:{poison_in}"]

    reg = registry(s.database_url)
    assert reg.get_sample_value("dormant_sweep_rows_parked", {"table": "inbox"}) == 1
    assert reg.get_sample_value("dormant_sweep_rows_parked", {"table": "outbox"}) == 1

    listed = s.run_cli("triggers", "parked")
    assert listed.returncode == 0, listed.stderr
    assert f"outbox:{poison_out}" in listed.stdout and f"inbox:{poison_in}" in listed.stdout

    # A retried poison row is unparked, fails again on its own, and is parked again.
    retried = s.run_cli("triggers", "retry", f"outbox:{poison_out}")
    assert retried.returncode == 0, retried.stderr
    wait_for(lambda: parked_refs(s).get(f"outbox:{poison_out}"), 30, what="the retried row parked")
    dropped = s.run_cli("triggers", "drop", f"inbox:{poison_in}")
    assert dropped.returncode == 0, dropped.stderr
    assert f"inbox:{poison_in}" not in parked_refs(s)
    unknown = s.run_cli("triggers", "drop", f"inbox:{poison_in}")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1

    s.client.send_message("hol-go", lost[0])
    s.wait_status(lost[0], "completed")


def _started(s: Stack, instance_id: str) -> bool:
    try:
        return bool(s.client.instance(instance_id).tokens)
    except UnknownInstance:
        return False

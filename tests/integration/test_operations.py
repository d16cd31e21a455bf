"""Operations on running instances through the real worker and beat on PostgreSQL +
Redis (issue 12): suspend and resume, set variables then retry, bulk incident retry
counted exactly, migration onto a version that renamed a node, a refused plan.

One stack for the module (each test uses its own process key).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dormant.tasks.client import default_actor
from tests.integration.conftest import Stack, wait_for
from tests.integration.opskit import gate, pg_redis_stack, three_waits, token_nodes
from tests.integration.waitkit import deadline_rows, end, facts, holds, model

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ops(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    with pg_redis_stack(request, tmp_path_factory.mktemp("ops")) as stack:
        yield stack


def _cli(stack: Stack, *args: str, code: int = 0) -> str:
    done = stack.run_cli(*args, timeout=180)
    assert done.returncode == code, f"{args}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _waiting(stack: Stack, instance_id: str, nodes: list[str]) -> Any:
    return wait_for(
        lambda: (v := stack.client.instance(instance_id)) and token_nodes(v) == sorted(nodes) and v,
        30,
        what=f"{instance_id} waiting at {nodes}",
    )


def test_suspend_then_a_timer_and_a_message_arrive_then_resume_applies_both_once_in_order(
    ops: Stack,
) -> None:
    client = ops.client
    client.deploy(three_waits("susp", timer="PT6S"))
    iid = client.start("susp", {"orderId": "k-1"})
    view = _waiting(ops, iid, ["review", "wait_pay", "wait_timer"])
    due = next(w.due_at for w in view.waits if w.node_id == "wait_timer")
    client.suspend(iid)
    suspended = wait_for(lambda: (v := client.instance(iid)).suspended and v, what="suspended")
    assert token_nodes(suspended) == ["review", "wait_pay", "wait_timer"]  # before the timer
    assert deadline_rows(ops, iid) == []  # the timer is held too: nothing for beat to fire
    time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + 1.5)
    client.send_message("paid", "k-1", {"paid": True})  # arrives after the timer came due
    wait_for(lambda: client.instance(iid).held == 1, what="the message held")
    held = client.instance(iid)
    assert token_nodes(held) == ["review", "wait_pay", "wait_timer"]  # neither applied yet
    assert holds(ops, iid)["subscriptions"] == 1 and held.variables == {"orderId": "k-1"}

    assert "resuming" in _cli(ops, "instances", "resume", iid)
    view = _waiting(ops, iid, ["after_msg", "after_timer", "review"])
    assert not view.suspended and view.held == 0 and view.variables["paid"] is True
    # In arrival order: the timer (due first) ran before the message, so its user task's
    # wait has the lower id; each applied once.
    tasks = {t.node_id: int(t.id.rsplit(".w", 1)[1]) for t in client.user_tasks(iid)}
    assert tasks["after_timer"] < tasks["after_msg"]
    applied = [f.details for f in facts(ops, iid, "HeldTriggerApplied")]
    # The resume's step: its facts name who resumed (the CLI's actor).
    assert applied == [{"trigger": "message", "outcome": "applied", "actor": default_actor()}]
    assert len(deadline_rows(ops, iid)) == 0
    kinds = [f.kind for f in facts(ops, iid)]
    assert kinds.count("Suspended") == 1 and kinds.count("Resumed") == 1


def test_set_variables_then_retry_and_what_is_refused(ops: Stack) -> None:
    client = ops.client
    client.deploy(gate("setvars"))
    iid = client.start("setvars", {"note": "secret-note"})
    ops.wait_status(iid, "active_incidents")
    out = _cli(ops, "instances", "set-variables", iid, "--var", "x=NaN", code=2)
    assert "variables.x is nan" in out  # the limits of a start's variables
    revision = client.instance(iid).revision
    # Refused by the worker's rules, rehearsed before sending: the caller hears it.
    out = _cli(
        ops, "instances", "set-variables", iid, "--unset", "note", "--scope", "nowhere", code=2
    )
    assert "no scope 'nowhere'" in out
    view = client.instance(iid)
    assert view.revision == revision and "note" in view.variables
    out = _cli(
        ops, "instances", "set-variables", iid, "--var", "ok=true", "--unset", "note", "--retry"
    )
    assert "setting ok, -note" in out
    view = ops.wait_status(iid, "completed")
    assert view.variables == {"ok": True}
    (fact,) = facts(ops, iid, "VariablesSet")
    # The CLI's actor (no --as: DORMANT_ACTOR, else the OS user) is on the fact.
    assert fact.details == {"scope": "s0", "set": "ok", "unset": "note", "actor": default_actor()}
    assert "secret-note" not in json.dumps([f.details for f in facts(ops, iid)])


def test_bulk_retry_of_200_incidents_with_20_refused_is_counted_exactly(ops: Stack) -> None:
    client = ops.client
    client.deploy(gate("bulk200"))
    ids = [client.start("bulk200", {"n": i}) for i in range(200)]
    wait_for(
        lambda: len(client.incidents(key="bulk200", state="open")) == 200,
        120,
        what="200 open incidents",
    )
    # 20 of them suspended (a bulk by ids), so their incidents are refused.
    out = _cli(ops, "instances", "suspend", *ids[:20])
    assert "selected 20, suspended 20, refused 0" in out
    # Everyone gets ok=true (a suspended instance takes data changes).
    view = client.bulk(
        "set_variables",
        _selector(key="bulk200"),
        {"variables": {"ok": True}},
    )
    assert (
        client.wait_batch(view.id, timeout=120).report() == "selected 200, changed 200, refused 0"
    )
    dry = _cli(ops, "incidents", "retry", "--process", "bulk200", "--node", "gw", "--dry-run")
    assert "would incident retry: 200 selected" in dry
    out = _cli(
        ops,
        "incidents",
        "retry",
        "--process",
        "bulk200",
        "--node",
        "gw",
        "--cause-class",
        "ExpressionError",
        code=3,
    )
    assert "selected 200, retried 180, refused 20: 20 InvalidOperation" in out
    assert "is suspended" in out
    batch_id = out.split("batch ", 1)[1].split(":", 1)[0]
    shown = _cli(ops, "batches", "show", batch_id, "--items")
    assert shown.count("\trefused\t") == 20 and shown.count("\tapplied") == 180
    completed = wait_for(
        lambda: (n := len(client.instances(status="completed", key="bulk200"))) == 180 and n,
        120,
        what="180 completed",
    )
    assert completed == 180
    left = client.instances(status="active_incidents", key="bulk200")
    assert sorted(v.id for v in left) == sorted(ids[:20]) and all(v.suspended for v in left)
    assert batch_id in _cli(ops, "batches", "list")


def _selector(**kw: Any) -> Any:
    from dormant.persistence.selection import Selector

    return Selector(**kw)


def test_migration_of_waits_onto_a_version_that_renamed_a_node_and_a_refused_plan(
    ops: Stack, tmp_path: Path
) -> None:
    client = ops.client
    client.deploy(three_waits("mig"))
    a = client.start("mig", {"orderId": "m-1"})
    b = client.start("mig", {"orderId": "m-2"})
    for iid in (a, b):
        _waiting(ops, iid, ["review", "wait_pay", "wait_timer"])
    due = {iid: [r.due_at for r in deadline_rows(ops, iid)] for iid in (a, b)}
    assert client.deploy(three_waits("mig", task="check")).version == 2
    assert client.deploy(three_waits("mig", task="check", pay="wait_payment")).version == 3

    # A plan that does not fit (v3 has no wait_pay) is refused before anything changes:
    # by the Client for one instance, by the worker for a batch; every reason named.
    before = {iid: client.instance(iid).revision for iid in (a, b)}
    out = _cli(ops, "instances", "migrate", "--to", "3", "--map", "review=check", a, code=2)
    assert "'wait_pay', which v3 does not have" in out
    out = _cli(
        ops,
        "instances",
        "migrate",
        "--to",
        "3",
        "--map",
        "review=check",
        "--process",
        "mig",
        code=3,
    )
    assert "selected 2, migrated 0, refused 2" in out and "wait_pay" in out
    assert {iid: client.instance(iid).revision for iid in (a, b)} == before
    assert all(client.instance(iid).version == 1 for iid in (a, b))

    dry = _cli(
        ops,
        "instances",
        "migrate",
        "--to",
        "2",
        "--map",
        "review=check",
        "--process",
        "mig",
        "--dry-run",
    )
    assert dry.count("\tok") == 2 and "2 selected" in dry
    out = _cli(
        ops, "instances", "migrate", "--to", "2", "--map", "review=check", "--process", "mig"
    )
    assert "selected 2, migrated 2, refused 0" in out
    for iid in (a, b):
        view = client.instance(iid)
        assert view.version == 2
        assert token_nodes(view) == ["check", "wait_pay", "wait_timer"]
        assert [r.due_at for r in deadline_rows(ops, iid)] == due[iid]  # deadline unchanged
        assert [t.node_id for t in client.user_tasks(iid)] == ["check"]
        assert facts(ops, iid, "Migrated")[0].details["mapped"] == "review>check"
    # The message still correlates (its subscription moved with the wait), the renamed
    # task completes, and the instance runs on v2's model.
    client.send_message("paid", "m-1")
    _waiting(ops, a, ["after_msg", "check", "wait_timer"])
    (task,) = [t for t in client.user_tasks(a) if t.node_id == "check"]
    client.complete_task(task.id)
    _waiting(ops, a, ["after_msg", "wait_timer"])
    assert token_nodes(client.instance(b)) == ["check", "wait_pay", "wait_timer"]


def test_modify_moves_a_token(ops: Stack) -> None:
    client = ops.client
    client.deploy(three_waits("modify"))
    iid = client.start("modify", {"orderId": "x-1"})
    _waiting(ops, iid, ["review", "wait_pay", "wait_timer"])
    out = _cli(
        ops, "instances", "modify", iid, "--cancel", "wait_pay", "--start-before", "after_msg"
    )
    assert "modifying" in out
    _waiting(ops, iid, ["after_msg", "review", "wait_timer"])
    assert holds(ops, iid)["subscriptions"] == 0
    assert facts(ops, iid, "Modified")[0].details["started"] == "after_msg"


def test_a_paused_job_type_holds_its_jobs_until_it_resumes(ops: Stack) -> None:
    client = ops.client
    task = (
        '<bpmn:serviceTask id="double"><bpmn:extensionElements>'
        '<zeebe:taskDefinition type="test-double"/></bpmn:extensionElements></bpmn:serviceTask>'
    )
    client.deploy(
        model(
            "paused",
            f'<bpmn:startEvent id="s"/>{task}{end("e")}',
            [("s", "double"), ("double", "e")],
        )
    )
    assert "paused test-double" in _cli(ops, "jobs", "pause", "test-double")
    _cli(ops, "jobs", "pause", "test-double", code=2)  # already paused: refused
    iid = client.start("paused", {"n": 21})
    wait_for(lambda: client.paused_job_types() == {"test-double": 1}, 30, what="the job held")
    view = client.instance(iid)
    assert view.status == "active" and token_nodes(view) == ["double"]
    assert "test-double\t1 held" in _cli(ops, "jobs", "paused")
    assert "1 held job(s) sent" in _cli(ops, "jobs", "resume", "test-double")
    assert ops.wait_status(iid, "completed").variables["doubled"] == 42
    assert client.paused_job_types() == {}

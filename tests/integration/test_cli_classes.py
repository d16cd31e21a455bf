"""The ``dormant`` command line as an operator meets it (issue 28), against a real
database and a real worker: each option reaches its parameter, an unknown state is
refused with the allowed list, and an operator command's refusal comes back to the
caller as one line and exit code 2 instead of reaching only a worker's log."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import Stack, wait_for
from tests.integration.test_tasks import USER, linear

pytestmark = pytest.mark.integration


def ok(stack: Stack, *args: str) -> str:
    result = stack.run_cli(*args)
    assert result.returncode == 0, f"dormant {' '.join(args)}: {result.stderr}"
    return result.stdout


def refused(stack: Stack, *args: str) -> str:
    """The one line of a refused command (exit 2, no traceback)."""
    result = stack.run_cli(*args)
    assert result.returncode == 2, (args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stderr


def waiting(stack: Stack, key: str, *nodes: str) -> str:
    model = stack.tmp / f"{key}.bpmn"
    model.write_text(linear(key, *nodes))
    stack.client.deploy(str(model))
    iid: str = stack.client.start(key)
    wait_for(lambda: stack.client.user_tasks(iid), what=f"{key}'s user task")
    return iid


@pytest.mark.timeout(600)
def test_migrate_to_a_version_keeps_the_version_filter(shared_stack: Stack) -> None:
    """``--to 2 --version 1``: both options bound one parameter, the filter was lost and
    every instance was refused with ``cannot move from v1 to v1``."""
    stack = shared_stack
    iid = waiting(stack, "cli-mig", USER)
    model = stack.tmp / "cli-mig.bpmn"
    model.write_text(linear("cli-mig", USER, USER))
    assert stack.client.deploy(str(model)).version == 2
    out = ok(stack, "instances", "migrate", "--to", "2", "--process", "cli-mig", "--version", "1")
    assert "selected 1, migrated 1, refused 0" in out, out
    assert stack.client.instance(iid).version == 2


def test_unknown_states_are_refused_with_the_allowed_list(shared_stack: Stack) -> None:
    stack = shared_stack
    for args, allowed in (
        (("instances", "list", "--status", "bogus"), "'flagged'"),
        (("incidents", "list", "--state", "bogus"), "'dead_lettered'"),
        (("instances", "cancel", "--process", "k", "--status", "bogus"), "'active'"),
    ):
        result = stack.run_cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "'bogus' is not one of" in result.stderr and allowed in result.stderr
    helped = ok(stack, "instances", "list", "--help")
    for status in ("active_incidents", "flagged", "queued", "terminated"):
        assert status in helped


@pytest.mark.timeout(600)
def test_operator_refusals_reach_the_caller(shared_stack: Stack) -> None:
    """Refused by the worker's own rules, rehearsed before the command is sent."""
    stack = shared_stack
    iid = waiting(stack, "cli-refuse", USER)
    line = refused(stack, "instances", "set-variables", iid, "--unset", "nosuch")
    assert line.startswith("error: ") and "nosuch" in line and line.count("\n") == 1, line
    line = refused(stack, "instances", "set-variables", iid, "--var", "a=1", "--scope", "nowhere")
    assert "nowhere" in line, line
    line = refused(stack, "instances", "modify", iid, "--start-before", "no-such-node")
    assert "no-such-node" in line, line
    # nothing was sent: the instance is as it was
    assert stack.client.history(iid)[-1].kind != "VariablesSet"
    ok(stack, "instances", "set-variables", iid, "--var", "a=1")
    wait_for(lambda: stack.client.instance(iid).variables.get("a") == 1, what="a set")


@pytest.mark.timeout(600)
def test_history_tells_which_end_event_was_reached(shared_stack: Stack) -> None:
    stack = shared_stack
    iid = waiting(stack, "cli-history", USER)
    [task] = stack.client.user_tasks(iid)
    ok(stack, "tasks", "complete", task.id)
    stack.wait_status(iid, "completed")
    text = ok(stack, "instances", "history", iid)
    lines = [line.split(None, 3)[3] for line in text.splitlines()]
    assert lines == [
        "instance started at start",
        "n1 entered: user task created",
        "user task n1 completed",
        "end event end reached",
        "instance completed",
    ], text
    assert "Hydrated" not in text and "Dehydrated" not in text
    events = json.loads(ok(stack, "instances", "history", iid, "--json"))
    assert [e["fact"] for e in events][-2:] == ["EndEventReached", "Completed"]
    assert events[-2]["node"] == "end" and events[-2]["category"] == "element"
    shown = json.loads(ok(stack, "instances", "show", iid, "--json"))
    assert shown["history"] == events
    internal = ok(stack, "instances", "history", iid, "--internal")
    assert "Dehydrated" in internal


@pytest.mark.timeout(600)
def test_suspended_instances_carry_a_marker_in_the_list(shared_stack: Stack) -> None:
    stack = shared_stack
    iid = waiting(stack, "cli-suspend", USER)
    other = stack.client.start("cli-suspend")
    ok(stack, "instances", "suspend", iid)
    wait_for(lambda: stack.client.instance(iid).suspended, what="suspended")
    lines = ok(stack, "instances", "list", "--process", "cli-suspend", "--format", "tsv")
    status = {line.split("\t")[0]: line.split("\t")[2] for line in lines.splitlines()}
    assert status[iid] == "active (suspended)" and status[other] == "active", lines
    listed = json.loads(ok(stack, "instances", "list", "--process", "cli-suspend", "--json"))
    assert {r["id"]: r["suspended"] for r in listed} == {iid: True, other: False}


def test_starts_no_worker_applied_yet_are_listed_as_queued(bare_stack: Stack) -> None:
    """No worker runs: the start is in the inbox only, and no other list shows it."""
    stack = bare_stack
    model = stack.tmp / "cli-queued.bpmn"
    model.write_text(linear("cli-queued", USER))
    stack.client.deploy(str(model))
    iid = stack.client.start("cli-queued", business_key="B-7")
    assert iid not in ok(stack, "instances", "list")
    lines = ok(stack, "instances", "list", "--status", "queued", "--format", "tsv")
    [line] = [row for row in lines.splitlines() if row.startswith(iid)]
    assert line.split("\t")[1:4] == ["cli-queued", "queued", "B-7"], line
    [row] = json.loads(ok(stack, "instances", "list", "--status", "queued", "--json"))
    assert (row["id"], row["status"], row["version"]) == (iid, "queued", None)
    assert "queued" in ok(stack, "instances", "show", iid)

"""The ``dormant`` command line, end to end against a real worker and beat, and the demo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.conftest import REPO, Stack, wait_for
from tests.integration.test_tasks import MESSAGE, MESSAGE_DEF, USER, job, linear

pytestmark = pytest.mark.integration


def ok(stack: Stack, *args: str) -> str:
    result = stack.run_cli(*args)
    assert result.returncode == 0, f"dormant {' '.join(args)}: {result.stderr}"
    return result.stdout


# On PostgreSQL + Redis only: the walk is a CLI process per step (the suite's longest
# test), and the embedded default's commands are walked by the demo below and by
# test_cli_tasks.py, test_cli_classes.py and test_cli_output.py on that shape.
@pytest.mark.parametrize("shared_stack", ["pg_redis"], indirect=True)
@pytest.mark.timeout(900)  # a CLI process per step: slow on a loaded machine
def test_cli_end_to_end(shared_stack: Stack) -> None:
    stack = shared_stack
    model = stack.tmp / "flow.bpmn"
    model.write_text(linear("flow", job("test-double"), USER, MESSAGE, extra=MESSAGE_DEF))
    assert ok(stack, "db", "upgrade").startswith("database at revision")
    assert ok(stack, "deploy", str(model)).split() == ["flow", "1"]

    iid = ok(
        stack, "start", "flow", "--var", "n=4", "--var", "orderId=o-9", "--business-key", "B-1"
    ).strip()
    assert len(iid) == 32
    # Waits read through the Client (a CLI process per probe costs seconds), then the
    # CLI shows what is there.
    wait_for(lambda: stack.client.user_tasks(iid), what="user task")
    listed = ok(stack, "tasks", "list", "--instance", iid).strip()
    task_id = listed.split("\t")[0]
    assert listed.split("\t")[1] == iid and listed.split("\t")[2] == "n2"
    assert iid in ok(stack, "instances", "list", "--status", "active")

    shown = json.loads(ok(stack, "instances", "show", iid, "--json"))
    assert shown["variables"]["doubled"] == 8 and shown["business_key"] == "B-1"
    assert "Approve" in ok(stack, "tasks", "list") or task_id in ok(stack, "tasks", "list")
    assert "n2" in ok(stack, "instances", "show", iid)

    ok(stack, "tasks", "complete", task_id, "--var", 'extra={"a": [1, 2]}')
    # Waited through the Client (a CLI process per probe costs seconds), then shown once.
    wait_for(lambda: stack.client.instance(iid).waits, what="message wait")
    assert json.loads(ok(stack, "instances", "show", iid, "--json"))["waits"]
    ok(stack, "send-message", "paid", "--key", "o-other")
    ok(stack, "send-message", "paid", "--key", "o-9", "--var", "paid=true", "--id", "m-1")
    ok(stack, "send-message", "paid", "--key", "o-9", "--id", "m-1")  # a resend: idempotent
    done = stack.wait_status(iid, "completed")
    assert done.variables["extra"] == {"a": [1, 2]} and done.variables["paid"] is True
    ok(stack, "signal", "nobody-listens", "--var", "x=1")
    assert ok(stack, "incidents", "list") == ""

    # Cancel, and the operator errors: exit code 2 and one line.
    other = ok(stack, "start", "flow", "--var", "n=1", "--var", "orderId=o-10").strip()
    wait_for(lambda: stack.client.user_tasks(other), what="second user task")
    assert ok(stack, "tasks", "list", "--instance", other).strip()
    ok(stack, "instances", "cancel", other)
    stack.wait_status(other, "terminated")
    for args in (
        ("instances", "cancel", other),
        ("incidents", "retry", "nope"),
        ("tasks", "complete", "nope"),
    ):
        result = stack.run_cli(*args)
        assert result.returncode == 2 and result.stderr.startswith("error: "), result
        assert "Traceback" not in result.stderr


@pytest.mark.timeout(900)  # a CLI process per step: slow on a loaded machine
def test_cli_incidents(shared_stack: Stack) -> None:
    stack = shared_stack
    model = stack.tmp / "failing.bpmn"
    model.write_text(linear("failing", job("test-fail")))
    ok(stack, "deploy", str(model))
    iid = ok(stack, "start", "failing").strip()
    wait_for(lambda: stack.client.incidents(iid), what="incident")
    line = ok(stack, "incidents", "list", "--instance", iid).strip()
    incident_id, instance_id, node_id, state = line.split("\t")[:4]
    assert (instance_id, node_id, state) == (iid, "n1", "open")
    assert json.loads(ok(stack, "incidents", "show", incident_id))["cause_class"] == "ValueError"
    assert incident_id in ok(stack, "incidents", "list", "--state", "open")
    ok(stack, "incidents", "resolve", incident_id)
    wait_for(lambda: not stack.client.incidents(iid, "open"), what="incident closed")
    assert "open" not in ok(stack, "incidents", "list", "--instance", iid)


@pytest.mark.timeout(900)  # a CLI process per step: slow on a loaded machine
def test_dormant_demo_exits_zero(tmp_path: object) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dormant.tasks.cli", "demo"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all 3 orders completed" in result.stdout
    assert "woken by" in result.stdout


def test_cli_deploys_several_files_as_one_deployment_and_lists_it(shared_stack: Stack) -> None:
    stack = shared_stack
    one, two = stack.tmp / "dep-one.bpmn", stack.tmp / "dep-two.bpmn"
    one.write_text(linear("dep-one", USER))
    two.write_text(linear("dep-two", USER))
    result = stack.run_cli("deploy", str(one), str(two))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["dep-one 1", "dep-two 1"]
    key = int(result.stderr.strip().rsplit(" ", 1)[1])
    listed = json.loads(ok(stack, "deployments", "list", "--json"))
    [mine] = [d for d in listed if d["key"] == key]
    assert [(r["id"], r["version"], r["created"]) for r in mine["resources"]] == [
        ("dep-one", 1, True),
        ("dep-two", 1, True),
    ]
    assert mine["resources"][0]["name"] == str(one)
    shown = ok(stack, "deployments", "show", str(key))
    assert f"deployment {key}" in shown and "dep-two v1  (new version)" in shown
    again = stack.run_cli("deploy", str(one))
    assert again.stdout.split() == ["dep-one", "1"], "unchanged: no new version"
    missing = stack.run_cli("deployments", "show", "987654")
    assert missing.returncode == 2 and "no deployment 987654" in missing.stderr

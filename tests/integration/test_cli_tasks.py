"""``dormant tasks`` as an operator runs it, against a real database and worker (both
shapes): the list in the console's tasklist order (due date, then priority) narrowed to
a process and a candidate group, claim ``--as``, unclaim, complete with ``--json FILE``,
and every refusal one line on stderr with exit code 2 (issue 28)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.conftest import Stack, wait_for
from tests.integration.test_user_task_attributes import model

pytestmark = pytest.mark.integration

SCHEDULED = (
    '<zeebe:assignmentDefinition candidateGroups="ops"/>'
    '<zeebe:taskSchedule dueDate="=due"/>'
    '<zeebe:priorityDefinition priority="=level"/>'
)


def listed(stack: Stack, *args: str) -> list[dict[str, Any]]:
    done = stack.run_cli("tasks", "list", *args, "--json")
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def refused(stack: Stack, *args: str) -> str:
    done = stack.run_cli(*args)
    assert done.returncode == 2, done
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


@pytest.mark.timeout(900)  # a CLI process per step: slow on a loaded machine
def test_tasks_list_claim_unclaim_complete(shared_stack: Stack) -> None:
    s = shared_stack
    c = s.client
    c.deploy(model("ct-a", SCHEDULED))
    c.deploy(model("ct-b", SCHEDULED))
    late = c.start("ct-a", {"due": "2026-09-01T00:00:00Z", "level": 90})
    early = c.start("ct-a", {"due": "2026-03-01T00:00:00Z", "level": 10})
    undated_high = c.start("ct-a", {"due": None, "level": 80})
    undated_low = c.start("ct-a", {"due": None, "level": 20})
    other = c.start("ct-b", {"due": "2026-01-01T00:00:00Z", "level": 50})
    mine = [late, early, undated_high, undated_low, other]
    wait_for(
        lambda: len({t.instance_id for t in c.user_tasks()} & set(mine)) == 5 or None,
        what="five user tasks",
    )

    rows = listed(s, "--process", "ct-a", "--group", "ops")
    assert [r["instance_id"] for r in rows if r["instance_id"] in mine] == [
        early,
        late,
        undated_high,
        undated_low,
    ]
    assert {r["process_key"] for r in rows} == {"ct-a"}
    assert listed(s, "--process", "ct-a", "--group", "nobody") == []
    table = s.run_cli("tasks", "list", "--process", "ct-b", "--format", "tsv")
    assert table.returncode == 0 and "ct-b v1" in table.stdout and early not in table.stdout

    task = next(r for r in rows if r["instance_id"] == early)
    done = s.run_cli("tasks", "claim", task["id"], "--as", "ann")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: c.user_task(task["id"]).assignee == "ann" or None, what="claimed by ann")
    assert "is assigned to 'ann'" in refused(s, "tasks", "claim", task["id"], "--as", "bob")
    assert "--as USER" in refused(s, "tasks", "claim", task["id"])
    done = s.run_cli("tasks", "unclaim", task["id"])
    assert done.returncode == 0, done.stderr
    wait_for(lambda: c.user_task(task["id"]).assignee is None or None, what="unclaimed")

    values = s.tmp / "values.json"
    values.write_text('{"approved": true, "note": "ok"}')
    bad = s.tmp / "list.json"
    bad.write_text("[1, 2]")
    assert "one JSON object" in refused(s, "tasks", "complete", task["id"], "--json", str(bad))
    missing = str(s.tmp / "missing.json")
    assert "cannot be read" in refused(s, "tasks", "complete", task["id"], "--json", missing)
    done = s.run_cli(
        "tasks", "complete", task["id"], "--json", str(values), "--var", "note=overridden"
    )
    assert done.returncode == 0, done.stderr
    view = s.wait_status(early, "completed")
    assert (view.variables["approved"], view.variables["note"]) == (True, "overridden")
    assert "no open user task" in refused(s, "tasks", "unclaim", task["id"])

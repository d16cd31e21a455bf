"""The CLI a person likes to read: tables on a terminal, TSV or JSON when piped, waits
in words, and the queued message — on the embedded default, no worker needed (the
Store applies the triggers in-process, as a worker would)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from dormant.engine_core.triggers import JobFailed, TimerFired
from dormant.persistence import clock
from dormant.tasks.cli import cli
from dormant.tasks.display import describe_wait, due_in, duration, pick_format
from tests.integration.test_tasks import USER, job, linear

pytestmark = pytest.mark.integration

CHARGE = job("charge-card").replace('retries="1"', 'retries="3"')


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    from dormant.persistence.store import Store

    urls = {
        "DORMANT_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "DORMANT_BROKER_URL": f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}",
    }
    store = Store(urls["DORMANT_DATABASE_URL"])
    store.deployments.deploy(linear("cli-pay", CHARGE), clock.now())
    store.deployments.deploy(linear("cli-approve", USER), clock.now())
    yield urls
    store.close()


def run(env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def a_retried_charge(env: dict[str, str]) -> str:
    """An instance whose job charge-card failed once and runs its second attempt."""
    from dormant.persistence.store import NewInstance, Store

    store = Store(env["DORMANT_DATABASE_URL"])
    try:
        now = clock.now()
        store.start(NewInstance("cli-pay", "pay-1", {"n": 1}, business_key="order-7"), now=now)
        (wait,) = store.queries.instance("pay-1").waits
        store.apply("pay-1", JobFailed(wait_id=wait.id, attempt=1, error="card declined"), now)
        store.apply("pay-1", TimerFired(wait_id=wait.id), now + timedelta(seconds=2))
        store.start(NewInstance("cli-approve", "approve-1", {}), now=now)
    finally:
        store.close()
    return "pay-1"


def test_show_spells_out_the_wait(env: dict[str, str]) -> None:
    iid = a_retried_charge(env)
    shown = run(env, "instances", "show", iid)
    assert re.search(r"waiting for job charge-card, attempt 2, times out in [45]m", shown), shown
    # "just now" on a quiet machine; a loaded one takes seconds to start the CLI.
    assert "business key: order-7" in shown, shown
    assert re.search(r"started (just now|\d+s ago)", shown), shown
    assert "waiting for user task Approve (task approve-1." in run(
        env, "instances", "show", "approve-1"
    )
    as_json = json.loads(run(env, "instances", "show", iid, "--json"))
    assert as_json["waits"][0]["job_type"] == "charge-card" and as_json["waits"][0]["attempt"] == 2


def test_lists_are_tables_on_a_terminal_and_tsv_or_json_when_piped(env: dict[str, str]) -> None:
    a_retried_charge(env)
    table = run(env, "instances", "list", "--format", "table").splitlines()
    assert table[0].split() == ["ID", "PROCESS", "STATUS", "BUSINESS", "KEY", "STARTED", "UPDATED"]
    assert len(table) == 3
    # aligned: every column starts where its header does
    for header in ("PROCESS", "STATUS", "STARTED"):
        at = table[0].index(header)
        assert all(line[at - 2 : at] == "  " and line[at] != " " for line in table[1:]), table
    assert "cli-pay v1" in table[1] + table[2], table
    assert re.search(r"just now|\b\d+s ago", table[1]), table

    piped = run(env, "instances", "list").splitlines()  # not a terminal: TSV, no header
    assert len(piped) == 2
    fields = [line.split("\t") for line in piped]
    assert {f[0] for f in fields} == {"pay-1", "approve-1"} and all(len(f) == 6 for f in fields)
    assert datetime.fromisoformat(fields[0][4]).tzinfo is not None  # ISO times for programs

    listed = json.loads(run(env, "instances", "list", "--json", "--process", "cli-pay"))
    assert [i["id"] for i in listed] == ["pay-1"] and "variables" not in listed[0]
    assert listed[0]["business_key"] == "order-7"

    tasks = run(env, "tasks", "list", "--format", "table").splitlines()
    assert tasks[0].split()[:3] == ["TASK", "INSTANCE", "NODE"] and "approve-1" in tasks[1]
    assert run(env, "incidents", "list", "--format", "table") == "no incidents\n"
    assert run(env, "incidents", "list") == ""  # piped and empty: nothing at all


def test_show_says_a_queued_start_is_queued(env: dict[str, str]) -> None:
    from dormant.tasks.client import Client

    client = Client(env["DORMANT_DATABASE_URL"], env["DORMANT_BROKER_URL"])
    try:
        iid = client.start("cli-pay")  # no worker runs: the start stays queued
    finally:
        client._store.close()
    shown = run(env, "instances", "show", iid)
    assert shown.startswith(f"{iid}  queued: no worker has applied its start yet"), shown
    assert json.loads(run(env, "instances", "show", iid, "--json"))["status"] == "queued"
    result = CliRunner().invoke(cli, ["instances", "show", "no-such"], env=env)
    assert type(result.exception).__name__ == "UnknownInstance"


def test_the_words_for_times_and_waits() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert [duration(s) for s in (5, 59, 60, 299, 3600, 3660, 90000)] == [
        "5s", "59s", "1m", "4m", "1h", "1h 1m", "1d 1h",
    ]  # fmt: skip
    assert due_in(now + timedelta(seconds=30), now) == "in 30s"
    assert due_in(now - timedelta(minutes=2), now) == "2m overdue"

    def wait(**kw: Any) -> Any:
        base = dict(id="w1", kind="timer", node_id="n1", token_id="t1", due_at=None, role="node",
                    message_name=None, correlation_key=None, signal_name=None, job_type=None,
                    attempt=1, job_running=False, task_name=None, child_instance_id=None,
                    incident_id=None)  # fmt: skip
        return SimpleNamespace(**(base | kw))

    soon = now + timedelta(minutes=4, seconds=10)
    assert describe_wait(wait(due_at=soon), now) == "waiting for timer, due in 4m"
    assert (
        describe_wait(wait(kind="timer", role="boundary", node_id="late", due_at=soon), now)
        == "waiting for timer (boundary late), due in 4m"
    )
    assert (
        describe_wait(wait(kind="message", message_name="paid", correlation_key="o-9"), now)
        == "waiting for message paid with key o-9"
    )
    assert (
        describe_wait(wait(kind="signal", signal_name="alarm"), now) == "waiting for signal alarm"
    )
    assert (
        describe_wait(
            wait(kind="job", job_type="charge-card", attempt=2, job_running=True, due_at=soon), now
        )
        == "waiting for job charge-card, attempt 2, times out in 4m"
    )
    assert (
        describe_wait(wait(kind="job", job_type="charge-card", attempt=2, due_at=soon), now)
        == "job charge-card failed, attempt 2 retries in 4m"
    )
    assert describe_wait(wait(kind="call", child_instance_id="c-1"), now) == (
        "waiting for child instance c-1"
    )
    assert pick_format("auto", False, SimpleNamespace(isatty=lambda: True)) == "table"
    assert pick_format("auto", False, SimpleNamespace(isatty=lambda: False)) == "tsv"
    assert pick_format("table", True, None) == "json"


def test_instances_list_filters_as_the_console_does(env: dict[str, str]) -> None:
    from dormant.persistence.store import NewInstance, Store

    a_retried_charge(env)
    store = Store(env["DORMANT_DATABASE_URL"])
    try:
        store.deployments.deploy(linear("cli-fail", job("x")), clock.now())
        store.start(NewInstance("cli-fail", "fail-1", {}), now=clock.now())
        (wait,) = store.queries.instance("fail-1").waits
        store.apply("fail-1", JobFailed(wait_id=wait.id, attempt=1, error="no"), clock.now())
    finally:
        store.close()

    def ids(*args: str) -> list[str]:
        return [line.split("\t")[0] for line in run(env, "instances", "list", *args).splitlines()]

    # newest first; pay-1 and approve-1 started at the same instant: then by id, descending
    newest_first = ["fail-1", "pay-1", "approve-1"]
    assert ids() == newest_first
    assert ids("--process", "cli-pay", "--version", "1") == ["pay-1"]
    assert ids("--process", "cli-pay", "--version", "2") == []
    assert ids("--status", "active_incidents") == ["fail-1"]
    assert ids("--has-incident") == ["fail-1"]
    assert ids("--business-key", "order-7") == ["pay-1"]
    assert ids("--node", "n1", "--process", "cli-approve") == ["approve-1"]
    assert ids("--node", "nowhere") == []
    assert ids("--started-after", "1h") == newest_first
    assert ids("--started-before", "1h") == []
    assert ids("--started-after", "2020-01-01T00:00") == newest_first
    first = CliRunner().invoke(cli, ["instances", "list", "--limit", "2"], env=env)
    assert [line.split("\t")[0] for line in first.stdout.splitlines()] == newest_first[:2]
    cursor = first.stderr.strip().split("--after ")[1]
    assert ids("--limit", "2", "--after", cursor) == newest_first[2:]
    bad = CliRunner().invoke(cli, ["instances", "list", "--started-after", "soon"], env=env)
    assert "--started-after 'soon' is neither an ISO time" in str(bad.exception)

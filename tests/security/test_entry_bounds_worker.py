"""Issue 24 rows 5, 6 and 8 through a real worker, on PostgreSQL + Redis and on the
embedded default.

The pure tests (test_feel_builtins_charged.py, test_growth_bounds.py,
test_name_bounds.py) pin each mechanism; these show what a user sees on a running
engine: a greedy FEEL built-in ends as an incident, never an instance completed with a
null; a parallel fork in a loop stops at ``DORMANT_MAX_TOKENS``; a name too long for
its column is refused at deploy in one line, and nothing is stored; a job input past
the variables bound is an incident, and no job is sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dormant.engine_core.errors import InvalidModel, UnknownProcess
from tests.integration.conftest import Stack, _urls
from tests.integration.waitkit import end, message_start, model, script, start, xor
from tests.security.shellkit import start_worker


@pytest.fixture(params=["pg_redis", "embedded"])
def pg_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    """PostgreSQL + Redis, and the embedded default; no processes: each test starts its
    worker with its settings."""
    with _urls(request.param, tmp_path, request) as urls:
        s = Stack(*urls, tmp_path)
        try:
            yield s
        finally:
            s.close()


GREEDY = model(
    "eb-greedy",
    start()
    + script("calc", "=count(distinct values(for i in 1..3000 return [i..i+1]))", "n")
    + end(),
    [("start", "calc"), ("calc", "end")],
)

FORK_BOMB = model(
    "eb-bomb",
    start()
    + xor("merge")
    + '<bpmn:parallelGateway id="fork"/>'
    + '<bpmn:task id="a"/><bpmn:task id="b"/>',
    [
        ("start", "merge"),
        ("merge", "fork"),
        ("fork", "a"),
        ("fork", "b"),
        ("a", "merge"),
        ("b", "merge"),
    ],
)


def test_a_greedy_builtin_is_an_incident_never_a_completed_instance(pg_stack: Stack) -> None:
    """Before: ``distinct values`` over 3,000 ranges ran 8 s uncharged; the soft time
    limit fired inside it, was swallowed into null, and the instance completed with
    ``n`` = null. Now the step budget stops it (and a soft time limit there would be an
    incident too). The time limits are well above what the budget takes even on a busy
    machine: the step runs in the start, and a start stopped by its soft time limit is a
    failed trigger with no instance to carry an incident."""
    start_worker(
        pg_stack,
        env={
            "DORMANT_TRIGGER_SOFT_TIME_LIMIT_SECONDS": "25",
            "DORMANT_TRIGGER_TIME_LIMIT_SECONDS": "35",
        },
        args=("--concurrency", "1"),
    )
    pg_stack.client.deploy(GREEDY)
    instance = pg_stack.client.start("eb-greedy")
    view = pg_stack.wait_status(instance, "active_incidents", timeout=60)
    [incident] = view.incidents
    assert incident.node_id == "calc"
    assert incident.cause_class in ("ExpressionError", "SoftTimeLimitExceeded")
    assert "n" not in view.variables


def test_a_parallel_fork_in_a_loop_stops_at_the_token_bound(pg_stack: Stack) -> None:
    start_worker(pg_stack, env={"DORMANT_MAX_TOKENS": "200"}, args=("--concurrency", "1"))
    pg_stack.client.deploy(FORK_BOMB)
    instance = pg_stack.client.start("eb-bomb")
    view = pg_stack.wait_status(instance, "active_incidents", timeout=60)
    assert len(view.tokens) <= 200
    [incident] = view.incidents  # one, at the fork: the other tokens are parked behind it
    assert incident.cause_class == "LimitExceeded"
    assert "DORMANT_MAX_TOKENS" in incident.cause


def test_a_message_name_too_long_for_its_column_is_refused_at_deploy(pg_stack: Stack) -> None:
    long_name = "m" * 300
    xml = model(
        "eb-long-name",
        message_start("start", long_name) + end(),
        [("start", "end")],
        messages={long_name: None},
    )
    with pytest.raises(InvalidModel) as info:
        pg_stack.client.deploy(xml)
    text = str(info.value)
    assert "message name is 300 characters long, more than the limit of 255" in text
    assert "'start'" in text and "\n" not in text and len(text) < 400
    with pytest.raises(UnknownProcess):
        pg_stack.client.start("eb-long-name")


BIG_INPUT = model(
    "eb-big-input",
    start()
    + script("a", "=string join(for i in 1..600 return blob)", "a")
    + script("b", "=string join(for i in 1..600 return blob)", "b")
    + '<bpmn:serviceTask id="use"><bpmn:extensionElements>'
    '<zeebe:taskDefinition type="eb-never-sent"/></bpmn:extensionElements></bpmn:serviceTask>'
    + end(),
    [("start", "a"), ("a", "b"), ("b", "use"), ("use", "end")],
)


def test_a_job_input_past_the_variables_bound_is_an_incident_and_no_job(
    pg_stack: Stack,
) -> None:
    """Before: a 2.5 GB job input aborted the pool process that tried to send it, in a
    crash loop. Now the job's input is held to DORMANT_MAX_VARIABLES_BYTES as a whole."""
    start_worker(pg_stack, args=("--concurrency", "1"))
    pg_stack.client.deploy(BIG_INPUT)
    instance = pg_stack.client.start("eb-big-input", {"blob": "z" * 1_000})
    view = pg_stack.wait_status(instance, "active_incidents", timeout=40)
    [incident] = view.incidents
    assert incident.node_id == "use" and incident.cause_class == "InvalidVariables"
    assert "the job input of" in incident.cause
    assert not [w for w in view.waits if w.kind == "job"]

"""Every wait docs/waits.md names, held durably — through a real ``dormant worker`` and
``dormant beat`` on PostgreSQL + Redis and on the embedded default (the mapping
table is in tests/README.md).

"Dehydrated" here is the only state an instance has between triggers: its
``instances`` row (the checkpoint) and its hold rows. So residency tests
become assertions on those rows, read straight from the database, and on the facts.

The module's stack (``wstack``, one worker + beat per shape) runs with a short
failed-wake backoff (2 s) and a clock offset file (persistence/clock.py) so a 24 h
boundary timer can be reached without waiting a day; each test uses its own process
keys, message names and correlation keys, so tests sharing the stack never meet.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from dormant.engine_core.errors import InvalidSetting
from dormant.persistence.settings import Settings
from tests.integration.conftest import Stack, _urls, wait_for
from tests.integration.waitkit import (
    boundary,
    checkpoint,
    deadline_rows,
    end,
    engine_of,
    facts,
    holds,
    message_catch,
    message_def,
    message_start,
    model,
    script,
    shifted_clock,
    signal_catch,
    signal_def,
    signal_end,
    signal_throw,
    start,
    timer_catch,
    timer_def,
    user_task,
    woken_by,
    xor,
)

pytestmark = pytest.mark.integration

BACKOFF = 2.0


@pytest.fixture(scope="module", params=["pg_redis", "embedded"])
def wstack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp(f"waits-{request.param}")
    with _urls(request.param, tmp, request) as urls:
        s = Stack(*urls, tmp)
        s.env["DORMANT_WAKE_RETRY_BACKOFF_SECONDS"] = str(BACKOFF)
        s.env["DORMANT_CLOCK_OFFSET_FILE"] = str(tmp / "clock-offset")
        (tmp / "clock-offset").write_text("0")
        try:
            s.worker_and_beat()
            yield s
        finally:
            s.close()


def uid() -> str:
    return uuid.uuid4().hex[:8]


def offset_file(stack: Stack) -> Path:
    return Path(stack.env["DORMANT_CLOCK_OFFSET_FILE"])


def waiting(stack: Stack, iid: str, kind: str, n: int = 1, timeout: float = 25.0) -> Any:
    return wait_for(
        lambda: len([w for w in stack.client.instance(iid).waits if w.kind == kind]) >= n,
        timeout,
        what=f"{iid} waiting on {n} {kind}",
    )


def lineages(stack: Stack, iid: str) -> dict[str, list[str]]:
    return {t["node_id"]: t["lineage"] for t in checkpoint(stack, iid)["tokens"].values()}


# -- T-1 / T-2 / T-4 / T-7 / T-10: timers, residency, lineage, facts ----------------------


def test_t1_t2_a_waiting_instance_is_its_row_and_its_holds(wstack: Stack) -> None:
    """T-1/T-2: nothing of a waiting instance lives in a worker. Its checkpoint names
    each armed wait, and each wait is exactly one hold row (a job wait: none, it is a
    message on the broker — FR-9 'active work', not a held wait)."""
    k = f"t12_{uid()}"
    nodes = (
        start()
        + '<bpmn:parallelGateway id="split"/>'
        + timer_catch("tm", "PT1H")
        + message_catch("mc", f"m-{k}")
        + user_task("ut")
        + end("e1")
        + end("e2")
        + end("e3")
    )
    flows = [
        ("start", "split"),
        ("split", "tm"),
        ("split", "mc"),
        ("split", "ut"),
        ("tm", "e1"),
        ("mc", "e2"),
        ("ut", "e3"),
    ]
    wstack.client.deploy(model(k, nodes, flows, messages={f"m-{k}": "=id"}))
    iid = wstack.client.start(k, {"id": k})
    waiting(wstack, iid, "user_task")
    cp = checkpoint(wstack, iid)
    kinds = sorted(w["kind"] for w in cp["waits"].values())
    assert kinds == ["message", "timer", "user_task"]
    assert holds(wstack, iid) == {"deadlines": 1, "subscriptions": 1, "user_tasks": 1}
    assert {t["state"] for t in cp["tokens"].values()} == {"waiting"}
    dehydrated = facts(wstack, iid, "Dehydrated")[-1].details
    assert dehydrated["waits"] == 3
    assert (dehydrated["timer"], dehydrated["message"], dehydrated["user_task"]) == (1, 1, 1)
    wstack.client.cancel(iid)
    wstack.wait_status(iid, "terminated")
    assert holds(wstack, iid) == {"deadlines": 0, "subscriptions": 0, "user_tasks": 0}


def test_t4_timer_fires_through_the_deadline_table_and_overdue_fires_once(wstack: Stack) -> None:
    k = f"t4_{uid()}"
    flows = [("start", "tm"), ("tm", "end")]
    wstack.client.deploy(model(k, start() + timer_catch("tm", "PT1S") + end(), flows))
    quick = wstack.client.start(k)
    wstack.wait_status(quick, "completed")
    assert woken_by(wstack, quick, "timer") == 1

    k2 = f"t4o_{uid()}"
    wstack.client.deploy(model(k2, start() + timer_catch("tm", "PT2H") + end(), flows))
    late = wstack.client.start(k2)
    waiting(wstack, late, "timer")
    (row,) = deadline_rows(wstack, late)
    # Beat "was down" for 3 hours: the deadline is 1 h overdue; it fires once.
    with shifted_clock(offset_file(wstack), 3 * 3600):
        wstack.wait_status(late, "completed")
        time.sleep(2.5)  # several scans later: still one fire
    assert woken_by(wstack, late, "timer") == 1
    assert deadline_rows(wstack, late) == []
    assert row.attempts == 0


def test_t7_sequential_timers_redehydrate_and_lineage_stays_bounded(wstack: Stack) -> None:
    k = f"t7_{uid()}"
    nodes = start() + timer_catch("t1", "PT1S") + timer_catch("t2", "PT1S") + end()
    wstack.client.deploy(model(k, nodes, [("start", "t1"), ("t1", "t2"), ("t2", "end")]))
    iid = wstack.client.start(k)
    waiting(wstack, iid, "timer")
    first = lineages(wstack, iid)
    wait_for(lambda: "t2" in lineages(wstack, iid), what="second timer armed")
    second = lineages(wstack, iid)
    assert holds(wstack, iid)["deadlines"] == 1
    wstack.wait_status(iid, "completed")
    assert list(first.values()) == list(second.values())  # no growth per cycle
    assert woken_by(wstack, iid, "timer") == 2
    dehydrated = [f.details for f in facts(wstack, iid, "Dehydrated")]
    assert [d["waits"] for d in dehydrated] == [1, 1, 0]


def test_t10_hydrated_and_dehydrated_facts_name_kinds_never_payload(wstack: Stack) -> None:
    k = f"t10_{uid()}"
    nodes = start() + message_catch("mc", f"m-{k}") + end()
    wstack.client.deploy(
        model(k, nodes, [("start", "mc"), ("mc", "end")], messages={f"m-{k}": "=id"})
    )
    iid = wstack.client.start(k, {"id": k})
    waiting(wstack, iid, "message")
    wstack.client.send_message(f"m-{k}", k, {"secret": "s3cr3t-value"})
    wstack.wait_status(iid, "completed")
    hist = facts(wstack, iid)
    hydrated = [f.details for f in hist if f.kind == "Hydrated"]
    assert [(h["trigger"], h["outcome"]) for h in hydrated] == [
        ("start", "continued"),
        ("message", "completed"),
    ]
    assert hydrated[1]["token"]  # the woken token is named
    assert [f.details["waits"] for f in hist if f.kind == "Dehydrated"] == [1, 0]
    assert "s3cr3t-value" not in repr([f.details for f in hist])
    tokens = wstack.client.instance(iid).tokens
    assert all(t.waiting_for == [] for t in tokens)


# -- T-3 / T-5 / T-6 / T-12: message and task wakes ---------------------------------------


def test_t3_continuation_binds_payload_and_sibling_stays_armed(wstack: Stack) -> None:
    k = f"t3_{uid()}"
    a, b = f"a-{k}", f"b-{k}"
    nodes = (
        start()
        + '<bpmn:parallelGateway id="split"/>'
        + message_catch("ca", a)
        + message_catch("cb", b)
        + end("e1")
        + end("e2")
    )
    flows = [("start", "split"), ("split", "ca"), ("split", "cb"), ("ca", "e1"), ("cb", "e2")]
    wstack.client.deploy(model(k, nodes, flows, messages={a: "=id", b: "=id"}))
    iid = wstack.client.start(k, {"id": k})
    waiting(wstack, iid, "message", 2)
    before = checkpoint(wstack, iid)
    sibling = next(w for w in before["waits"].values() if w["node_id"] == "cb")
    lineage_before = lineages(wstack, iid)
    wstack.client.send_message(a, k, {"paidA": 7})
    wait_for(lambda: wstack.client.instance(iid).variables.get("paidA") == 7, what="payload bound")
    after = checkpoint(wstack, iid)
    assert after["status"] == "active"
    assert list(after["waits"]) == [sibling["id"]]  # the same wait, still armed
    assert holds(wstack, iid) == {"deadlines": 0, "subscriptions": 1, "user_tasks": 0}
    assert lineages(wstack, iid)["cb"] == lineage_before["cb"]
    wstack.client.send_message(b, k)
    wstack.wait_status(iid, "completed")


def test_t5_message_wakes_only_on_its_key(wstack: Stack) -> None:
    k = f"t5_{uid()}"
    name = f"m-{k}"
    nodes = start() + message_catch("mc", name) + end()
    wstack.client.deploy(model(k, nodes, [("start", "mc"), ("mc", "end")], messages={name: "=id"}))
    one, two = wstack.client.start(k, {"id": f"{k}-1"}), wstack.client.start(k, {"id": f"{k}-2"})
    for iid in (one, two):
        waiting(wstack, iid, "message")
    wstack.client.send_message(name, f"{k}-nobody", {"x": 0})
    wstack.client.send_message(name, f"{k}-1", {"x": 1})
    assert wstack.wait_status(one, "completed").variables["x"] == 1
    time.sleep(1.0)
    other = wstack.client.instance(two)
    assert other.status == "active" and "x" not in other.variables
    assert holds(wstack, two)["subscriptions"] == 1
    assert woken_by(wstack, two, "message") == 0


def test_t6_user_task_completion_wakes_the_instance(wstack: Stack) -> None:
    k = f"t6_{uid()}"
    nodes = start() + user_task("ut", "Approve") + end()
    wstack.client.deploy(model(k, nodes, [("start", "ut"), ("ut", "end")]))
    iid = wstack.client.start(k)
    (task,) = wait_for(lambda: wstack.client.user_tasks(iid), what="task")
    assert holds(wstack, iid)["user_tasks"] == 1
    wstack.client.complete_task(task.id, {"approved": True})
    assert wstack.wait_status(iid, "completed").variables == {"approved": True}
    assert holds(wstack, iid)["user_tasks"] == 0
    assert woken_by(wstack, iid, "task_completed") == 1


def test_t12_a_successful_message_wake_logs_no_error(wstack: Stack) -> None:
    k = f"t12l_{uid()}"
    name = f"m-{k}"
    wstack.client.deploy(
        model(
            k,
            start() + message_catch("mc", name) + end(),
            [("start", "mc"), ("mc", "end")],
            messages={name: "=id"},
        )
    )
    logs = [p for p in wstack.procs]
    marks = [len(p.text()) for p in logs]
    iid = wstack.client.start(k, {"id": k})
    waiting(wstack, iid, "message")
    wstack.client.send_message(name, k)
    wstack.wait_status(iid, "completed")
    time.sleep(0.5)
    for proc, mark in zip(logs, marks, strict=True):
        new = proc.text()[mark:]
        assert "ERROR" not in new and "Traceback" not in new, new


# -- T-8: a timer and a message at the same moment, on two worker processes ---------------


def test_t8_timer_and_message_at_once_on_two_workers_make_one_continuation(
    stack: Stack,
) -> None:
    stack.worker("worker2")
    c = stack.client
    k = f"t8_{uid()}"
    name = f"m-{k}"
    nodes = (
        start()
        + '<bpmn:eventBasedGateway id="g"/>'
        + timer_catch("tm", "PT3S")
        + message_catch("mc", name)
        + script("st", '="timer"', "winner")
        + script("sm", '="message"', "winner")
        + script("count", "=hits + 1", "hits")
        + end()
    )
    flows = [
        ("start", "g"),
        ("g", "tm"),
        ("g", "mc"),
        ("tm", "st"),
        ("mc", "sm"),
        ("st", "count"),
        ("sm", "count"),
        ("count", "end"),
    ]
    c.deploy(model(k, nodes, flows, messages={name: "=id"}))
    n = 12
    ids = [c.start(k, {"id": f"{k}-{i}", "hits": 0}) for i in range(n)]
    # Wait until every start was applied, not for each timer wait: on a loaded machine an
    # early instance's timer may already have fired (the timer then simply wins its race).
    for iid in ids:
        wait_for(lambda iid=iid: c.instance(iid).tokens, 40, what=f"{iid} started")
    dues = [r.due_at for iid in ids for r in deadline_rows(stack, iid)]
    if dues:
        due = max(dues)
        due = datetime.fromisoformat(due) if isinstance(due, str) else due
        due = due if due.tzinfo else due.replace(tzinfo=UTC)
        # Send the messages as the deadlines come due: both triggers race per instance.
        time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()))
    for i in range(n):
        c.send_message(name, f"{k}-{i}")
    winners = []
    for iid in ids:
        view = stack.wait_status(iid, "completed", timeout=40)
        assert view.variables["hits"] == 1  # exactly one continuation
        winners.append(view.variables["winner"])
        applied = woken_by(stack, iid, "timer") + woken_by(stack, iid, "message")
        assert applied == 1, facts(stack, iid)
        assert holds(stack, iid) == {"deadlines": 0, "subscriptions": 0, "user_tasks": 0}
    print(
        f"T-8: {n} races, winners: {winners.count('timer')} timer, "
        f"{winners.count('message')} message, continuations: {n}"
    )


# -- T-9: kill -9 the worker while instances wait ----------------------------------------


def test_t9_kill_the_worker_while_instances_wait_then_everything_continues(
    bare_stack: Stack,
) -> None:
    s = bare_stack
    worker, _ = s.worker_and_beat()
    c = s.client
    k = f"t9_{uid()}"
    name = f"m-{k}"
    nodes = (
        start() + timer_catch("tm", "PT4S") + message_catch("mc", name) + user_task("ut") + end()
    )
    flows = [("start", "tm"), ("tm", "mc"), ("mc", "ut"), ("ut", "end")]
    c.deploy(model(k, nodes, flows, messages={name: "=id"}))
    ids = [c.start(k, {"id": f"{k}-{i}"}) for i in range(4)]
    for iid in ids:
        waiting(s, iid, "timer")
    worker.stop(sig=9)  # SIGKILL, whole process group: nothing of any instance survives in it
    time.sleep(5)  # the deadlines come due while no worker runs
    s.worker()
    for iid in ids:
        waiting(s, iid, "message", timeout=40)
    for i in range(4):
        c.send_message(name, f"{k}-{i}")
    for iid in ids:
        waiting(s, iid, "user_task", timeout=40)
    for task in c.user_tasks():
        c.complete_task(task.id)
    for iid in ids:
        s.wait_status(iid, "completed", timeout=40)
        assert woken_by(s, iid, "timer") == 1
        assert woken_by(s, iid, "message") == 1


# -- T-EBG and the two-timer gateway ------------------------------------------------------


def test_tebg_message_wins_and_the_timer_arm_is_withdrawn(wstack: Stack) -> None:
    k = f"ebg_{uid()}"
    name = f"m-{k}"
    nodes = (
        start()
        + '<bpmn:eventBasedGateway id="g"/>'
        + timer_catch("tm", "PT1H")
        + message_catch("mc", name)
        + script("st", '="timer"', "path")
        + script("sm", '="message"', "path")
        + end()
    )
    flows = [
        ("start", "g"),
        ("g", "tm"),
        ("g", "mc"),
        ("tm", "st"),
        ("mc", "sm"),
        ("st", "end"),
        ("sm", "end"),
    ]
    wstack.client.deploy(model(k, nodes, flows, messages={name: "=id"}))
    iid = wstack.client.start(k, {"id": k})
    waiting(wstack, iid, "message")
    assert holds(wstack, iid) == {"deadlines": 1, "subscriptions": 1, "user_tasks": 0}
    wstack.client.send_message(name, k)
    view = wstack.wait_status(iid, "completed")
    assert view.variables["path"] == "message"
    assert holds(wstack, iid) == {"deadlines": 0, "subscriptions": 0, "user_tasks": 0}


def test_ebg_with_two_timers_the_earlier_wins_even_listed_second(wstack: Stack) -> None:
    k = f"ebg2_{uid()}"
    nodes = (
        start()
        + '<bpmn:eventBasedGateway id="g"/>'
        + timer_catch("slow", "PT1H")
        + timer_catch("fast", "PT1S")
        + script("ss", '="slow"', "path")
        + script("sf", '="fast"', "path")
        + end()
    )
    flows = [
        ("start", "g"),
        ("g", "slow"),
        ("g", "fast"),
        ("slow", "ss"),
        ("fast", "sf"),
        ("ss", "end"),
        ("sf", "end"),
    ]
    wstack.client.deploy(model(k, nodes, flows))
    iid = wstack.client.start(k)
    wait_for(
        lambda: (
            len(deadline_rows(wstack, iid)) == 2
            or wstack.client.instance(iid).status == "completed"
        ),
        what="two deadlines held",
    )
    assert wstack.wait_status(iid, "completed").variables["path"] == "fast"
    assert holds(wstack, iid)["deadlines"] == 0


# -- T-13 / T-14 / T-15: boundaries -------------------------------------------------------


def test_t13_interrupting_boundary_withdraws_every_hold_of_the_cancelled_wait(
    wstack: Stack,
) -> None:
    k = f"t13_{uid()}"
    name = f"cancel-{k}"
    nodes = (
        start()
        + user_task("ut")
        + boundary("bm", "ut", message_def(name))
        + boundary("bt", "ut", timer_def("PT1H"))
        + end("done")
        + end("cancelled")
        + end("late")
    )
    flows = [("start", "ut"), ("ut", "done"), ("bm", "cancelled"), ("bt", "late")]
    wstack.client.deploy(model(k, nodes, flows, messages={name: "=id"}))
    iid = wstack.client.start(k, {"id": k})
    waiting(wstack, iid, "user_task")
    assert holds(wstack, iid) == {"deadlines": 1, "subscriptions": 1, "user_tasks": 1}
    wstack.client.send_message(name, k)
    wstack.wait_status(iid, "completed")
    assert holds(wstack, iid) == {"deadlines": 0, "subscriptions": 0, "user_tasks": 0}
    assert wstack.client.user_tasks(iid) == []


def test_t14_a_24h_boundary_survives_many_triggers_then_escalates(wstack: Stack) -> None:
    """A 24-hour boundary, probed: approve within 24 h or escalate. Twenty
    unrelated triggers (a non-interrupting 'ping' boundary on the same task) rewrite
    the checkpoint; the deadline does not move. Then the clock passes it."""
    k = f"t14_{uid()}"
    ping = f"ping-{k}"
    nodes = (
        start()
        + user_task("approve", "Approve")
        + boundary("sla", "approve", timer_def("PT24H"))
        + boundary("bp", "approve", message_def(ping), interrupting=False)
        + script("count", "=pings + 1", "pings")
        + end("pinged")
        + script("escalate", "=true", "escalated")
        + end("escalated_end")
        + end("approved")
    )
    flows = [
        ("start", "approve"),
        ("approve", "approved"),
        ("sla", "escalate"),
        ("escalate", "escalated_end"),
        ("bp", "count"),
        ("count", "pinged"),
    ]
    wstack.client.deploy(model(k, nodes, flows, messages={ping: "=id"}))
    iid = wstack.client.start(k, {"id": k, "pings": 0})
    waiting(wstack, iid, "user_task")
    (before,) = [r for r in deadline_rows(wstack, iid)]
    recorded = next(
        w["due_at"] for w in checkpoint(wstack, iid)["waits"].values() if w["node_id"] == "sla"
    )
    for i in range(20):
        wstack.client.send_message(ping, k, message_id=f"{k}-ping-{i}")
    wait_for(lambda: wstack.client.instance(iid).variables["pings"] == 20, what="20 pings")
    (after,) = deadline_rows(wstack, iid)
    assert (after.wait_id, after.due_at) == (before.wait_id, before.due_at)
    assert (
        next(
            w["due_at"] for w in checkpoint(wstack, iid)["waits"].values() if w["node_id"] == "sla"
        )
        == recorded
    )
    assert wstack.client.instance(iid).status == "active"
    with shifted_clock(offset_file(wstack), 24 * 3600 + 5):
        view = wstack.wait_status(iid, "completed", timeout=30)
    assert view.variables["escalated"] is True
    assert wstack.client.user_tasks(iid) == []
    assert holds(wstack, iid) == {"deadlines": 0, "subscriptions": 0, "user_tasks": 0}
    assert woken_by(wstack, iid, "timer") == 1


def test_t15_the_recorded_deadline_is_never_re_evaluated(wstack: Stack) -> None:
    """The boundary's duration is an expression over a variable; triggers change the
    variable; the deadline stays the one computed when the task was entered."""
    k = f"t15_{uid()}"
    ping = f"ping-{k}"
    nodes = (
        start()
        + user_task("ut")
        + boundary("bt", "ut", timer_def("=delay"))
        + boundary("bp", "ut", message_def(ping), interrupting=False)
        + end("e1")
        + end("e2")
        + end("e3")
    )
    flows = [("start", "ut"), ("ut", "e1"), ("bt", "e2"), ("bp", "e3")]
    wstack.client.deploy(model(k, nodes, flows, messages={ping: "=id"}))
    iid = wstack.client.start(k, {"id": k, "delay": "PT1H"})
    waiting(wstack, iid, "user_task")
    (before,) = deadline_rows(wstack, iid)
    for i in range(5):
        wstack.client.send_message(ping, k, {"delay": "PT1S"}, message_id=f"{k}-{i}")
    wait_for(lambda: woken_by(wstack, iid, "message") == 5, what="5 pings")
    time.sleep(2.0)  # had it been re-evaluated to PT1S it would have fired by now
    (after,) = deadline_rows(wstack, iid)
    assert after.due_at == before.due_at
    view = wstack.client.instance(iid)
    assert view.status == "active" and view.variables["delay"] == "PT1S"
    assert woken_by(wstack, iid, "timer") == 0
    wstack.client.cancel(iid)
    wstack.wait_status(iid, "terminated")


# -- boundaries on an embedded sub-process, timer cycles, signals -------------------------


def _sub_process_model(k: str, note: str, abort: str, timer: str) -> str:
    inner = (
        '<bpmn:subProcess id="sp"><bpmn:startEvent id="ss"/>'
        + user_task("inner", "Inner")
        + '<bpmn:endEvent id="se"/>'
        '<bpmn:sequenceFlow id="sf1" sourceRef="ss" targetRef="inner"/>'
        '<bpmn:sequenceFlow id="sf2" sourceRef="inner" targetRef="se"/></bpmn:subProcess>'
    )
    nodes = (
        start()
        + inner
        + boundary("bnote", "sp", message_def(note), interrupting=False)
        + boundary("babort", "sp", signal_def(abort))
        + boundary("btime", "sp", timer_def(timer))
        + script("count", "=notes + 1", "notes")
        + end("noted")
        + script("sa", '="aborted"', "path")
        + script("st", '="timeout"', "path")
        + script("sd", '="done"', "path")
        + end("e_a")
        + end("e_t")
        + end("e_d")
    )
    flows = [
        ("start", "sp"),
        ("sp", "sd"),
        ("sd", "e_d"),
        ("bnote", "count"),
        ("count", "noted"),
        ("babort", "sa"),
        ("sa", "e_a"),
        ("btime", "st"),
        ("st", "e_t"),
    ]
    return model(k, nodes, flows, messages={note: "=id"}, signals=[abort])


def test_sub_process_boundaries_message_non_interrupting_then_signal_interrupting(
    wstack: Stack,
) -> None:
    k = f"spb_{uid()}"
    note, abort = f"note-{k}", f"abort-{k}"
    wstack.client.deploy(_sub_process_model(k, note, abort, "PT1H"))
    iid = wstack.client.start(k, {"id": k, "notes": 0})
    waiting(wstack, iid, "user_task")
    assert holds(wstack, iid) == {"deadlines": 1, "subscriptions": 2, "user_tasks": 1}
    wstack.client.send_message(note, k)
    wstack.client.send_message(note, k)
    wait_for(lambda: wstack.client.instance(iid).variables["notes"] == 2, what="two notes")
    assert holds(wstack, iid) == {"deadlines": 1, "subscriptions": 2, "user_tasks": 1}
    wstack.client.signal(abort)
    view = wstack.wait_status(iid, "completed")
    assert view.variables["path"] == "aborted"
    assert holds(wstack, iid) == {"deadlines": 0, "subscriptions": 0, "user_tasks": 0}


def test_sub_process_timer_boundary_interrupts_the_inside(wstack: Stack) -> None:
    k = f"spt_{uid()}"
    wstack.client.deploy(_sub_process_model(k, f"note-{k}", f"abort-{k}", "PT1S"))
    iid = wstack.client.start(k, {"id": k, "notes": 0})
    view = wstack.wait_status(iid, "completed")
    assert view.variables["path"] == "timeout"
    assert holds(wstack, iid) == {"deadlines": 0, "subscriptions": 0, "user_tasks": 0}


def test_sub_process_completes_normally_and_withdraws_its_boundaries(wstack: Stack) -> None:
    k = f"spd_{uid()}"
    wstack.client.deploy(_sub_process_model(k, f"note-{k}", f"abort-{k}", "PT1H"))
    iid = wstack.client.start(k, {"id": k, "notes": 0})
    (task,) = wait_for(lambda: wstack.client.user_tasks(iid), what="inner task")
    wstack.client.complete_task(task.id)
    assert wstack.wait_status(iid, "completed").variables["path"] == "done"
    assert holds(wstack, iid) == {"deadlines": 0, "subscriptions": 0, "user_tasks": 0}


def test_non_interrupting_timer_cycle_fires_three_times_then_stops(wstack: Stack) -> None:
    k = f"cyc_{uid()}"
    nodes = (
        start()
        + user_task("ut")
        + boundary("rem", "ut", timer_def(cycle="R3/PT1S"), interrupting=False)
        + script("count", "=reminders + 1", "reminders")
        + end("e1")
        + end("e2")
    )
    flows = [("start", "ut"), ("ut", "e1"), ("rem", "count"), ("count", "e2")]
    wstack.client.deploy(model(k, nodes, flows))
    iid = wstack.client.start(k, {"reminders": 0})
    wait_for(
        lambda: wstack.client.instance(iid).variables["reminders"] == 3,
        timeout=30,
        what="three reminders",
    )
    wait_for(lambda: holds(wstack, iid)["deadlines"] == 0, what="cycle done")
    time.sleep(2.0)
    assert wstack.client.instance(iid).variables["reminders"] == 3
    assert holds(wstack, iid) == {"deadlines": 0, "subscriptions": 0, "user_tasks": 1}
    (task,) = wstack.client.user_tasks(iid)
    wstack.client.complete_task(task.id)
    wstack.wait_status(iid, "completed")


def test_signal_catch_throw_and_end_broadcast(wstack: Stack) -> None:
    k = f"sig_{uid()}"
    x, y = f"x-{k}", f"y-{k}"
    catcher = model(
        f"{k}_c",
        start() + signal_catch("sc", x) + end(),
        [("start", "sc"), ("sc", "end")],
        signals=[x],
    )
    thrower = model(
        f"{k}_t",
        start() + signal_throw("th", x) + signal_end("se", y),
        [("start", "th"), ("th", "se")],
        signals=[x, y],
    )
    ender = model(
        f"{k}_e",
        start() + signal_catch("sc", y) + end(),
        [("start", "sc"), ("sc", "end")],
        signals=[y],
    )
    c = wstack.client
    for xml in (catcher, thrower, ender):
        c.deploy(xml)
    catchers = [c.start(f"{k}_c") for _ in range(3)]
    e = c.start(f"{k}_e")
    for iid in [*catchers, e]:
        waiting(wstack, iid, "signal")
    assert all(holds(wstack, i)["subscriptions"] == 1 for i in [*catchers, e])
    t = c.start(f"{k}_t")
    for iid in [*catchers, e, t]:
        wstack.wait_status(iid, "completed")
        assert holds(wstack, iid)["subscriptions"] == 0
    # A Client signal reaches a catcher the same way.
    late = c.start(f"{k}_c")
    waiting(wstack, late, "signal")
    c.signal(x)
    wstack.wait_status(late, "completed")


# -- messages: keyed starts, buffering with TTL, message ids -------------------------------


def test_same_message_name_keyed_start_and_catch_one_instance_per_key(wstack: Stack) -> None:
    """docs/waits.md (Messages): key K wakes K's waiting instance (or joins it), an unseen key
    starts a new one; exactly one instance per key."""
    k = f"smn_{uid()}"
    name = f"order-{k}"
    nodes = message_start("ms", name) + user_task("review") + message_catch("mc", name) + end()
    flows = [("ms", "review"), ("review", "mc"), ("mc", "end")]
    c = wstack.client
    c.deploy(model(k, nodes, flows, messages={name: "=orderId"}))
    k1, k2 = f"{k}-K1", f"{k}-K2"

    def of_key(key: str) -> list[Any]:
        return [v for v in c.instances(key=k) if v.variables.get("orderId") == key]

    c.send_message(name, k1, {"orderId": k1})
    (first,) = wait_for(lambda: of_key(k1), what="K1 started")
    waiting(wstack, first.id, "user_task")
    c.send_message(name, k1, {"orderId": k1, "again": True})  # not waiting yet: joins
    wait_for(lambda: facts(wstack, first.id, "DuplicateStart"), what="joined")
    (task,) = c.user_tasks(first.id)
    c.complete_task(task.id)
    waiting(wstack, first.id, "message")
    c.send_message(name, k1, {"orderId": k1, "third": True})  # waiting: wakes it
    assert wstack.wait_status(first.id, "completed").variables.get("third") is True
    c.send_message(name, k2, {"orderId": k2})  # unseen: starts a new one
    wait_for(lambda: of_key(k2), what="K2 started")
    time.sleep(1.0)
    assert len(of_key(k1)) == 1 and len(of_key(k2)) == 1


def test_keyed_start_racing_messages_make_exactly_one_instance(wstack: Stack) -> None:
    k = f"ksr_{uid()}"
    name = f"open-{k}"
    nodes = message_start("ms", name) + user_task("ut") + end()
    c = wstack.client
    c.deploy(model(k, nodes, [("ms", "ut"), ("ut", "end")], messages={name: "=acct"}))
    key = f"{k}-acct"
    threads = [
        threading.Thread(target=c.send_message, args=(name, key, {"acct": key, "n": i}))
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (first,) = wait_for(lambda: c.instances(key=k), what="started")
    wait_for(
        lambda: len(facts(wstack, first.id, "DuplicateStart")) >= 7,
        what="the seven other messages joined the one instance",
    )
    time.sleep(1.0)  # nothing more arrives: no second instance, no eighth join
    (only,) = c.instances(key=k)
    assert len(facts(wstack, only.id, "DuplicateStart")) == 7


def test_buffered_message_is_delivered_once_to_the_first_subscription(wstack: Stack) -> None:
    k = f"buf_{uid()}"
    name = f"m-{k}"
    nodes = start() + message_catch("mc", name) + end()
    c = wstack.client
    c.deploy(model(k, nodes, [("start", "mc"), ("mc", "end")], messages={name: "=id"}))
    c.send_message(name, k, {"early": True}, ttl=60)
    time.sleep(1.0)  # routed and buffered before anyone subscribes
    first = c.start(k, {"id": k})
    view = wstack.wait_status(first, "completed")
    assert view.variables["early"] is True
    second = c.start(k, {"id": k})
    waiting(wstack, second, "message")
    time.sleep(1.5)
    assert c.instance(second).status == "active"  # delivered once, not twice
    c.cancel(second)


def test_expired_buffered_message_is_not_delivered(wstack: Stack) -> None:
    k = f"exp_{uid()}"
    name = f"m-{k}"
    nodes = start() + message_catch("mc", name) + end()
    c = wstack.client
    c.deploy(model(k, nodes, [("start", "mc"), ("mc", "end")], messages={name: "=id"}))
    c.send_message(name, k, {"stale": True}, ttl=1)
    time.sleep(2.5)
    iid = c.start(k, {"id": k})
    waiting(wstack, iid, "message")
    time.sleep(1.5)
    view = c.instance(iid)
    assert view.status == "active" and "stale" not in view.variables
    c.send_message(name, k, {"fresh": True})
    assert wstack.wait_status(iid, "completed").variables["fresh"] is True


def test_message_id_makes_redelivery_idempotent(wstack: Stack) -> None:
    k = f"mid_{uid()}"
    name = f"tick-{k}"
    nodes = start() + message_catch("mc", name) + script("inc", "=n + 1", "n") + xor("gw") + end()
    flows = [
        ("start", "mc"),
        ("mc", "inc"),
        ("inc", "gw"),
        ("gw", "mc", "=n < 100"),
        ("gw", "end", "=n >= 100"),
    ]
    c = wstack.client
    c.deploy(model(k, nodes, flows, messages={name: "=id"}))
    iid = c.start(k, {"id": k, "n": 0})
    waiting(wstack, iid, "message")
    for _ in range(3):
        c.send_message(name, k, message_id=f"{k}-same")
    c.send_message(name, k, message_id=f"{k}-other")
    wait_for(lambda: c.instance(iid).variables["n"] == 2, what="two distinct messages")
    time.sleep(1.5)
    assert c.instance(iid).variables["n"] == 2
    c.cancel(iid)


# -- FR-3b: total withdrawal, counted ------------------------------------------------------


def test_many_cycles_no_hold_table_grows_and_lineage_stays_flat(wstack: Stack) -> None:
    """Each cycle: a user task under a 1 h interrupting boundary timer, then a message
    catch. Ten cycles (twenty triggers): the hold rows at each stage are the same
    count, the token lineage the same length, and at the end nothing is held."""
    k = f"cyc2_{uid()}"
    name = f"next-{k}"
    nodes = (
        start()
        + user_task("ut")
        + boundary("bt", "ut", timer_def("PT1H"))
        + message_catch("mc", name)
        + script("inc", "=n + 1", "n")
        + xor("gw")
        + end("done")
        + end("late")
    )
    flows = [
        ("start", "ut"),
        ("ut", "mc"),
        ("mc", "inc"),
        ("inc", "gw"),
        ("gw", "ut", "=n < 10"),
        ("gw", "done", "=n >= 10"),
        ("bt", "late"),
    ]
    c = wstack.client
    c.deploy(model(k, nodes, flows, messages={name: "=id"}))
    iid = c.start(k, {"id": k, "n": 0})
    at_task, at_msg, lineage = [], [], []
    for cycle in range(10):
        (task,) = wait_for(lambda: c.user_tasks(iid), what=f"task {cycle}")
        at_task.append(holds(wstack, iid))
        lineage.append(sorted(len(v) for v in lineages(wstack, iid).values()))
        c.complete_task(task.id)
        wait_for(
            lambda: any(w.kind == "message" for w in c.instance(iid).waits), what=f"message {cycle}"
        )
        at_msg.append(holds(wstack, iid))
        c.send_message(name, k)
    wstack.wait_status(iid, "completed")
    assert at_task == [{"deadlines": 1, "subscriptions": 0, "user_tasks": 1}] * 10
    assert at_msg == [{"deadlines": 0, "subscriptions": 1, "user_tasks": 0}] * 10
    assert lineage == [lineage[0]] * 10
    assert holds(wstack, iid) == {"deadlines": 0, "subscriptions": 0, "user_tasks": 0}
    assert len(checkpoint(wstack, iid)["tokens"]) <= 2  # history lives in facts


# -- docs/waits.md: a failed wake keeps its hold ----------------------------------------


def _pin_missing_version(stack: Stack, iid: str, version: int) -> None:
    """Make the instance pinned to a version not deployed on this database (as if its
    row came from another database): the next wake cannot load its model."""
    with engine_of(stack).begin() as conn:
        row = conn.execute(
            text("SELECT checkpoint FROM instances WHERE id = :i"), {"i": iid}
        ).scalar_one()
        import json

        cp = row if isinstance(row, dict) else json.loads(row)
        cp["version"] = version
        conn.execute(
            text("UPDATE instances SET version = :v, checkpoint = :c WHERE id = :i"),
            {"v": version, "c": json.dumps(cp), "i": iid},
        )


def test_fix027_failed_wake_keeps_the_hold_backs_off_and_heals_on_deploy(
    wstack: Stack,
) -> None:
    k = f"fw_{uid()}"
    v1 = model(k, start() + timer_catch("tm", "PT2S") + end(), [("start", "tm"), ("tm", "end")])
    c = wstack.client
    c.deploy(v1)
    iid = c.start(k)
    waiting(wstack, iid, "timer")
    _pin_missing_version(wstack, iid, 2)
    wait_for(lambda: facts(wstack, iid, "WakeFailed"), timeout=20, what="a failed wake")
    # The hold is kept, unclaimed, pushed out by the backoff; the instance is untouched.
    (row,) = deadline_rows(wstack, iid)
    assert row.attempts >= 1 and row.claimed_until is None and "v" in (row.last_error or "")
    assert c.instance(iid).status == "active"
    # Not spun: over 3 backoffs, at most ~4 attempts (a spin would make hundreds).
    t0 = len(facts(wstack, iid, "WakeFailed"))
    time.sleep(3 * BACKOFF)
    attempts = len(facts(wstack, iid, "WakeFailed")) - t0
    assert 1 <= attempts <= 4, attempts
    assert len(deadline_rows(wstack, iid)) == 1
    # Deploying the missing version heals it, with no restart.
    c.deploy(v1.replace("<bpmn:endEvent", '<bpmn:endEvent name="v2"'))
    wstack.wait_status(iid, "completed", timeout=20)
    assert deadline_rows(wstack, iid) == []
    assert woken_by(wstack, iid, "timer") == 1


def test_fix027_a_message_subscription_survives_a_failed_wake(wstack: Stack) -> None:
    k = f"fm_{uid()}"
    name = f"m-{k}"
    v1 = model(
        k,
        start() + message_catch("mc", name) + end(),
        [("start", "mc"), ("mc", "end")],
        messages={name: "=id"},
    )
    c = wstack.client
    c.deploy(v1)
    iid = c.start(k, {"id": k})
    waiting(wstack, iid, "message")
    _pin_missing_version(wstack, iid, 2)
    c.send_message(name, k, {"try": 1})
    time.sleep(2.0)
    assert holds(wstack, iid)["subscriptions"] == 1
    assert c.instance(iid).status == "active"
    c.deploy(v1.replace("<bpmn:endEvent", '<bpmn:endEvent name="v2"'))
    c.send_message(name, k, {"try": 2})
    assert wstack.wait_status(iid, "completed").variables["try"] == 2
    assert holds(wstack, iid)["subscriptions"] == 0


def test_fix027_the_backoff_setting_validates(tmp_path: Path) -> None:
    for bad in ("0", "-1", "soon"):
        with pytest.raises(InvalidSetting, match="DORMANT_WAKE_RETRY_BACKOFF_SECONDS"):
            Settings.from_env({"DORMANT_WAKE_RETRY_BACKOFF_SECONDS": bad})
    assert Settings.from_env({"DORMANT_DEADLINE_CLAIM_SECONDS": "10"}).wake_backoff == 5.0
    import subprocess
    import sys

    from tests.integration.conftest import REPO

    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "DORMANT_DATABASE_URL": f"sqlite:///{tmp_path / 'd.sqlite3'}",
        "DORMANT_BROKER_URL": f"sqla+sqlite:///{tmp_path / 'b.sqlite3'}",
        "DORMANT_WAKE_RETRY_BACKOFF_SECONDS": "0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "dormant.tasks.cli", "worker"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "DORMANT_WAKE_RETRY_BACKOFF_SECONDS" in done.stderr + done.stdout

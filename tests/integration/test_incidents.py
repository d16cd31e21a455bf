"""Incidents on the real services (docs/incidents.md; the mapping is in tests/README.md).

Client / CLI / Flower → broker → ``dormant worker`` (jobs in
``tests.integration.incident_jobs``: they fail until a flag file exists and count their
runs) → Store, with ``dormant beat`` firing scheduled retries — on PostgreSQL + Redis
and on the embedded default. What is asserted is what an operator sees: the incident
record, token states, instance status, history facts, hold rows and the worker log.
"""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.error
import urllib.request
from base64 import b64encode
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from dormant.engine_core.checkpoint import encode
from dormant.engine_core.errors import InvalidOperation, UnknownIncident
from dormant.persistence.instance_rows import checkpoint_of
from dormant.persistence.tables import deadlines, instances
from tests.integration.conftest import Proc, Stack, wait_for

pytestmark = pytest.mark.integration

SECRET = "4111-1111-1111-1111"  # a payload value: never in a fact or a log line

HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
    'xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" '
    'xmlns:dormant="http://dormant.dev/schema/1.0" '
    'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" id="d" targetNamespace="t">'
)


def process(key: str, body: str, flows: list[tuple[str, str]], extra: str = "") -> str:
    xml = "".join(
        f'<bpmn:sequenceFlow id="f{i}" sourceRef="{a}" targetRef="{b}"/>'
        for i, (a, b) in enumerate(flows)
    )
    return (
        f'{HEAD}<bpmn:process id="{key}" isExecutable="true">{body}{xml}'
        f"</bpmn:process>{extra}</bpmn:definitions>"
    )


def flaky(
    node_id: str = "charge",
    job_type: str = "inc-flag",
    retries: str | None = "1",
    *,
    policy: str = "",
    inner: str = "",
    attrs: str = "",
) -> str:
    """A service task whose job fails until the flag is set; ``retries`` None = default (3)."""
    retry_attr = f' retries="{retries}"' if retries is not None else ""
    return (
        f'<bpmn:serviceTask id="{node_id}" name="Charge card"{attrs}><bpmn:extensionElements>'
        f'<zeebe:taskDefinition type="{job_type}"{retry_attr}/>{policy}'
        f"</bpmn:extensionElements>{inner}</bpmn:serviceTask>"
    )


def linear(key: str, node: str = "") -> str:
    """start → charge → end."""
    return process(
        key,
        f'<bpmn:startEvent id="s"/>{node or flaky()}<bpmn:endEvent id="e"/>',
        [("s", "charge"), ("charge", "e")],
    )


def fork(key: str) -> str:
    """start → fork → [charge → charged] + [user task side → side_end]."""
    return process(
        key,
        '<bpmn:startEvent id="s"/><bpmn:parallelGateway id="fork"/>'
        + flaky()
        + '<bpmn:endEvent id="charged"/><bpmn:userTask id="side" name="Side"/>'
        '<bpmn:endEvent id="side_end"/>',
        [
            ("s", "fork"),
            ("fork", "charge"),
            ("charge", "charged"),
            ("fork", "side"),
            ("side", "side_end"),
        ],
    )


def timer_boundary(boundary_id: str, interrupting: bool, duration: str) -> str:
    cancel = "true" if interrupting else "false"
    return (
        f'<bpmn:boundaryEvent id="{boundary_id}" attachedToRef="charge" '
        f'cancelActivity="{cancel}"><bpmn:timerEventDefinition>'
        f"<bpmn:timeDuration>{duration}</bpmn:timeDuration>"
        "</bpmn:timerEventDefinition></bpmn:boundaryEvent>"
    )


def incident_facts(stack: Stack, iid: str) -> list[dict[str, Any]]:
    return [f.details for f in stack.client.history(iid) if f.kind == "Incident"]


def actions(stack: Stack, iid: str) -> list[str]:
    return [str(d["action"]) for d in incident_facts(stack, iid)]


def runs(flag: Path, suffix: str = ".runs") -> list[str]:
    path = Path(f"{flag}{suffix}")
    return path.read_text().splitlines() if path.exists() else []


def the_incident(stack: Stack, iid: str, **expect: Any) -> Any:
    """Wait until the instance has exactly one incident matching ``expect``."""

    def check() -> Any:
        found = stack.client.incidents(iid)
        if len(found) == 1 and all(getattr(found[0], k) == v for k, v in expect.items()):
            return found[0]
        return None

    try:
        return wait_for(check, 30, what=f"incident {expect} on {iid}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{stack.diagnostics(iid)}") from None


def token_states(stack: Stack, iid: str) -> dict[str, str]:
    return {t.node_id: t.state for t in stack.client.instance(iid).tokens}


def worker_log(stack: Stack) -> str:
    return "\n".join(p.text() for p in stack.procs if p.name.startswith("worker"))


def raised_lines(stack: Stack, incident_id: str) -> list[str]:
    return [
        line
        for line in worker_log(stack).splitlines()
        if "incident raised" in line and f"incident={incident_id} " in line
    ]


def revision(stack: Stack, iid: str) -> int:
    return int(stack.client.instance(iid).revision)


# -- T-1, T-5a, T-7, T-8 (default), T-14, T-15 ------------------------------------------


def test_failure_parks_its_token_siblings_run_and_retries_update_one_incident(
    shared_stack: Stack, tmp_path: Path
) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(fork("inc-fork"))
    flag = tmp_path / "flag"
    iid = c.start("inc-fork", {"flag": str(flag), "card": SECRET})
    inc = the_incident(stack, iid, state="open")
    # T-1 / T-4: the job ran out of its one retry; the record carries the diagnostic.
    assert (inc.node_id, inc.node_name, inc.job_type) == ("charge", "Charge card", "inc-flag")
    assert inc.cause_class == "RuntimeError" and inc.attempts == 1
    assert "job 'inc-flag' failed after 1 attempt(s): the flag is not set" in inc.cause
    assert inc.retry_at is None  # T-8: the engine default schedules nothing
    assert inc.data == {"flag": str(flag), "card": SECRET}  # T-5a: the snapshot
    view = c.instance(iid)
    assert view.status == "active_incidents"
    assert token_states(stack, iid) == {"charge": "incident", "side": "waiting"}
    # T-15: the persisted status is in flight for the queries that list instances.
    assert iid in [i.id for i in c.instances(status="active_incidents")]
    assert [i.id for i in c.incidents(key="inc-fork", node_id="charge", state="open")] == [inc.id]
    # T-1: the sibling branch completes; the instance stays alive.
    [task] = c.user_tasks(iid)
    c.complete_task(task.id, {"note": "written after the raise"})
    wait_for(lambda: token_states(stack, iid) == {"charge": "incident"}, what="side done")
    assert c.instance(iid).status == "active_incidents"
    assert c.incident(inc.id).data == inc.data  # T-5a: a later write leaves it alone

    # T-7: a retry re-runs the node; the repeat failure updates the same incident.
    c.retry_incident(inc.id)
    again = the_incident(stack, iid, attempts=2, state="open")
    assert again.id == inc.id and again.token_id != inc.token_id
    assert again.lineage[-1] == inc.token_id  # a fresh token, lineage from the failed one
    assert again.first_at == inc.first_at and again.last_at > inc.last_at
    assert again.data["note"] == "written after the raise"  # T-5a: refreshed per raise
    assert len(runs(flag)) == 2

    # The fix, then a retry from the CLI: the node runs again and the instance completes.
    flag.touch()
    done = stack.run_cli("incidents", "retry", inc.id)
    assert done.returncode == 0, done.stderr
    final = stack.wait_status(iid, "completed")
    assert final.variables["charged"] is True
    assert c.incident(inc.id).state == "retried" and len(runs(flag)) == 3
    assert len({line.split()[1] for line in runs(flag)}) == 3  # a new idempotency key each

    # T-14: one fact per action, with the cause class and never a payload value.
    assert actions(stack, iid) == ["raised", "retried", "raised", "retried", "retry-succeeded"]
    assert all(d["cause_class"] == "RuntimeError" for d in incident_facts(stack, iid))
    assert SECRET not in repr([f.details for f in c.history(iid)])
    # FR-2: every raise logged once at ERROR in the worker; no payload value in the log.
    lines = raised_lines(stack, inc.id)
    assert len(lines) == 2 and all("ERROR" in line for line in lines), lines
    assert f"instance={iid}" in lines[0] and "node=charge cause_class=RuntimeError" in lines[0]
    assert SECRET not in worker_log(stack)


# -- T-2, T-2a ------------------------------------------------------------------------


def test_uncaught_bpmn_error_opens_an_incident_but_an_error_end_event_fails(
    shared_stack: Stack,
) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(linear("inc-bpmn-error", flaky(job_type="test-bpmn-error")))
    c.deploy(
        process(
            "inc-error-end",
            '<bpmn:startEvent id="s"/><bpmn:endEvent id="boom">'
            '<bpmn:errorEventDefinition errorRef="err"/></bpmn:endEvent>',
            [("s", "boom")],
            extra='<bpmn:error id="err" name="Boom" errorCode="boom"/>',
        )
    )
    thrown = c.start("inc-bpmn-error")
    ended = c.start("inc-error-end")
    inc = the_incident(stack, thrown, state="open")
    assert inc.cause_class == "UnhandledError" and inc.node_id == "charge"
    assert "BPMN error 'declined'" in inc.cause and "was not caught" in inc.cause
    assert c.instance(thrown).status == "active_incidents"
    assert token_states(stack, thrown) == {"charge": "incident"}
    wait_for(lambda: raised_lines(stack, inc.id), what="the ERROR line")
    time.sleep(0.5)  # nothing else may log it again
    assert len(raised_lines(stack, inc.id)) == 1
    # T-2a: the modelled outcome stays fatal: no incident, the instance failed.
    failed = stack.wait_status(ended, "failed")
    assert failed.incidents == [] and c.incidents(ended) == []


# -- T-3 ------------------------------------------------------------------------------


def test_a_broken_invariant_fails_the_instance_instead_of_raising(shared_stack: Stack) -> None:
    """A corrupted checkpoint (a token at a node the definition does not have): the
    core's invariant check fires inside the worker and the instance fails, no incident."""
    stack, c = shared_stack, shared_stack.client
    c.deploy(linear("inc-invariant", '<bpmn:userTask id="charge" name="Approve"/>'))
    iid = c.start("inc-invariant")
    [task] = wait_for(lambda: c.user_tasks(iid), what="the user task")
    engine = c._store.engine
    with engine.begin() as conn:
        cp = checkpoint_of(
            conn.execute(
                select(instances.c.id, instances.c.key, instances.c.checkpoint).where(
                    instances.c.id == iid
                )
            ).one()
        )
        for token in cp.tokens.values():
            token.node_id = "ghost"
        conn.execute(update(instances).where(instances.c.id == iid).values(checkpoint=encode(cp)))
    c.complete_task(task.id)
    view = stack.wait_status(iid, "failed")
    assert view.incidents == []
    assert "internal invariant broken" in c._store.queries.checkpoint(iid).failure
    assert "'ghost'" in c._store.queries.checkpoint(iid).failure


# -- T-4 ------------------------------------------------------------------------------


def test_job_retries_below_the_engine_then_an_incident_with_the_diagnostic(
    shared_stack: Stack, tmp_path: Path
) -> None:
    """The model's retries (default 3) with backoff, whether or not the Celery task has
    its own: with ``autoretry_for`` only the task's final failure is one engine attempt."""
    stack, c = shared_stack, shared_stack.client
    c.deploy(linear("inc-default-retries", flaky(retries=None)))
    c.deploy(linear("inc-autoretry", flaky(job_type="inc-autoretry", retries="2")))
    plain_flag, auto_flag = tmp_path / "plain", tmp_path / "auto"
    plain = c.start("inc-default-retries", {"flag": str(plain_flag)})
    auto = c.start("inc-autoretry", {"flag": str(auto_flag)})

    inc = the_incident(stack, plain, state="open")
    assert inc.job_type == "inc-flag" and inc.cause_class == "RuntimeError"
    assert "job 'inc-flag' failed after 3 attempt(s): the flag is not set" in inc.cause
    keys = [line.split()[1] for line in runs(plain_flag)]
    assert [k.rsplit(":", 1)[1] for k in keys] == ["1", "2", "3"]  # a new key per attempt
    scheduled = [f.details for f in c.history(plain) if f.kind == "JobRetryScheduled"]
    assert [d["attempt"] for d in scheduled] == [2, 3]

    inc = the_incident(stack, auto, state="open")
    assert "job 'inc-autoretry' failed after 2 attempt(s)" in inc.cause
    # Two engine attempts, each one Celery run plus one Celery retry with the same key.
    attempts = [line.split()[1].rsplit(":", 1)[1] for line in runs(auto_flag)]
    assert attempts == ["1", "1", "2", "2"], runs(auto_flag)


# -- T-5, T-10 ------------------------------------------------------------------------


def test_drop_dead_letters_blocks_completion_and_cancel_then_works(
    shared_stack: Stack, tmp_path: Path
) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(fork("inc-drop"))
    flag = tmp_path / "flag"
    iid = c.start("inc-drop", {"flag": str(flag)})
    inc = the_incident(stack, iid, state="open")
    assert token_states(stack, iid)["charge"] == "incident"  # T-5 while open
    [task] = c.user_tasks(iid)
    c.complete_task(task.id)
    wait_for(lambda: "side" not in token_states(stack, iid), what="side done")
    c.drop_incident(inc.id)
    the_incident(stack, iid, state="dead_lettered")
    assert token_states(stack, iid) == {"charge": "completed"}  # T-5 after the drop
    time.sleep(1.0)
    view = c.instance(iid)
    assert view.status == "active" and view.ended_at is None  # never completes past it
    assert actions(stack, iid) == ["raised", "dead-lettered"]
    assert len(runs(flag)) == 1
    c.cancel(iid)
    stack.wait_status(iid, "terminated")
    assert c.incident(inc.id).state == "dead_lettered"  # the dead letter is kept


# -- T-9 and the Flower API (the management task by name, with basic auth) ---------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, body: dict[str, Any], auth: str | None) -> int:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    if auth:
        request.add_header("Authorization", "Basic " + b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_resolve_continues_without_rerunning_and_flower_retries(
    shared_stack: Stack, tmp_path: Path
) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(linear("inc-resolve"))
    resolved_flag, flower_flag = tmp_path / "resolved", tmp_path / "flower"
    resolved = c.start("inc-resolve", {"flag": str(resolved_flag)})
    by_flower = c.start("inc-resolve", {"flag": str(flower_flag)})

    # T-9: resolve takes the outgoing flow; the node does not run again.
    inc = the_incident(stack, resolved, state="open")
    c.resolve_incident(inc.id)
    view = stack.wait_status(resolved, "completed")
    assert "charged" not in view.variables and len(runs(resolved_flag)) == 1
    assert c.incident(inc.id).state == "resolved"
    assert actions(stack, resolved) == ["raised", "resolved"]

    # An operator's retry through Flower's task API, as in docs/incidents.md.
    port = _free_port()
    flower = Proc(
        f"flower-{len(stack.procs)}",
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "dormant.tasks.app",
            "flower",
            f"--port={port}",
            "--address=127.0.0.1",
            "--basic-auth=ops:secret",
        ],
        stack.env,
        stack.tmp,
    )
    stack.procs.append(flower)
    flower.start(ready="Visit me at")
    try:
        inc = the_incident(stack, by_flower, state="open")
        url = f"http://127.0.0.1:{port}/api/task/async-apply/dormant.incident.retry"
        assert _post(url, {"args": [inc.id]}, None) == 401
        assert _post(url, {"args": [inc.id]}, "ops:wrong") == 401
        time.sleep(0.5)
        assert c.incident(inc.id).state == "open" and len(runs(flower_flag)) == 1
        flower_flag.touch()
        assert _post(url, {"args": [inc.id]}, "ops:secret") == 200
        assert stack.wait_status(by_flower, "completed").variables["charged"] is True
        assert c.incident(inc.id).state == "retried"
    finally:
        flower.stop()


# -- unknown and closed incidents: the Client, the CLI and the Celery task --------------


def test_unknown_or_closed_incident_is_refused_everywhere_and_changes_nothing(
    shared_stack: Stack, tmp_path: Path
) -> None:
    from dormant.tasks.app import app, publish

    stack, c = shared_stack, shared_stack.client
    c.deploy(fork("inc-refuse"))
    iid = c.start("inc-refuse", {"flag": str(tmp_path / "flag")})
    inc = the_incident(stack, iid, state="open")
    c.resolve_incident(inc.id)
    wait_for(lambda: c.incident(inc.id).state == "resolved", what="resolved")
    before = revision(stack, iid)

    with pytest.raises(UnknownIncident, match="no incident 'inc-nope'"):
        c.retry_incident("inc-nope")
    for op in ("retry", "resolve", "drop"):
        with pytest.raises(InvalidOperation, match=f"cannot {op} incident .* it is resolved"):
            getattr(c, f"{op}_incident")(inc.id)
        out = stack.run_cli("incidents", op, inc.id)
        assert out.returncode == 2 and "it is resolved" in out.stderr, out.stderr
    out = stack.run_cli("incidents", "drop", "inc-nope")
    assert out.returncode == 2 and "no incident 'inc-nope'" in out.stderr
    out = stack.run_cli("incidents", "list", "--state", "bogus")
    assert out.returncode == 2 and "'bogus' is not one of 'open'" in out.stderr

    # The management task sent by name (as Flower or a bare Celery producer would).
    with app.connection_for_write(stack.broker_url) as conn:
        for op, incident_id in (("retry", inc.id), ("drop", inc.id), ("resolve", "inc-nope")):
            publish(
                f"dormant.incident.{op}",
                f"trigger.incident_{op}",
                {"incident_id": incident_id},
                connection=conn,
            )
    wait_for(
        lambda: (
            worker_log(stack).count(f"incident {inc.id} of instance {iid} is already resolved") >= 2
            and "no incident 'inc-nope'" in worker_log(stack)
        ),
        what="the three refusals in the worker log",
    )
    assert revision(stack, iid) == before
    assert c.incident(inc.id).state == "resolved"
    assert actions(stack, iid) == ["raised", "resolved"]


# -- T-11 ----------------------------------------------------------------------------


def test_boundary_timers_across_an_open_incident(shared_stack: Stack, tmp_path: Path) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(
        process(
            "inc-boundary-nonint",
            '<bpmn:startEvent id="s"/>'
            + flaky()
            + timer_boundary("remind", False, "PT3S")
            + '<bpmn:userTask id="notified" name="Notified"/><bpmn:endEvent id="e"/>'
            '<bpmn:endEvent id="e2"/>',
            [("s", "charge"), ("charge", "e"), ("remind", "notified"), ("notified", "e2")],
        )
    )
    c.deploy(
        process(
            "inc-boundary-int",
            '<bpmn:startEvent id="s"/>'
            + flaky()
            + timer_boundary("timeout", True, "PT3S")
            + '<bpmn:endEvent id="e"/><bpmn:endEvent id="timed_out"/>',
            [("s", "charge"), ("charge", "e"), ("timeout", "timed_out")],
        )
    )
    flag = tmp_path / "flag"
    nonint = c.start("inc-boundary-nonint", {"flag": str(flag)})
    overtaken = c.start("inc-boundary-int", {"flag": str(tmp_path / "other")})

    inc = the_incident(stack, nonint, state="open")
    assert [w.node_id for w in c.instance(nonint).waits] == ["remind"]  # still armed
    [task] = wait_for(lambda: c.user_tasks(nonint), 15, what="the boundary's user task")
    assert the_incident(stack, nonint).state == "open"  # fired while the incident is open
    c.retry_incident(inc.id)
    the_incident(stack, nonint, attempts=2, state="open")
    # The retry re-ran the job but did not arm the (one-shot) boundary again.
    assert [w.node_id for w in c.instance(nonint).waits] == ["notified"]
    assert [f.details["boundary"] for f in c.history(nonint) if f.kind == "BoundaryFired"] == [
        "remind"
    ]
    flag.touch()
    c.complete_task(task.id)
    c.retry_incident(inc.id)
    stack.wait_status(nonint, "completed")

    # An interrupting boundary closes the incident as overtaken.
    stack.wait_status(overtaken, "completed")
    [closed] = c.incidents(overtaken)
    assert closed.state == "overtaken"
    assert actions(stack, overtaken) == ["raised", "overtaken"]


# -- T-12, T-13 ----------------------------------------------------------------------


def test_failed_attempts_never_enter_the_compensation_ledger(
    shared_stack: Stack, tmp_path: Path
) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(
        process(
            "inc-compensate",
            '<bpmn:startEvent id="s"/>'
            + flaky()
            + '<bpmn:boundaryEvent id="comp" attachedToRef="charge">'
            "<bpmn:compensateEventDefinition/></bpmn:boundaryEvent>"
            + flaky("refund", "inc-undo", attrs=' isForCompensation="true"')
            + '<bpmn:association id="a1" associationDirection="One" sourceRef="comp" '
            'targetRef="refund"/>'
            '<bpmn:intermediateThrowEvent id="undo"><bpmn:compensateEventDefinition/>'
            '</bpmn:intermediateThrowEvent><bpmn:endEvent id="e"/>',
            [("s", "charge"), ("charge", "undo"), ("undo", "e")],
        )
    )
    flag = tmp_path / "flag"
    iid = c.start("inc-compensate", {"flag": str(flag)})
    inc = the_incident(stack, iid, state="open")
    c.retry_incident(inc.id)
    inc = the_incident(stack, iid, attempts=2, state="open")
    flag.touch()
    c.retry_incident(inc.id)
    stack.wait_status(iid, "completed")
    assert len(runs(flag)) == 3  # two failed attempts and the one that completed
    assert len(runs(flag, ".undo.runs")) == 1  # the handler ran for the completion only
    assert [f.details for f in c.history(iid) if f.kind == "Compensating"] == [
        {"node": "undo", "handlers": 1}
    ]


def test_multi_instance_one_inner_instance_fails_and_only_it_is_retried(
    shared_stack: Stack, tmp_path: Path
) -> None:
    stack, c = shared_stack, shared_stack.client
    loop = (
        '<bpmn:multiInstanceLoopCharacteristics isSequential="false">'
        '<bpmn:extensionElements><zeebe:loopCharacteristics inputCollection="=items" '
        'inputElement="item"/></bpmn:extensionElements>'
        "</bpmn:multiInstanceLoopCharacteristics>"
    )
    c.deploy(linear("inc-mi", flaky(inner=loop)))
    flag = tmp_path / "flag"
    iid = c.start("inc-mi", {"flag": str(flag), "items": ["a", "bad", "c"]})
    inc = the_incident(stack, iid, state="open")
    assert inc.data["item"] == "bad"  # the snapshot is the inner instance's view
    wait_for(
        lambda: sorted(line.split()[0] for line in runs(flag)) == ["a", "bad", "c"],
        what="every inner job ran",
    )
    time.sleep(0.5)
    assert c.instance(iid).status == "active_incidents"
    flag.touch()
    c.retry_incident(inc.id)
    stack.wait_status(iid, "completed")
    assert sorted(line.split()[0] for line in runs(flag)) == ["a", "bad", "bad", "c"]


# -- T-15: a keyed message start joins an instance that holds an incident -----------------


def test_an_instance_with_open_incidents_is_in_flight_for_keyed_starts(
    shared_stack: Stack, tmp_path: Path
) -> None:
    stack, c = shared_stack, shared_stack.client
    c.deploy(
        process(
            "inc-keyed",
            '<bpmn:startEvent id="s"><bpmn:messageEventDefinition messageRef="m"/>'
            "</bpmn:startEvent>" + flaky() + '<bpmn:endEvent id="e"/>',
            [("s", "charge"), ("charge", "e")],
            extra='<bpmn:message id="m" name="inc-order-placed"><bpmn:extensionElements>'
            '<zeebe:subscription correlationKey="=orderId"/></bpmn:extensionElements>'
            "</bpmn:message>",
        )
    )
    variables = {"flag": str(tmp_path / "flag"), "orderId": "o-1"}
    c.send_message("inc-order-placed", "o-1", variables)
    [first] = wait_for(lambda: c.instances(key="inc-keyed"), what="the keyed start")
    the_incident(stack, first.id, state="open")
    assert c.instance(first.id).status == "active_incidents"
    c.send_message("inc-order-placed", "o-1", variables)
    wait_for(
        lambda: [f for f in c.history(first.id) if f.kind == "DuplicateStart"],
        what="the second start to join the first instance",
    )
    assert [i.id for i in c.instances(key="inc-keyed")] == [first.id]  # joined, not a second


# -- T-6, T-6b, T-8: a scheduled retry survives a worker and beat restart -----------------


def test_scheduled_retries_survive_a_worker_and_beat_restart(
    bare_stack: Stack, tmp_path: Path
) -> None:
    """Per activity (<dormant:retryPolicy>) and engine-wide (DORMANT_INCIDENT_RETRY_*):
    each incident becomes retry_scheduled with a deadline row; the processes stop; the
    flag is set; after the restart beat fires both retries and the instances complete."""
    stack, c = bare_stack, bare_stack.client
    stack.env["DORMANT_INCIDENT_RETRY_ATTEMPTS"] = "1"
    stack.env["DORMANT_INCIDENT_RETRY_BACKOFF_SECONDS"] = "5"
    policy = '<dormant:retryPolicy attempts="1" backoff="PT4S"/>'
    c.deploy(linear("inc-policy", flaky(policy=policy)))
    c.deploy(linear("inc-engine-default"))
    worker, beat = stack.worker_and_beat()
    flag = tmp_path / "flag"
    by_activity = c.start("inc-policy", {"flag": str(flag)})
    by_default = c.start("inc-engine-default", {"flag": str(flag)})
    scheduled = [the_incident(stack, i, state="retry_scheduled") for i in (by_activity, by_default)]
    worker.stop()
    beat.stop()
    for inc, iid in zip(scheduled, (by_activity, by_default), strict=True):
        assert inc.retry_at is not None and c.instance(iid).status == "active_incidents"
        assert actions(stack, iid) == ["raised", "retry-scheduled"]
        with c._store.engine.connect() as conn:
            rows = conn.execute(
                select(func.count()).select_from(deadlines).where(deadlines.c.instance_id == iid)
            ).scalar()
        assert rows == 1
    assert {i.id for i in c.instances(status="active_incidents")} >= {by_activity, by_default}
    flag.touch()
    time.sleep(max(0.0, max(i.retry_at for i in scheduled).timestamp() - time.time()) + 0.5)
    stack.worker_and_beat()
    for iid in (by_activity, by_default):
        stack.wait_status(iid, "completed", timeout=40)
        assert actions(stack, iid) == ["raised", "retry-scheduled", "retried", "retry-succeeded"]
    assert len(runs(flag)) == 4


def test_the_engine_default_retry_policy_setting_is_validated(tmp_path: Path) -> None:
    from dormant.engine_core.errors import InvalidSetting
    from dormant.engine_core.model import RetryPolicy
    from dormant.persistence.settings import Settings
    from dormant.persistence.store import Store

    assert Settings.from_env({}).incident_retry_policy is None  # no automatic retry
    env = {
        "DORMANT_INCIDENT_RETRY_ATTEMPTS": "2",
        "DORMANT_INCIDENT_RETRY_BACKOFF_SECONDS": "5",
        "DORMANT_DATABASE_URL": f"sqlite:///{tmp_path / 'd.sqlite3'}",
    }
    store = Store(settings=Settings.from_env(env))
    assert store.services.incident_retry_policy == RetryPolicy(2, 5.0)
    store.close()
    for var, value in (
        ("DORMANT_INCIDENT_RETRY_ATTEMPTS", "-1"),
        ("DORMANT_INCIDENT_RETRY_ATTEMPTS", "two"),
        ("DORMANT_INCIDENT_RETRY_BACKOFF_SECONDS", "0"),
    ):
        with pytest.raises(InvalidSetting, match=f"{var}='{value}' is not usable"):
            Settings.from_env({var: value})

"""Job types are a namespace of their own (issue 8, items 1 and 9).

A model author is not an operator: a job type can never name one of dormant's engine
tasks (``dormant.*``) or a Celery built-in (``celery.*``), not statically (refused at
deploy, the element named), not through FEEL (an incident at the node), and a model's
``zeebe:taskHeaders`` never reach a Celery protocol field (a header named ``task`` once
renamed the task a job ran). A job type no worker has registered is reported by the
worker that received it, so its retries run out into an incident instead of a
re-dispatch at every job timeout, forever.

Each integration test has a victim instance waiting on a user task that the attack
would cancel, and checks it untouched, while the attacking instance ends in an incident
(or runs harmlessly) and another instance is served meanwhile.
"""

from __future__ import annotations

import pytest

from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.errors import InvalidModel
from dormant.engine_core.job_types import reserved_job_type
from dormant.engine_core.triggers import Start
from tests.core.enginekit import Run
from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import end, model, start, user_task
from tests.security.shellkit import job_model, sec_stack

__all__ = ["sec_stack"]

RESERVED = [
    "dormant.cancel",
    "dormant.incident.resolve",
    "dormant.apply_trigger",
    "celery.starmap",
    "celery.chain",
    " Dormant.Cancel ",
    "celery",
]


VICTIM = model("victim", start() + user_task("wait") + end(), [("start", "wait"), ("wait", "end")])


# -- the pure rule ------------------------------------------------------------------


@pytest.mark.parametrize("job_type", RESERVED)
def test_a_static_reserved_job_type_is_refused_at_deploy_naming_the_element(
    job_type: str,
) -> None:
    with pytest.raises(InvalidModel) as err:
        read_bpmn(job_model("attack", job_type))
    message = str(err.value)
    assert "'job'" in message and "reserved namespace" in message
    assert "\n" not in message


@pytest.mark.parametrize("job_type", ["charge-card", "dormantish", "celeryjob", "x.dormant.y"])
def test_ordinary_job_types_stay_allowed(job_type: str) -> None:
    assert reserved_job_type(job_type) is None
    assert read_bpmn(job_model("fine", job_type))


@pytest.mark.parametrize("expression", ['="dormant." + "cancel"', "=handler"])
def test_a_feel_job_type_naming_an_engine_task_is_an_incident_at_the_node(
    expression: str,
) -> None:
    (definition,) = read_bpmn(job_model("attack", expression))
    run = Run(definition)
    run.send(Start(variables={"handler": "celery.starmap", "instance_id": "victim-1"}))
    assert run.status == "active_incidents"
    (incident,) = run.cp.incidents.values()
    assert incident.node_id == "job"
    assert "reserved namespace" in incident.cause
    assert run.effects_of(DispatchJob) == []


# -- through a real worker ------------------------------------------------------------


def _victim(stack: Stack) -> tuple[str, int]:
    stack.client.deploy(VICTIM)
    victim = stack.client.start("victim")
    wait_for(lambda: stack.client.user_tasks(victim), what="victim waiting on its task")
    return victim, stack.client.instance(victim).revision


def _assert_untouched(stack: Stack, victim: str, revision: int) -> None:
    view = stack.client.instance(victim)
    assert view.status == "active", stack.diagnostics(victim)
    assert view.revision == revision
    assert [t.node_id for t in stack.client.user_tasks(victim)] == ["wait"]


def _served(stack: Stack) -> None:
    """Another instance runs to its end meanwhile (a real job on the same worker)."""
    stack.client.deploy(job_model("bystander", "test-double"))
    other = stack.client.start("bystander", {"n": 2})
    assert stack.wait_status(other, "completed").variables["doubled"] == 4


def test_static_engine_job_types_are_refused_at_deploy_and_change_nothing(
    sec_stack: Stack,
) -> None:
    victim, revision = _victim(sec_stack)
    for job_type in ("dormant.cancel", "celery.starmap"):
        with pytest.raises(InvalidModel, match="reserved namespace"):
            sec_stack.client.deploy(job_model("attack-static", job_type))
    path = sec_stack.tmp / "attack.bpmn"
    path.write_text(job_model("attack-static", "dormant.incident.resolve"))
    done = sec_stack.run_cli("deploy", str(path))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "'job'" in done.stderr, done.stderr
    _served(sec_stack)
    _assert_untouched(sec_stack, victim, revision)


def test_a_feel_job_type_naming_cancel_is_an_incident_and_the_victim_is_untouched(
    sec_stack: Stack,
) -> None:
    victim, revision = _victim(sec_stack)
    sec_stack.client.deploy(job_model("attack-feel", '="dormant." + "cancel"'))
    attacker = sec_stack.client.start("attack-feel", {"instance_id": victim})
    view = sec_stack.wait_status(attacker, "active_incidents")
    (incident,) = view.incidents
    assert incident.node_id == "job" and "reserved namespace" in incident.cause
    _served(sec_stack)
    _assert_untouched(sec_stack, victim, revision)


def test_a_task_header_never_renames_the_task_and_reaches_the_job_as_data(
    sec_stack: Stack,
) -> None:
    victim, revision = _victim(sec_stack)
    headers = {"task": "dormant.cancel", "id": "forged", "eta": "2000-01-01T00:00:00", "x": "1"}
    sec_stack.client.deploy(job_model("attack-header", "sec-echo-headers", headers=headers))
    attacker = sec_stack.client.start("attack-header", {"instance_id": victim})
    view = sec_stack.wait_status(attacker, "completed")
    assert view.variables["seen_headers"] == headers
    _assert_untouched(sec_stack, victim, revision)


def test_an_unregistered_job_type_becomes_an_incident_after_its_retries(
    sec_stack: Stack,
) -> None:
    sec_stack.client.deploy(job_model("nobody-runs-it", "no-worker-has-this"))
    lost = sec_stack.client.start("nobody-runs-it")
    # The job timeout is 300 s: without the worker's report this would wait for it.
    view = sec_stack.wait_status(lost, "active_incidents", timeout=40)
    (incident,) = view.incidents
    assert incident.node_id == "job" and incident.job_type == "no-worker-has-this"
    assert "not registered" in incident.cause and "2 attempt" in incident.cause
    _served(sec_stack)


def test_dispatch_refuses_a_reserved_job_type_as_a_job_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An outbox row written before the deploy-time rule is refused by the shell too."""
    import dormant.tasks.job_dispatch as jobs

    sent: list[tuple[str, str, dict[str, object]]] = []
    monkeypatch.setattr(
        jobs, "publish", lambda name, key, kwargs, **_: sent.append((name, key, kwargs))
    )
    jobs.dispatch(
        DispatchJob(
            instance_id="i-1",
            wait_id="w1",
            node_id="job",
            job_type="dormant.cancel",
            attempt=1,
            variables={"instance_id": "victim"},
        )
    )
    ((name, key, kwargs),) = sent
    assert name == "dormant.apply_trigger" and key == "trigger.job_failed"
    trigger = kwargs["trigger_json"]
    assert isinstance(trigger, dict) and trigger["error_class"] == "ReservedJobType"
    assert kwargs["trigger_id"] == "i-1:w1:1:done"

"""No trigger is ever dropped (issue 8, items 3 and 7).

Every exception while applying a trigger ends as an incident on the instance (the
model's or its data's fault) or as a failed trigger an operator can list, retry and
drop; only a duplicate is acknowledged without effect. Each test drives the real
worker, checks that the victim is untouched or parked visibly, and that another
instance is served meanwhile.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import end, message_catch, model, script, start
from tests.security.kit import failed_for, overwrite_checkpoint, send_raw, stored_checkpoint

pytestmark = pytest.mark.integration


def waiting(key: str, name: str) -> str:
    """start → wait for message ``name`` (key ``=id``) → end."""
    nodes = start() + message_catch("mc", name) + end()
    return model(key, nodes, [("start", "mc"), ("mc", "end")], messages={name: "=id"})


def scripted(key: str, expression: str) -> str:
    nodes = start() + script("big", expression, "x") + end()
    return model(key, nodes, [("start", "big"), ("big", "end")])


def served_meanwhile(stack: Stack, key: str) -> None:
    """Another instance of a healthy process still runs to its end."""
    c = stack.client
    iid = c.start(key, {"id": key})
    wait_for(lambda: c.instance(iid).tokens, what="the healthy instance to wait")
    c.send_message(f"{key}-go", key)
    stack.wait_status(iid, "completed")


def test_a_result_too_large_to_store_is_an_incident_at_its_node(shared_stack: Stack) -> None:
    """``=10 ** 5000`` cannot be stored as a variable: an incident at the script task,
    never a trigger marked done with nothing to show for it."""
    stack, c = shared_stack, shared_stack.client
    c.deploy(scripted("nd-big", "=10 ** 5000"))
    c.deploy(waiting("nd-healthy1", "nd-healthy1-go"))
    iid = c.start("nd-big")
    view = stack.wait_status(iid, "active_incidents")
    [incident] = view.incidents
    assert incident.node_id == "big"
    assert incident.cause_class == "InvalidVariables"
    assert "4300 digits" in incident.cause and "'x'" in incident.cause
    served_meanwhile(stack, "nd-healthy1")


def test_a_start_that_fails_is_kept_and_an_operator_retries_it(shared_stack: Stack) -> None:
    """A plain-Celery start of a process nobody deployed yet: kept as a failed trigger
    (CLI and Client see it); after the deploy, `dormant triggers retry` starts it."""
    stack, c = shared_stack, shared_stack.client
    send_raw(
        stack,
        "dormant.start",
        "trigger.start",
        key="nd-late",
        instance_id="nd-late-1",
        variables={"id": "nd-late-1"},
    )
    [failed] = failed_for(stack, task="dormant.start", instance_id="nd-late-1")
    assert failed.error_class == "UnknownProcess"
    assert failed.body["kwargs"]["variables"] == {"id": "nd-late-1"}
    listed = stack.run_cli("triggers", "list", "--failed")
    assert listed.returncode == 0, listed.stderr
    assert failed.id in listed.stdout and "UnknownProcess" in listed.stdout
    c.deploy(waiting("nd-late", "nd-late-go"))
    retried = stack.run_cli("triggers", "retry", failed.id)
    assert retried.returncode == 0, retried.stderr
    wait_for(lambda: c.instance("nd-late-1").tokens, what="the retried start")
    assert [f for f in c.failed_triggers() if f.id == failed.id] == []
    c.send_message("nd-late-go", "nd-late-1")
    stack.wait_status("nd-late-1", "completed")


def test_a_trigger_refused_at_the_task_is_kept_with_its_whole_body_and_can_be_dropped(
    shared_stack: Stack,
) -> None:
    """A business key longer than its column and a NUL in a variable (PostgreSQL refuses
    both): the trigger is kept, body intact, then dropped by the operator — and the
    instance it named never appears half-made."""
    stack, c = shared_stack, shared_stack.client
    c.deploy(waiting("nd-refused", "nd-refused-go"))
    send_raw(
        stack,
        "dormant.start",
        "trigger.start",
        key="nd-refused",
        instance_id="nd-refused-1",
        variables={"id": "a\x00b", "deep": [[["ok"]]]},
        business_key="k" * 300,
    )
    [failed] = failed_for(stack, instance_id="nd-refused-1")
    assert failed.body["kwargs"]["variables"] == {"id": "a\x00b", "deep": [[["ok"]]]}
    assert failed.body["kwargs"]["business_key"] == "k" * 300
    assert failed.error_class in {"InvalidVariables", "InvalidField"}
    assert "\n" not in failed.error
    with pytest.raises(Exception, match="no instance"):
        c.instance("nd-refused-1")
    dropped = stack.run_cli("triggers", "drop", failed.id)
    assert dropped.returncode == 0, dropped.stderr
    assert [f for f in c.failed_triggers() if f.id == failed.id] == []
    gone = stack.run_cli("triggers", "drop", failed.id)
    assert gone.returncode == 2 and gone.stderr.count("\n") == 1, gone.stderr


def test_a_ttl_too_large_for_a_date_is_kept_not_lost(shared_stack: Stack) -> None:
    """``ttl=1e300`` overflows a datetime: the message is kept as a failed trigger."""
    stack = shared_stack
    send_raw(
        stack,
        "dormant.message",
        "message.nd-ttl",
        name="nd-ttl",
        correlation_key="k",
        variables={},
        message_id="nd-ttl-1",
        ttl=1e300,
    )
    [failed] = failed_for(stack, task="dormant.message")
    assert failed.body["kwargs"]["message_id"] == "nd-ttl-1"
    assert "ttl" in failed.error
    # An operator drops it from Celery (Flower, a script): the management task.
    send_raw(stack, "dormant.triggers.drop", "trigger.triggers_drop", failed_id=failed.id)
    wait_for(
        lambda: failed.id not in {f.id for f in stack.client.failed_triggers()},
        what="the Celery drop",
    )


document_classes = ("CorruptCheckpoint", "CheckpointTooNew")


@pytest.mark.parametrize(
    "document",
    [{"schema": 99, "instance_id": "x"}, {"not": "a checkpoint"}],
    ids=["newer-schema", "corrupt"],
)
def test_an_undecodable_checkpoint_is_an_incident_and_keeps_its_triggers(
    shared_stack: Stack, document: dict[str, object]
) -> None:
    """A checkpoint this dormant cannot read: `instances list` still works and shows the
    row flagged, the incident (its own class) is listed, the message is kept; once the
    row is readable again, a retry of the kept trigger continues the instance."""
    stack, c = shared_stack, shared_stack.client
    key = f"nd-cp-{document.get('schema', 'x')}"
    c.deploy(waiting(key, f"{key}-go"))
    c.deploy(waiting(f"{key}-ok", f"{key}-ok-go"))
    iid = c.start(key, {"id": key})
    wait_for(lambda: c.instance(iid).tokens, what="the instance to wait")
    original = stored_checkpoint(stack, iid)
    if isinstance(original, str):
        original = json.loads(original)
    overwrite_checkpoint(stack, iid, document)
    # Listing reads every row and never fails; the unreadable one is flagged at once.
    [flagged] = [v for v in c.instances() if v.id == iid]
    assert flagged.status == "flagged" and flagged.incidents[0].cause_class in document_classes

    c.send_message(f"{key}-go", key)
    [failed] = failed_for(stack, instance_id=iid)
    listed = stack.run_cli("instances", "list")
    assert listed.returncode == 0, listed.stderr
    [line] = [ln for ln in listed.stdout.splitlines() if ln.startswith(iid)]
    assert "flagged" in line
    expected = "CheckpointTooNew" if "schema" in document else "CorruptCheckpoint"
    assert failed.error_class == expected
    incidents = wait_for(lambda: c.incidents(iid), what="the checkpoint incident")
    assert [i.cause_class for i in incidents] == [expected]
    shown = stack.run_cli("instances", "show", iid)
    assert shown.returncode == 0 and expected in shown.stdout, shown.stderr
    assert c.instance(iid).status == "flagged"
    served_meanwhile(stack, f"{key}-ok")

    overwrite_checkpoint(stack, iid, original)
    c.retry_trigger(failed.id)
    stack.wait_status(iid, "completed")
    assert c.incidents(iid) == []
    assert c.failed_triggers(iid) == []


@pytest.mark.parametrize(
    "error",
    [MemoryError(), RecursionError("deep"), KeyError("bug"), OverflowError("date")],
    ids=lambda e: type(e).__name__,
)
def test_any_exception_class_in_an_apply_is_kept_not_acknowledged_away(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    """Whatever the apply raises, the task keeps the trigger (the embedded default, the
    trigger task run in this process with the Store failing on purpose)."""
    from dormant.persistence.settings import Settings
    from dormant.tasks import app as app_module
    from dormant.tasks import triggers

    for var in ("DORMANT_DATABASE_URL", "DORMANT_BROKER_URL"):
        monkeypatch.setenv(var, os.environ.get(var, ""))
    previous = app_module.settings
    app_module.configure(
        Settings.from_env(
            {},
            database_url=f"sqlite:///{tmp_path / 'db.sqlite3'}",
            broker_url=f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}",
        )
    )
    try:
        the_store = app_module.store()

        def failing(*args: Any, **kwargs: Any) -> Any:
            raise error

        monkeypatch.setattr(the_store, "apply", failing)
        triggers.cancel.apply(kwargs={"instance_id": "victim", "trigger_id": "t-1"})
        [failed] = the_store.failed.failed_triggers("victim")
        assert failed.error_class == type(error).__name__
        assert failed.task == "dormant.cancel" and failed.trigger_id == "t-1"
        assert failed.body["kwargs"] == {"instance_id": "victim", "trigger_id": "t-1"}
    finally:
        app_module.configure(previous)

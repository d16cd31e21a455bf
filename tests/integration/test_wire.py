"""The wire has one home (tasks/wire.py): every task dormant registers is in its table,
every body it builds is one its task accepts on a key a queue is bound to, the
persistence layer spells no task name, and the Client and the Router refuse a bad
message alike."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from dormant.engine_core.errors import DormantError
from dormant.engine_core.inputs import DEFAULT_LIMITS
from dormant.engine_core.triggers import Continue, MessageReceived
from dormant.persistence.routing import Router
from dormant.persistence.store import NewInstance, Store
from dormant.tasks import wire
from dormant.tasks.app import BINDING_KEYS, app
from dormant.tasks.client import Client
from dormant.tasks.wire import Send, redelivery
from tests.integration.test_store import msg_wait, proc

PERSISTENCE = Path(__file__).resolve().parents[2] / "persistence"


def _registered() -> dict[str, Any]:
    for module in app.conf.include:
        importlib.import_module(module)
    return {name: task for name, task in app.tasks.items() if name.startswith("dormant.")}


def test_every_registered_task_is_in_the_wire_table() -> None:
    assert set(_registered()) == wire.TASK_NAMES


def _bound(routing_key: str) -> bool:
    """Whether a topic binding of the ``dormant`` queue takes ``routing_key`` (AMQP
    topic matching: ``#`` is zero or more words)."""
    for key in BINDING_KEYS:
        pattern = re.escape(key).replace(r"\#", ".*").replace(r"\.\.\*", r"(\..*)?")
        if re.fullmatch(pattern, routing_key):
            return True
    return False


BODIES: list[Send] = [
    wire.start("p", "i-1", {}, business_key="b"),
    wire.start("p", "i-1", {}, trigger_id="t", parent={"instance_id": "x"}, version=2),
    wire.message("paid", "o-1", {}, "m-1", None),
    wire.signal("go", {}, "s-1"),
    wire.complete_task("t-1", {}),
    wire.assign_task("t-1", "ann", claim=True),
    wire.update_task("t-1", {"priority": 3}),
    wire.cancel("i-1", trigger_id="t"),
    *(wire.incident(op, "inc-1") for op in wire.INCIDENT_OPS),
    wire.suspend("i-1"),
    wire.resume("i-1"),
    wire.set_variables("i-1", {"variables": {}, "unset": [], "scope": "root"}),
    wire.migrate("i-1", 2, {}),
    wire.modify("i-1", ["a"], []),
    wire.batch_run("b-1"),
    wire.apply_trigger("i-1", Continue(), "outbox:1"),
]


@pytest.mark.parametrize("send", BODIES, ids=lambda s: f"{s.task}:{s.routing_key}")
def test_each_body_is_one_its_task_accepts_on_a_bound_key(send: Send) -> None:
    task = _registered()[send.task]
    assert send.task in wire.TRIGGERS
    assert _bound(send.routing_key), send.routing_key
    # Every argument the sender writes is a parameter of the task: a renamed parameter
    # on either side fails here, not on a worker.
    inspect.signature(task.run).bind(**send.kwargs)


def _task_names_spelled(path: Path) -> list[str]:
    """String constants of ``path`` (docstrings aside) that are a registered task name,
    or the front of one (an f-string's ``"dormant.incident."``)."""
    names = set(_registered())
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and any(
            node.value == n or (node.value.endswith(".") and n.startswith(node.value))
            for n in names
        )
    ]


def test_persistence_names_no_task() -> None:
    spelled = {
        str(path.relative_to(PERSISTENCE)): found
        for path in sorted(PERSISTENCE.rglob("*.py"))
        if (found := _task_names_spelled(path))
    }
    assert spelled == {}


def test_the_check_catches_a_spelled_task_name(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""dormant.start in prose is fine."""\nT = "dormant.start"\n')
    module.write_text(module.read_text() + 'U = f"dormant.incident.{op}"\n')
    assert _task_names_spelled(module) == ["dormant.start", "dormant.incident."]


BAD_MESSAGES: list[dict[str, Any]] = [
    {"name": "  "},
    {"name": "n" * (DEFAULT_LIMITS.max_name_length + 1)},
    {"name": "paid", "correlation_key": "a\x00b"},
    {"name": "paid", "variables": [1, 2]},
    {"name": "paid", "ttl": -1},
    {"name": "paid", "message_id": "m" * (DEFAULT_LIMITS.max_name_length + 1)},
]


def _refusal(call: Callable[[], Any]) -> tuple[type[BaseException], str]:
    with pytest.raises(DormantError) as caught:
        call()
    return caught.type, str(caught.value)


@pytest.mark.parametrize("bad", BAD_MESSAGES, ids=lambda b: ",".join(b))
def test_client_and_router_refuse_a_bad_message_alike(
    store: Store, db_url: str, now: datetime, bad: dict[str, Any]
) -> None:
    client = Client(db_url, "memory://")
    router = Router(store, redelivery)
    by_client = _refusal(lambda: client.send_message(**bad))
    by_router = _refusal(
        lambda: router.message(
            bad["name"],
            bad.get("correlation_key"),
            bad.get("variables"),
            message_id=bad.get("message_id"),
            ttl_seconds=bad.get("ttl"),
            now=now,
        )
    )
    assert by_client == by_router


def test_a_message_without_an_id_gets_the_one_default_format(store: Store, now: datetime) -> None:
    out = Router(store, redelivery).message(
        "nobody", None, {}, message_id=None, ttl_seconds=None, now=now
    )
    assert re.fullmatch(r"[0-9a-f]{32}", out.message_id)


def test_a_failed_delivery_is_kept_as_the_wires_apply_trigger(
    store: Store, now: datetime, fake_core: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.deployments.deploy(proc(), now)
    store.start(NewInstance("p", "i1", {"_arm": [msg_wait("w1", "paid", "o-1")]}), now=now)

    real_apply_found = store.apply_found

    def refuse(find: Callable[[Any], Any], *args: Any, **kwargs: Any) -> Any:
        def found_then_refused(conn: Any) -> Any:
            find(conn)  # the holder is looked up and locked, then its apply raises
            raise RuntimeError("refused")

        return real_apply_found(found_then_refused, *args, **kwargs)

    monkeypatch.setattr(store, "apply_found", refuse)
    out = Router(store, redelivery).message(
        "paid", "o-1", {"a": 1}, message_id="m-1", ttl_seconds=None, now=now
    )
    assert out.failed == ["i1"]
    [kept] = store.failed.failed_triggers("i1")
    sent = wire.apply_trigger(
        "i1", MessageReceived(wait_id="w1", name="paid", variables={"a": 1}), "m-1"
    )
    assert (kept.task, kept.routing_key, kept.trigger_id) == (sent.task, sent.routing_key, "m-1")
    assert kept.body["kwargs"]["trigger_json"]["wait_id"] == "w1"
    assert kept.body["kwargs"].keys() == sent.kwargs.keys()


def test_trigger_ids_the_shell_makes() -> None:
    # A redelivered outbox row or job result must carry the same id (a duplicate);
    # a heartbeat never does (each one is applied).
    assert wire.outbox_trigger_id(7) == wire.outbox_trigger_id("7") == "outbox:7"
    assert wire.job_result_id("i-1:w-1:2") == wire.job_result_id("i-1:w-1:2") == "i-1:w-1:2:done"
    assert wire.job_heartbeat_id("k") != wire.job_heartbeat_id("k")
    assert wire.job_heartbeat_id("k").startswith("k:heartbeat:")
    assert wire.takes_trigger_id(wire.START) and not wire.takes_trigger_id(wire.FIRE_DEADLINE)

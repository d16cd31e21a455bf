"""Shared pieces of the operations tests (tests/integration/test_operations*.py): a
PostgreSQL + Redis stack for a module, and the models they run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Stack, _urls
from tests.integration.waitkit import end, message_catch, model, timer_catch, user_task, xor

# A runner that died leaves its batch for this long before the sweep hands it on.
BATCH_CLAIM_SECONDS = "3"


@contextmanager
def pg_redis_stack(
    request: pytest.FixtureRequest, tmp: Path, *, processes: bool = True
) -> Iterator[Stack]:
    with _urls("pg_redis", tmp, request) as urls:
        stack = Stack(*urls, tmp)
        stack.env["DORMANT_BATCH_CLAIM_SECONDS"] = BATCH_CLAIM_SECONDS
        try:
            if processes:
                stack.worker_and_beat()
            yield stack
        finally:
            stack.close()


def gate(key: str) -> str:
    """start -> gateway ``gw`` (``=ok``, no default) -> end: ``ok`` unset is an incident."""
    return model(
        key, f'<bpmn:startEvent id="s"/>{xor("gw")}{end("e")}', [("s", "gw"), ("gw", "e", "=ok")]
    )


def three_waits(key: str, task: str = "review", pay: str = "wait_pay", timer: str = "PT1H") -> str:
    """A fork into a user task ``task``, a timer catch ``wait_timer`` (``timer``) then
    user task ``after_timer``, and a message catch ``pay`` (``paid`` keyed by
    ``orderId``) then user task ``after_msg``."""
    nodes = (
        '<bpmn:startEvent id="s"/><bpmn:parallelGateway id="fork"/>'
        + user_task(task)
        + timer_catch("wait_timer", timer)
        + message_catch(pay, "paid")
        + user_task("after_timer")
        + user_task("after_msg")
        + end("e1")
        + end("e2")
        + end("e3")
    )
    flows = [
        ("s", "fork"),
        ("fork", task),
        (task, "e1"),
        ("fork", "wait_timer"),
        ("wait_timer", "after_timer"),
        ("after_timer", "e2"),
        ("fork", pay),
        (pay, "after_msg"),
        ("after_msg", "e3"),
    ]
    return model(key, nodes, flows, messages={"paid": "=orderId"})


def token_nodes(view: Any) -> list[str]:
    return sorted(t.node_id for t in view.tokens)

"""Sweeps without head-of-line blocking (issue 24, row 2), on PostgreSQL + Redis with a
real worker and beat.

A trigger a plain Celery producer sent (routing key ``celery``, Celery's default queue)
and kept as failed can be sent again by ``dormant triggers retry``; a row a sweep cannot
process is parked on its own row with its error, and every later row still goes out.
"""

from __future__ import annotations

import pytest

from tests.integration.conftest import Stack, wait_for
from tests.integration.waitkit import end, message_catch, model, start
from tests.security.kit import failed_for
from tests.security.test_plain_celery import bare_send_task

pytestmark = [pytest.mark.faults, pytest.mark.integration]


def waiting(key: str, message: str) -> str:
    """start -> a message catch keyed by ``=id`` -> end."""
    nodes = start() + message_catch("wait", message) + end()
    return model(key, nodes, [("start", "wait"), ("wait", "end")], messages={message: "=id"})


def test_a_plain_celery_start_kept_as_failed_is_retried(fstack: Stack) -> None:
    """Routing key ``celery`` (undotted): the retry is published, not refused."""
    s = fstack
    s.worker()
    bare_send_task(
        s,
        "dormant.start",
        kwargs={"key": "pc-late", "instance_id": "pc-late-1", "variables": {"id": "pc-late-1"}},
    )
    [failed] = failed_for(s, task="dormant.start", instance_id="pc-late-1")
    assert failed.routing_key == "celery"
    s.client.deploy(waiting("pc-late", "pc-late-go"))
    retried = s.run_cli("triggers", "retry", failed.id)
    assert retried.returncode == 0, retried.stderr
    wait_for(lambda: s.client.instance("pc-late-1").tokens, what="the retried start")
    s.client.send_message("pc-late-go", "pc-late-1")
    s.wait_status("pc-late-1", "completed")

# mypy: disable-error-code="untyped-decorator"
"""Failed triggers, operated: send one again, or drop it (``dormant.triggers.*``).

The Client, the CLI and these Celery tasks (for Flower or a plain-Celery operator
script) share ``resend``: the kept trigger moves back into the inbox in one
transaction, then is published; if the publish is lost, the inbox sweep sends it.
A refused action (no such failed trigger) raises, so Flower shows the task FAILED.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from celery import Task

from dormant.engine_core.errors import DormantError, InvalidOperation
from dormant.persistence import audit, clock
from dormant.persistence.failed_triggers import one_line
from dormant.tasks import wire
from dormant.tasks.app import app, publish, store

__all__ = ["drop", "resend", "retry"]

log = logging.getLogger("dormant.triggers")


def resend(
    the_store: Any,
    failed_id: str,
    connection: Any = None,
    audited: Mapping[str, Any] | None = None,
) -> str:
    """Put failed trigger ``failed_id`` back in the inbox and publish it; its task name.
    ``audited``: the operator's command, recorded done with the move to the inbox."""
    task, routing_key, kwargs, inbox_id = the_store.failed.take_failed(
        failed_id, clock.now(), takes_trigger_id=wire.takes_trigger_id, audited=audited
    )
    try:
        publish(task, routing_key, {**kwargs, "inbox_id": inbox_id}, connection=connection)
    except Exception as exc:
        # The trigger is in the inbox already (one transaction, above): the inbox sweep
        # sends it once the broker takes it. The operator reads why in one line.
        raise InvalidOperation(
            f"failed trigger {failed_id} moved back to the inbox (row {inbox_id}) but not "
            f"published now ({one_line(exc)[:200]}); the inbox sweep sends it later"
        ) from exc
    log.info("failed trigger %s sent again as %s (inbox %s)", failed_id, task, inbox_id)
    return str(task)


@app.task(name=wire.TRIGGERS_RETRY, bind=True, throws=(DormantError,))
def retry(self: Task, failed_id: str) -> None:
    """Send failed trigger ``failed_id`` again (same trigger id: idempotent)."""
    owner = store().failed.failed_trigger(failed_id).instance_id
    cmd = audit.by_hand("trigger_retry", target=failed_id, instance_id=owner)
    resend(store(), failed_id, audited=cmd)


@app.task(name=wire.TRIGGERS_DROP, bind=True, throws=(DormantError,))
def drop(self: Task, failed_id: str) -> None:
    """Delete failed trigger ``failed_id`` for good; its instance's history records it."""
    cmd = audit.by_hand("trigger_drop", target=failed_id)
    view = store().failed.drop_failed(failed_id, clock.now(), cmd)
    log.info("failed trigger %s (%s) dropped", failed_id, view.task)

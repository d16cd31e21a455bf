"""Helpers for the hostile-input tests: a producer that has only Celery (so nothing of
the Client's own checking stands between it and the trigger tasks), and raw access to
an instance's stored checkpoint."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update

from dormant.persistence.tables import instances
from tests.integration.conftest import Stack, wait_for


def send_raw(stack: Stack, task: str, routing_key: str, **kwargs: Any) -> None:
    """Send ``task`` with these keyword arguments and nothing else: what a producer with
    only Celery sends (no Client, so none of its checks and no inbox row)."""
    from dormant.tasks.app import app, publish

    with app.connection_for_write(stack.broker_url) as conn:
        publish(task, routing_key, kwargs, connection=conn)


def stored_checkpoint(stack: Stack, instance_id: str) -> Any:
    with stack.client._store.engine.connect() as conn:
        return conn.execute(
            select(instances.c.checkpoint).where(instances.c.id == instance_id)
        ).scalar_one()


def overwrite_checkpoint(stack: Stack, instance_id: str, document: Any) -> None:
    with stack.client._store.engine.begin() as conn:
        conn.execute(
            update(instances).where(instances.c.id == instance_id).values(checkpoint=document)
        )


def failed_for(stack: Stack, *, instance_id: str | None = None, task: str | None = None) -> Any:
    """Wait until a failed trigger matching the filters is kept; return them all."""

    def check() -> Any:
        found = [
            f
            for f in stack.client.failed_triggers()
            if (instance_id is None or f.instance_id == instance_id)
            and (task is None or f.task == task)
        ]
        return found or None

    try:
        return wait_for(check, 30, what=f"a failed trigger ({instance_id}, {task})")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{stack.diagnostics(instance_id)}") from None

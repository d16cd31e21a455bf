"""Publish outbox rows: what a committed transaction asked the shell to send.

A row is published after the commit that wrote it, by the task that committed it, and
marked published; a publisher that died in between leaves the row for the beat sweep
(``dormant.relay_outbox``). So a row can be published twice, never zero times. That is
harmless because every trigger published here carries the row's trigger id (the Store
writes ``<instance>@<revision>.<index>`` into the payload; ``outbox:<id>`` for rows of
older versions), and the Store drops a trigger id it has already applied; jobs carry
their own idempotency key (``instance:wait:attempt``). Never the bare row id: SQLite
reuses the id of a deleted row.

Only routing lives here: which task, which routing key, which trigger. No BPMN.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from engine_core.triggers import (
    ChildCompleted,
    ChildFailed,
    Continue,
    MessageReceived,
    parse_trigger,
)
from tasks.app import publish, store

__all__ = ["HEADER_OUTBOX", "consumed", "publish_ids", "publish_row", "trigger_id_for"]

log = logging.getLogger("dormant.outbox")


def trigger_id_for(row_id: Any) -> str:
    """The trigger id of everything published for outbox row ``row_id``."""
    return f"outbox:{row_id}"


def _field(row: Any, name: str) -> Any:
    return row[name] if isinstance(row, dict) else getattr(row, name)


# The header a consumed follow-up is acknowledged by (see ``publish_row``).
HEADER_OUTBOX = "dormant_outbox"


def _apply_trigger(
    instance_id: str, trigger: Any, trigger_id: str, headers: dict[str, Any]
) -> None:
    publish(
        "dormant.apply_trigger",
        f"trigger.{trigger.kind}",
        {
            "instance_id": instance_id,
            "trigger_json": trigger.model_dump(mode="json"),
            "trigger_id": trigger_id,
        },
        headers=headers,
    )


def _dispatch_job(p: dict[str, Any], tid: str, headers: dict[str, Any]) -> None:
    from tasks.jobs import dispatch

    dispatch(p)


def _throw_message(p: dict[str, Any], tid: str, headers: dict[str, Any]) -> None:
    publish(
        "dormant.message",
        f"message.{p['name']}",
        {
            "name": p["name"],
            "correlation_key": p.get("correlation_key"),
            "variables": p.get("variables") or {},
            "message_id": p.get("message_id") or tid,
            "ttl": p.get("ttl_seconds"),
        },
        headers=headers,
    )


def _throw_signal(p: dict[str, Any], tid: str, headers: dict[str, Any]) -> None:
    publish(
        "dormant.signal",
        f"signal.{p['name']}",
        {
            "name": p["name"],
            "variables": p.get("variables") or {},
            "signal_id": p.get("signal_id") or tid,
        },
        headers=headers,
    )


def _start_child(p: dict[str, Any], tid: str, headers: dict[str, Any]) -> None:
    tagged = {"version_tag": p["version_tag"]} if p.get("version_tag") else {}
    publish(
        "dormant.start",
        "trigger.start",
        {
            **tagged,
            "key": p["process_key"],
            "instance_id": p["child_instance_id"],
            "variables": p.get("variables") or {},
            "parent": {
                "instance_id": p["parent_instance_id"],
                "wait_id": p["parent_wait_id"],
                "root_instance_id": p["root_instance_id"],
            },
            "trigger_id": tid,
        },
        headers=headers,
    )


def _cancel_child(p: dict[str, Any], tid: str, headers: dict[str, Any]) -> None:
    publish(
        "dormant.cancel",
        "trigger.cancel",
        {"instance_id": p["child_instance_id"], "trigger_id": tid},
        headers=headers,
    )


def _notify_parent(p: dict[str, Any], tid: str, headers: dict[str, Any]) -> None:
    trigger: Any
    if p.get("completed"):
        trigger = ChildCompleted(wait_id=p["wait_id"], variables=p.get("variables") or {})
    else:
        trigger = ChildFailed(
            wait_id=p["wait_id"],
            error=p.get("error") or "child instance failed",
            error_class=p.get("error_class") or "ChildFailed",
            error_code=p.get("error_code"),
        )
    _apply_trigger(p["parent_instance_id"], trigger, tid, headers)


def _continue_instance(p: dict[str, Any], tid: str, headers: dict[str, Any]) -> None:
    """A step stopped at its budget: the rest of its work is this follow-up trigger."""
    _apply_trigger(p["instance_id"], Continue(), tid, headers)


def _deliver_buffered(p: dict[str, Any], tid: str, headers: dict[str, Any]) -> None:
    """A buffered message consumed by a new subscription: the Store wrote the trigger."""
    if "trigger" in p:
        trigger: Any = parse_trigger(p["trigger"])
    else:
        trigger = MessageReceived(
            wait_id=p["wait_id"],
            name=p["name"],
            correlation_key=p.get("correlation_key"),
            variables=p.get("variables") or {},
            message_id=p.get("message_id"),
        )
    _apply_trigger(p["instance_id"], trigger, p.get("trigger_id") or tid, headers)


# outbox kind (the effect's class name) -> publisher
PUBLISHERS: dict[str, Callable[[dict[str, Any], str, dict[str, Any]], None]] = {
    "DispatchJob": _dispatch_job,
    "ThrowMessage": _throw_message,
    "ThrowSignal": _throw_signal,
    "StartChild": _start_child,
    "CancelChild": _cancel_child,
    "NotifyParent": _notify_parent,
    "ContinueInstance": _continue_instance,
    "DeliverBuffered": _deliver_buffered,
}


def publish_row(row: Any) -> None:
    """Publish one outbox row and mark it published (after, never before, the send).

    A job's row is deleted once published: a job the broker loses is dispatched again
    by its timeout in the engine. Every other row (a follow-up trigger) is kept, stamped
    published, until its consumer acknowledges it (``consumed``); the sweep publishes
    it again if the broker lost it, so no follow-up is lost with a broker's memory.
    """
    row_id, kind, payload = _field(row, "id"), _field(row, "kind"), _field(row, "payload")
    publisher = PUBLISHERS.get(kind)
    if publisher is None:
        # A newer dormant wrote a kind this one does not know: leave it for that one.
        log.error("outbox row %s has unknown kind %r; left unpublished", row_id, kind)
        return
    tid = payload.get("trigger_id") or trigger_id_for(row_id)
    follow_up = kind != "DispatchJob"
    headers = {HEADER_OUTBOX: {"id": row_id, "trigger_id": tid}} if follow_up else {}
    publisher(dict(payload), tid, headers)
    store().mark_published(row_id, until_consumed=follow_up)


def consumed(request: Any) -> None:
    """The task behind ``request`` applied its follow-up: acknowledge the outbox row."""
    marker = getattr(request, HEADER_OUTBOX, None)
    if marker is None:
        marker = (getattr(request, "headers", None) or {}).get(HEADER_OUTBOX)
    if not isinstance(marker, dict) or "id" not in marker:
        return
    try:
        store().consume_outbox(int(marker["id"]), str(marker.get("trigger_id")))
    except Exception:  # left in place, the row is published again: harmless, idempotent
        log.exception("outbox row %s not acknowledged", marker.get("id"))


def publish_ids(ids: Iterable[Any]) -> int:
    """Publish the outbox rows a transaction just returned; the sweep covers failures."""
    ids = list(ids)
    if not ids:
        return 0
    count = 0
    for row in store().outbox_rows(ids):
        try:
            publish_row(row)
            count += 1
        except Exception:  # the broker is down: the sweep publishes it later
            log.exception(
                "outbox row %s not published now; the sweep will retry", _field(row, "id")
            )
    return count

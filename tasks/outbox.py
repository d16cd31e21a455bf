"""Publish outbox rows: what a committed transaction asked the shell to send.

A row is published after the commit that wrote it, by the task that committed it, and
marked published; a publisher that died in between leaves the row for the beat sweep
(``dormant.relay_outbox``). So a row can be published twice, never zero times. A job's
row is deleted once published, on PostgreSQL by this process's next write transaction
(one more CTE of its write statement) or within half a second by a timer
(``store.outbox.job_published``): a process that dies in that window leaves the row for the
sweep, which sends the job once more. That is
harmless because every trigger published here carries the row's trigger id (the Store
writes ``<instance>@<revision>.<index>`` into the payload; ``outbox:<id>`` for rows of
older versions), and the Store drops a trigger id it has already applied; jobs carry
their own idempotency key (``instance:wait:attempt``). Never the bare row id: SQLite
reuses the id of a deleted row.

Only routing lives here: which task, which routing key, which trigger, by the type of
the effect the row holds (``engine_core.effects.parse_effect``). No BPMN: even the
trigger a child's end sends its parent is the core's (``calls.parent_trigger``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from celery.signals import worker_process_shutdown

from dormant.engine_core.calls import parent_trigger
from dormant.engine_core.effects import (
    CancelChild,
    ContinueInstance,
    DeliverBuffered,
    DispatchJob,
    NotifyParent,
    StartChild,
    ThrowMessage,
    ThrowSignal,
    parse_effect,
)
from dormant.engine_core.errors import StoredDataError, UnknownEffect
from dormant.engine_core.tenants import DEFAULT_TENANT
from dormant.engine_core.triggers import Continue, Trigger
from dormant.persistence import clock, job_pause
from dormant.persistence.published_jobs import flush_every
from dormant.tasks import app as app_module
from dormant.tasks import wire
from dormant.tasks.app import after_publishing, publish, store
from dormant.tasks.job_dispatch import dispatch, runs_here

__all__ = [
    "HEADER_OUTBOX",
    "consumed",
    "follow_up_marker",
    "publish_ids",
    "publish_keeping_a_job",
    "publish_row",
    "publish_rows",
]

log = logging.getLogger("dormant.outbox")


def _field(row: Any, name: str) -> Any:
    return row[name] if isinstance(row, dict) else getattr(row, name)


# The header a consumed follow-up is acknowledged by (see ``publish_row``).
HEADER_OUTBOX = "dormant_outbox"


def _apply_trigger(
    instance_id: str, trigger: Trigger, trigger_id: str, headers: dict[str, Any]
) -> None:
    publish(*wire.apply_trigger(instance_id, trigger, trigger_id), headers=headers)


# Each publisher takes the effect, its trigger id, the follow-up's headers and the
# tenant of the instance that wrote it (the row's envelope, docs/tenants.md).


def _dispatch_job(job: DispatchJob, tid: str, headers: dict[str, Any], tenant: str) -> None:
    dispatch(job, tenant)


def _throw_message(m: ThrowMessage, tid: str, headers: dict[str, Any], tenant: str) -> None:
    message = wire.message(
        m.name, m.correlation_key, m.variables, m.message_id or tid, m.ttl_seconds, tenant
    )
    publish(*message, headers=headers)


def _throw_signal(s: ThrowSignal, tid: str, headers: dict[str, Any], tenant: str) -> None:
    publish(*wire.signal(s.name, s.variables, s.signal_id or tid, tenant), headers=headers)


def _start_child(c: StartChild, tid: str, headers: dict[str, Any], tenant: str) -> None:
    """The child starts in its parent's tenant: named here, so the start needs no read
    of its parent to know it (persistence/store.py ``_start_tenant``)."""
    # The version the call activity bound (or, from a step lent no catalog, the tag).
    tagged: dict[str, Any] = {"version_tag": c.version_tag} if c.version_tag else {}
    if c.version is not None:
        tagged["version"] = c.version
    parent = {
        "instance_id": c.parent_instance_id,
        "wait_id": c.parent_wait_id,
        "root_instance_id": c.root_instance_id,
    }
    start = wire.start(
        c.process_key,
        c.child_instance_id,
        c.variables,
        trigger_id=tid,
        parent=parent,
        **tagged,
        tenant=tenant,
    )
    publish(*start, headers=headers)


def _cancel_child(c: CancelChild, tid: str, headers: dict[str, Any], tenant: str) -> None:
    publish(*wire.cancel(c.child_instance_id, trigger_id=tid), headers=headers)


def _notify_parent(n: NotifyParent, tid: str, headers: dict[str, Any], tenant: str) -> None:
    _apply_trigger(n.parent_instance_id, parent_trigger(n), tid, headers)


def _continue_instance(d: ContinueInstance, tid: str, headers: dict[str, Any], tenant: str) -> None:
    """A step stopped at its budget: the rest of its work is this follow-up trigger."""
    _apply_trigger(d.instance_id, Continue(), tid, headers)


def _deliver_buffered(d: DeliverBuffered, tid: str, headers: dict[str, Any], tenant: str) -> None:
    """A buffered message consumed by a new subscription: the Store wrote the trigger."""
    _apply_trigger(d.instance_id, d.trigger, tid, headers)


# the effect's type -> its publisher
PUBLISHERS: dict[type, Callable[[Any, str, dict[str, Any], str], None]] = {
    DispatchJob: _dispatch_job,
    ThrowMessage: _throw_message,
    ThrowSignal: _throw_signal,
    StartChild: _start_child,
    CancelChild: _cancel_child,
    NotifyParent: _notify_parent,
    ContinueInstance: _continue_instance,
    DeliverBuffered: _deliver_buffered,
}


def publish_row(row: Any) -> None:
    """Publish one outbox row and mark it published (after, never before, the send).

    A job's row is deleted once published (``store.outbox.job_published``: on PostgreSQL by
    this process's next write transaction, or a timer, not a transaction of its own):
    a job the broker loses is dispatched again by its timeout in the engine. Every
    other row (a follow-up trigger) is kept, stamped published, until its consumer
    acknowledges it (``consumed``); the sweep publishes it again if the broker lost it,
    so no follow-up is lost with a broker's memory.
    """
    row_id, kind, payload = _field(row, "id"), _field(row, "kind"), _field(row, "payload")
    try:
        effect = parse_effect(kind, payload)
    except UnknownEffect as exc:
        # A newer dormant wrote a kind this one does not know: leave it for that one.
        # Anything else that raises here (a payload that is not its type's) raises on:
        # the sweep parks the row with its error (tasks/sweeps.py).
        log.error("outbox row %s left unpublished: %s", row_id, exc)
        return
    if isinstance(effect, DispatchJob) and _held_by_a_pause(int(row_id), effect.job_type):
        return
    claimed = isinstance(effect, DispatchJob) and _sweeps_age(row)
    if claimed and not store().outbox.claim_job(int(row_id)):
        return  # another publisher took it: the job goes once
    follow_up = not isinstance(effect, DispatchJob)
    tid = payload.get("trigger_id") or wire.outbox_trigger_id(row_id)
    headers = {HEADER_OUTBOX: {"id": row_id, "trigger_id": tid}} if follow_up else {}
    tenant = str(payload.get("tenant") or DEFAULT_TENANT)
    PUBLISHERS[type(effect)](effect, tid, headers, tenant)
    if follow_up:
        store().outbox.mark_published(row_id, until_consumed=True)
    elif not claimed:  # once sent: a batch's jobs go out together (tasks/app.py)
        after_publishing(lambda: store().outbox.job_published(int(row_id)))


def _sweeps_age(row: Any) -> bool:
    """Is the row old enough that the sweep may publish it too (half its age, for a
    clock read a moment apart)? A job's row is deleted after its publish, and not at
    once (``job_published``): for a row written late in a slow transaction, or one the
    sweep itself publishes, the sweep's next tick could still see it and send the job
    again. Such a row is taken first instead (``claim_job``): whoever deletes it sends
    it."""
    created = row.get("created_at") if isinstance(row, dict) else getattr(row, "created_at", None)
    if not isinstance(created, datetime):
        return True
    age = (clock.now() - created).total_seconds()
    return age >= app_module.settings.outbox_sweep_after_seconds / 2


def _held_by_a_pause(row_id: int, job_type: str) -> bool:
    """A job of a paused type is held, not sent (persistence/job_pause.py)."""
    engine = store().engine
    if not job_pause.is_paused(engine, job_type):
        return False
    outcome = job_pause.hold(engine, row_id, job_type, clock.now())
    if outcome != "not paused":
        log.info("job of paused type %s held (outbox row %s: %s)", job_type, row_id, outcome)
    return outcome != "not paused"


def publish_keeping_a_job(rows: Iterable[Any]) -> DispatchJob | None:
    """Publish what a trigger committed, except the first job this process may run
    itself (``runs_here``): that job's row counts as published (``store.outbox.job_published``:
    deleted with the next write) and the job is returned for the trigger task to run
    once its own bookkeeping is done (``tasks.job_dispatch.run_here``)."""
    kept: DispatchJob | None = None
    rest: list[Any] = []
    for row in rows:
        # Another tenant's job goes to its tenant's queue, never run here.
        if (
            kept is None
            and _field(row, "kind") == DispatchJob.__name__
            and "tenant" not in _field(row, "payload")
        ):
            try:
                job = parse_effect(DispatchJob.__name__, _field(row, "payload"))
            except StoredDataError:  # publish_row logs it and leaves the row
                job = None
            if isinstance(job, DispatchJob) and runs_here(job.job_type):
                row_id = int(_field(row, "id"))
                if not _held_by_a_pause(row_id, job.job_type):
                    store().outbox.job_published(row_id)
                    kept = job
                continue
        rest.append(row)
    publish_rows(rest)
    return kept


def follow_up_marker(request: Any) -> Any:
    """The outbox row a follow-up's task carries in its headers (``publish_row``), or
    None: Celery puts a custom header on the request itself, or under ``headers``."""
    marker = getattr(request, HEADER_OUTBOX, None)
    if marker is None:
        marker = (getattr(request, "headers", None) or {}).get(HEADER_OUTBOX)
    return marker


def consumed(request: Any) -> None:
    """The task behind ``request`` applied its follow-up: acknowledge the outbox row."""
    marker = follow_up_marker(request)
    if not isinstance(marker, dict) or "id" not in marker:
        return
    try:
        store().outbox.consume_outbox(int(marker["id"]), str(marker.get("trigger_id")))
    except Exception:  # left in place, the row is published again: harmless, idempotent
        log.exception("outbox row %s not acknowledged", marker.get("id"))


def publish_ids(ids: Iterable[Any]) -> int:
    """Publish outbox rows known only by id (read back first)."""
    ids = list(ids)
    return publish_rows(store().outbox.outbox_rows(ids)) if ids else 0


def publish_rows(rows: Iterable[Any]) -> int:
    """Publish the outbox rows a transaction just wrote, as it returned them (no read
    back); the sweep covers a failure."""
    count = 0
    for row in rows:
        try:
            publish_row(row)
            count += 1
        except Exception:  # the broker is down: the sweep publishes it later
            log.exception(
                "outbox row %s not published now; the sweep will retry", _field(row, "id")
            )
    return count


@worker_process_shutdown.connect(weak=False)  # type: ignore[untyped-decorator]
def _delete_published_jobs(**_: Any) -> None:
    """A pool process ends with ``os._exit`` (no ``atexit``): delete the published job
    rows no write carried yet, or the sweep would send those jobs again."""
    flush_every()

"""Failed triggers: a trigger that could not be applied is kept, never acknowledged away.

A trigger whose apply raised (an undecodable checkpoint, a database refusal, a bug, a
field refused at the task) is written here by the task that failed it, in a
transaction of its own after the apply rolled back, with everything needed to send it
again: the task, the routing key, the whole body and its trigger id. An operator
lists them (`dormant triggers list --failed`), retries one (moved back to the inbox in
one transaction, so a retry is as durable as a first send, and the same trigger id
keeps it idempotent) or drops one (a ``TriggerDropped`` fact records it).

Why the body is TEXT holding JSON written by our own encoder: the trigger may have
failed precisely because the database refuses its content (a NUL, a lone surrogate,
nesting deeper than the JSON encoder recurses, an integer too long to print), and the
record of the failure must not fail the same way.

The row id is derived from (task, instance, trigger id): the same trigger failing
again updates its row (``attempts`` + 1), it never piles up copies.

A failed trigger **flags** its instance only while it is not overtaken (``overtaken``):
once the instance has moved on — a later trigger applied to it after this one was kept
(its ``updated_at``, written by every applied step, is past the failure's ``last_at``),
or a delivery of this very trigger id applied after all (its id is among the processed
ones, persistence/processed.py) — the failure no longer describes the instance's state.
It stays listed, marked overtaken, for an operator to drop or retry (a retry of one that
applied is a duplicate); only the flag goes (issue 24: "a failed trigger whose instance
moved on or whose retry succeeded no longer flags the instance").

Undecodable checkpoints have their own incident class here as well (``flag_checkpoint``):
the instance's status becomes ``flagged``, and an incident row of class
``CorruptCheckpoint`` or ``CheckpointTooNew`` makes it visible in `incidents list`.
The first trigger that applies cleanly (the row repaired, or dormant upgraded) clears
both (``Store._apply``).
"""

from __future__ import annotations

import inspect
import json
import sys
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, delete, exists, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from dormant.engine_core.checkpoint import IncidentState
from dormant.engine_core.errors import InvalidOperation, UnknownFailedTrigger
from dormant.engine_core.states import FLAGGED
from dormant.engine_core.tenants import DEFAULT_TENANT
from dormant.engine_core.views import FailedTriggerView
from dormant.persistence import audit, deliveries
from dormant.persistence.db import Transactions
from dormant.persistence.tables import (
    facts,
    failed_triggers,
    inbox,
    incidents,
    instances,
    processed_triggers,
)

__all__ = [
    "CHECKPOINT_INCIDENT",
    "FLAGGED",
    "FailedTriggers",
    "decode_body",
    "encode_body",
    "flagging_counts",
    "one_line",
    "overtaken",
]

# The node id, and the id suffix, of an undecodable checkpoint's incident.
CHECKPOINT_INCIDENT = "checkpoint"

_NAMESPACE = uuid.UUID("2b0d4f7e-6a55-4f43-9a1e-7c3f1b2e9d10")


class _Raw(str):
    """Already-encoded JSON text on the encoder's stack."""


def encode_body(value: Any) -> str:
    """JSON text of ``value``, whatever it holds: never raises for a trigger body."""
    try:
        return json.dumps(value, ensure_ascii=True, default=repr)
    except (ValueError, RecursionError):
        return _encode_iteratively(value)


def _encode_iteratively(value: Any) -> str:
    """The same text as ``json.dumps``, without recursion and without the integer
    digit limit, for what the standard encoder refuses."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item)
        elif isinstance(item, dict):
            stack.append(_Raw("}"))
            for i, (key, inner) in reversed(list(enumerate(item.items()))):
                stack.append(inner)
                stack.append(_Raw(("," if i else "") + json.dumps(str(key)) + ":"))
            out.append("{")
        elif isinstance(item, list | tuple):
            stack.append(_Raw("]"))
            for i, inner in reversed(list(enumerate(item))):
                stack.append(inner)
                if i:
                    stack.append(_Raw(","))
            out.append("[")
        elif isinstance(item, int) and not isinstance(item, bool):
            out.append(_int_text(item))
        else:
            out.append(json.dumps(item, ensure_ascii=True, default=repr))
    return "".join(out)


def _int_text(value: int) -> str:
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return str(value)
    finally:
        sys.set_int_max_str_digits(limit)


def decode_body(text: str) -> dict[str, Any]:
    """The body for a view; one JSON cannot read back (too deep) is shown as text."""
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        return {"text": text[:10_000]}
    return body if isinstance(body, dict) else {"value": body}


def _body_tenant(body: Mapping[str, Any]) -> str:
    """The tenant a kept trigger's body names (tasks/wire.py leaves the default out)."""
    kwargs = body.get("kwargs")
    named = kwargs.get("tenant") if isinstance(kwargs, dict) else None
    return named if isinstance(named, str) and named else DEFAULT_TENANT


def one_line(exc: BaseException) -> str:
    """``Class: message`` on one line, short enough for a table cell."""
    text = " ".join(str(exc).split()) or "(no message)"
    return f"{type(exc).__name__}: {text}"[:2000]


def call_kwargs(run: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A task's positional arguments as keywords, so a retry can send them by name."""
    if not args:
        return dict(kwargs)
    try:
        return dict(inspect.signature(run).bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return {**kwargs, "args": list(args)}


def overtaken() -> ColumnElement[bool]:
    """True for a failed trigger row whose instance moved on after it was kept, or whose
    trigger id was applied after all (module docstring): it no longer flags."""
    ft = failed_triggers
    return or_(
        exists().where(
            processed_triggers.c.instance_id == ft.c.instance_id,
            processed_triggers.c.trigger_id == ft.c.trigger_id,
        ),
        exists().where(instances.c.id == ft.c.instance_id, instances.c.updated_at > ft.c.last_at),
    )


def flagging_counts(conn: Connection, instance_ids: list[str]) -> dict[str, int]:
    """Per instance, its failed triggers that flag it (not overtaken); absent: none."""
    if not instance_ids:
        return {}
    rows = conn.execute(
        select(failed_triggers.c.instance_id, func.count())
        .where(failed_triggers.c.instance_id.in_(instance_ids), ~overtaken())
        .group_by(failed_triggers.c.instance_id)
    ).all()
    return {str(r[0]): int(r[1]) for r in rows}


def _view(row: Any) -> FailedTriggerView:
    return FailedTriggerView(
        id=row.id,
        task=row.task,
        routing_key=row.routing_key,
        instance_id=row.instance_id,
        trigger_id=row.trigger_id,
        error_class=row.error_class,
        error=row.error,
        attempts=int(row.attempts),
        first_at=row.first_at,
        last_at=row.last_at,
        body=decode_body(row.body),
        overtaken=bool(row.overtaken),
    )


class FailedTriggers:
    """Triggers kept for an operator, and instances flagged for a checkpoint this
    dormant cannot read (``store.failed``)."""

    def __init__(self, db: Transactions) -> None:
        self._db = db

    def keep_failed(
        self,
        task: str,
        routing_key: str,
        kwargs: dict[str, Any],
        error: BaseException,
        now: datetime,
        *,
        trigger_id: str | None = None,
        instance_id: str | None = None,
    ) -> str:
        """Keep one trigger that could not be applied; returns the failed trigger's id.

        Its own transaction: the apply's has rolled back. A trigger retried from here
        carries its earlier attempts in its inbox row, so they keep counting.
        """
        row_id = uuid.uuid5(_NAMESPACE, f"{task}|{instance_id or ''}|{trigger_id or ''}").hex
        values = {
            "task": task,
            "routing_key": routing_key,
            "instance_id": instance_id,
            "trigger_id": trigger_id,
            "body": encode_body({"kwargs": kwargs}),
            "error_class": type(error).__name__,
            "error": one_line(error),
            "last_at": now,
        }
        for _ in range(3):
            try:
                with self._db.transaction() as conn:
                    found = conn.execute(
                        select(failed_triggers.c.attempts).where(failed_triggers.c.id == row_id)
                    ).first()
                    if found is not None:
                        conn.execute(
                            update(failed_triggers)
                            .where(failed_triggers.c.id == row_id)
                            .values({**values, "attempts": failed_triggers.c.attempts + 1})
                        )
                    else:
                        earlier, first_at = self._earlier_attempts(conn, kwargs.get("inbox_id"))
                        conn.execute(
                            insert(failed_triggers).values(
                                {
                                    **values,
                                    "id": row_id,
                                    "attempts": earlier + 1,
                                    "first_at": first_at or now,
                                }
                            )
                        )
                return row_id
            except IntegrityError:  # the same trigger failed at once elsewhere: update it
                continue
        return row_id

    @staticmethod
    def _earlier_attempts(conn: Connection, inbox_id: Any) -> tuple[int, datetime | None]:
        if not isinstance(inbox_id, str):
            return 0, None
        payload = conn.execute(select(inbox.c.payload).where(inbox.c.id == inbox_id)).scalar()
        failed = (payload or {}).get("failed") if isinstance(payload, dict) else None
        if not isinstance(failed, dict):
            return 0, None
        first = failed.get("first_at")
        return int(failed.get("attempts") or 0), (
            datetime.fromisoformat(first) if isinstance(first, str) else None
        )

    def failed_triggers(
        self, instance_id: str | None = None, limit: int = 1000, *, tenant: str | None = None
    ) -> list[FailedTriggerView]:
        """Kept triggers, the most recently failed last; ``tenant``: only that tenant's
        (its instance's tenant, or for a trigger whose instance has no row yet, such as
        a start that never applied, the tenant its body names; docs/tenants.md)."""
        owner = instances.alias("owner")  # apart from ``overtaken``'s own look
        q = select(failed_triggers, overtaken().label("overtaken"), owner.c.tenant_id).outerjoin(
            owner, owner.c.id == failed_triggers.c.instance_id
        )
        if instance_id is not None:
            q = q.where(failed_triggers.c.instance_id == instance_id)
        if tenant is not None:
            q = q.where(or_(owner.c.tenant_id == tenant, owner.c.tenant_id.is_(None)))
        with self._db.read() as conn:
            rows = list(conn.execute(q.order_by(failed_triggers.c.last_at).limit(limit)))
        views = [_view(r) for r in rows]
        if tenant is None:
            return views
        return [
            v
            for v, r in zip(views, rows, strict=True)
            if (r.tenant_id or _body_tenant(v.body)) == tenant
        ]

    def failed_trigger(self, failed_id: str) -> FailedTriggerView:
        with self._db.read() as conn:
            row = conn.execute(
                select(failed_triggers, overtaken().label("overtaken")).where(
                    failed_triggers.c.id == failed_id
                )
            ).first()
        if row is None:
            raise UnknownFailedTrigger(
                f"no failed trigger {failed_id!r}; list them with `dormant triggers list --failed`"
            )
        return _view(row)

    def take_failed(
        self,
        failed_id: str,
        now: datetime,
        *,
        takes_trigger_id: Callable[[str], bool],
        audited: Mapping[str, Any] | None = None,
    ) -> tuple[str, str, dict[str, Any], str]:
        """Move a kept trigger back into the inbox (one transaction) for a retry:
        returns (task, routing key, kwargs, inbox id) for the caller to publish. Its
        trigger id travels with it, so the retry is idempotent like the first send;
        ``takes_trigger_id``: whether the kept task accepts one (the shell's wire
        module knows, tasks/wire.py). ``audited``: the operator's command, its ``done``
        row in the same transaction."""
        view = self.failed_trigger(failed_id)
        kwargs = dict(view.body.get("kwargs") or {})
        if "text" in view.body:
            raise InvalidOperation(
                f"failed trigger {failed_id} cannot be sent again as it is (its body is not "
                "JSON any worker can read); drop it with `dormant triggers drop`"
            )
        kwargs.pop("inbox_id", None)
        if view.trigger_id and "trigger_id" not in kwargs and takes_trigger_id(view.task):
            kwargs["trigger_id"] = view.trigger_id
        inbox_id = uuid.uuid4().hex
        payload = {
            "routing_key": view.routing_key,
            "kwargs": kwargs,
            "failed": {"attempts": view.attempts, "first_at": view.first_at.isoformat()},
        }
        try:
            with self._db.transaction() as conn:
                gone = conn.execute(
                    delete(failed_triggers).where(failed_triggers.c.id == failed_id)
                ).rowcount
                if not gone:
                    raise UnknownFailedTrigger(f"failed trigger {failed_id!r} was taken meanwhile")
                conn.execute(
                    insert(inbox).values(
                        id=inbox_id, kind=view.task, payload=payload, created_at=now
                    )
                )
                if view.trigger_id:  # its deliveries counted from zero again
                    deliveries.forget(conn, view.trigger_id)
                if audited is not None:
                    row = audit.done_row(audited, now, instance_id=view.instance_id)
                    audit.record(conn, [row])
        except SQLAlchemyError as exc:
            raise InvalidOperation(
                f"failed trigger {failed_id} cannot be sent again as it is "
                f"({one_line(exc)[:200]}); drop it with `dormant triggers drop`"
            ) from exc
        return view.task, view.routing_key, kwargs, inbox_id

    def drop_failed(
        self, failed_id: str, now: datetime, audited: Mapping[str, Any] | None = None
    ) -> FailedTriggerView:
        """Delete a kept trigger for good; its instance's history records the drop, and
        the audit trail ``audited``'s ``done`` row (persistence/audit.py), in the same
        commit."""
        view = self.failed_trigger(failed_id)
        with self._db.transaction() as conn:
            conn.execute(delete(failed_triggers).where(failed_triggers.c.id == failed_id))
            if audited is not None:
                audit.record(conn, [audit.done_row(audited, now, instance_id=view.instance_id)])
            if view.instance_id is not None:
                rev = conn.execute(
                    select(instances.c.revision).where(instances.c.id == view.instance_id)
                ).scalar()
                if rev is not None:
                    conn.execute(
                        insert(facts).values(
                            instance_id=view.instance_id,
                            revision=rev,
                            at=now,
                            kind="TriggerDropped",
                            details={"task": view.task, "error_class": view.error_class},
                        )
                    )
        return view

    def flag_checkpoint(self, instance_id: str, error: BaseException, now: datetime) -> None:
        """An undecodable checkpoint: the instance is ``flagged`` and an incident of the
        error's own class opens (or counts one more attempt). Its own transaction."""
        incident_id = f"{instance_id}.{CHECKPOINT_INCIDENT}"
        with self._db.transaction() as conn:
            key = conn.execute(
                select(instances.c.key).where(instances.c.id == instance_id)
            ).scalar()
            if key is None:
                return
            conn.execute(
                update(instances).where(instances.c.id == instance_id).values(status=FLAGGED)
            )
            bumped = conn.execute(
                update(incidents)
                .where(incidents.c.id == incident_id)
                .values(
                    attempts=incidents.c.attempts + 1,
                    last_at=now,
                    cause_class=type(error).__name__,
                    state=IncidentState.OPEN.value,
                )
            ).rowcount
            if not bumped:
                conn.execute(
                    insert(incidents).values(
                        id=incident_id,
                        instance_id=instance_id,
                        process_key=key,
                        node_id=CHECKPOINT_INCIDENT,
                        state=IncidentState.OPEN.value,
                        cause_class=type(error).__name__,
                        attempts=1,
                        first_at=now,
                        last_at=now,
                    )
                )

    @staticmethod
    def unflag_in(conn: Connection, instance_id: str, status: str) -> None:
        """The checkpoint reads again: close its incident, give the status back."""
        conn.execute(
            delete(incidents).where(incidents.c.id == f"{instance_id}.{CHECKPOINT_INCIDENT}")
        )
        conn.execute(update(instances).where(instances.c.id == instance_id).values(status=status))

"""Read-only projections for the Client, the CLI and the tests.

Views are built from the checkpoint by ``engine_core.views`` (the core decides what an
instance looks like); this module only fetches rows, in DEFERRED read transactions
that never take SQLite's write lock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, select

from dormant.engine_core.checkpoint import Checkpoint, IncidentState
from dormant.engine_core.errors import (
    CheckpointTooNew,
    CorruptCheckpoint,
    InvalidOperation,
    UnknownIncident,
    UnknownInstance,
    UnknownTask,
)
from dormant.engine_core.views import (
    FactView,
    IncidentView,
    InstanceView,
    UserTaskView,
    instance_view,
)
from dormant.persistence.db import Transactions, read_only
from dormant.persistence.fact_rows import fact_views
from dormant.persistence.failed_triggers import CHECKPOINT_INCIDENT, FLAGGED, flagging_counts
from dormant.persistence.instance_rows import checkpoint_of
from dormant.persistence.tables import (
    deadlines,
    definitions,
    facts,
    failed_triggers,
    inbox,
    instances,
    messages,
    outbox,
    processed_triggers,
    subscriptions,
    user_task_candidates,
    user_tasks,
)
from dormant.persistence.tables import incidents as incident_table

INCIDENT_STATES = tuple(state.value for state in IncidentState)

__all__ = ["INCIDENT_STATES", "EngineQueries", "Queries"]

_COUNTED = {
    "definitions": definitions,
    "instances": instances,
    "deadlines": deadlines,
    "subscriptions": subscriptions,
    "user_tasks": user_tasks,
    "facts": facts,
    "outbox": outbox,
    "processed_triggers": processed_triggers,
    "messages": messages,
    "inbox": inbox,
    "incidents": incident_table,
    "failed_triggers": failed_triggers,
}

# What a listing needs of an instance row when its checkpoint cannot be read.
_ROW = (
    instances.c.id,
    instances.c.key,
    instances.c.version,
    instances.c.business_key,
    instances.c.revision,
    instances.c.created_at,
    instances.c.updated_at,
    instances.c.parent_id,
    instances.c.checkpoint,
    instances.c.tenant_id,
)


class Queries:
    """What the operator and the Client read (``store.queries``): views of instances,
    tasks, incidents and history. Reads only, each on the Store's ``read`` (or, for the
    CLI's lists, on an engine alone: ``EngineQueries``)."""

    def __init__(self, db: Transactions) -> None:
        self._db = db

    def checkpoint(self, instance_id: str) -> Checkpoint:
        with self._db.read() as conn:
            row = conn.execute(
                select(instances.c.id, instances.c.key, instances.c.checkpoint).where(
                    instances.c.id == instance_id
                )
            ).first()
        if row is None:
            raise UnknownInstance(f"no instance has id {instance_id!r}")
        return checkpoint_of(row)

    def instance(self, instance_id: str) -> InstanceView:
        with self._db.read() as conn:
            row = conn.execute(select(*_ROW).where(instances.c.id == instance_id)).first()
            if row is None:
                raise UnknownInstance(f"no instance has id {instance_id!r}")
            return self._views(conn, [row])[0]

    def instances(
        self,
        status: str | None = None,
        key: str | None = None,
        limit: int = 1000,
        *,
        tenant: str | None = None,
    ) -> list[InstanceView]:
        """Every instance row is listed (of ``tenant`` only, when given): one whose
        checkpoint cannot be read shows as ``flagged`` with its incident instead of
        failing the listing for everyone."""
        q = select(*_ROW)
        if tenant is not None:
            q = q.where(instances.c.tenant_id == tenant)
        if status is not None:
            q = q.where(instances.c.status == status)
        if key is not None:
            q = q.where(instances.c.key == key)
        with self._db.read() as conn:
            rows = list(
                conn.execute(q.order_by(instances.c.created_at, instances.c.id).limit(limit))
            )
            return self._views(conn, rows)

    def _views(self, conn: Connection, rows: Sequence[Any]) -> list[InstanceView]:
        failed = flagging_counts(conn, [r.id for r in rows])
        out = []
        for row in rows:
            try:
                view = instance_view(checkpoint_of(row))
            except (CorruptCheckpoint, CheckpointTooNew) as exc:
                view = _unreadable(conn, row, exc)
            count = int(failed.get(row.id, 0))
            if count:
                view = dataclasses.replace(view, failed_triggers=count)
            if row.tenant_id != view.tenant:
                view = dataclasses.replace(view, tenant=row.tenant_id)
            out.append(view)
        return out

    def user_tasks(
        self,
        instance_id: str | None = None,
        *,
        assignee: str | None = None,
        candidate_user: str | None = None,
        candidate_group: str | None = None,
        due_before: datetime | None = None,
        tenant: str | None = None,
    ) -> list[UserTaskView]:
        """Open user tasks, oldest first; every filter given must hold (a candidate
        filter matches the tasks that name that user or group as a candidate)."""
        q = select(user_tasks)
        if tenant is not None:
            q = q.where(user_tasks.c.tenant_id == tenant)
        if instance_id is not None:
            q = q.where(user_tasks.c.instance_id == instance_id)
        if assignee is not None:
            q = q.where(user_tasks.c.assignee == assignee)
        if due_before is not None:
            q = q.where(user_tasks.c.due_date < due_before)
        for kind, name in (("user", candidate_user), ("group", candidate_group)):
            if name is not None:
                c = user_task_candidates
                q = q.where(
                    select(c.c.name)
                    .where(
                        c.c.instance_id == user_tasks.c.instance_id,
                        c.c.wait_id == user_tasks.c.wait_id,
                        c.c.kind == kind,
                        c.c.name == name,
                    )
                    .exists()
                )
        with self._db.read() as conn:
            rows = list(conn.execute(q.order_by(user_tasks.c.created_at, user_tasks.c.task_id)))
            names = _candidates(conn, {r.instance_id for r in rows}) if rows else {}
        return [_task_view(r, names.get((r.instance_id, r.wait_id), {})) for r in rows]

    def task(self, task_id: str) -> tuple[str, str]:
        """(instance_id, wait_id) of an open user task."""
        view = self.task_view(task_id)
        return view.instance_id, view.id.rsplit(".", 1)[1]

    def task_view(self, task_id: str) -> UserTaskView:
        """One open user task, as listed."""
        with self._db.read() as conn:
            row = conn.execute(select(user_tasks).where(user_tasks.c.task_id == task_id)).first()
            if row is None:
                raise UnknownTask(
                    f"no open user task has id {task_id!r}; `dormant tasks list` shows the "
                    "open ones"
                )
            names = _candidates(conn, {row.instance_id})
        return _task_view(row, names.get((row.instance_id, row.wait_id), {}))

    def history(self, instance_id: str) -> list[FactView]:
        with self._db.read() as conn:
            rows = list(
                conn.execute(
                    select(facts).where(facts.c.instance_id == instance_id).order_by(facts.c.id)
                )
            )
            if (
                not rows
                and conn.execute(
                    select(instances.c.id).where(instances.c.id == instance_id)
                ).first()
                is None
            ):
                raise UnknownInstance(f"no instance has id {instance_id!r}")
        return fact_views(rows)

    def incidents(
        self,
        instance_id: str | None = None,
        state: str | None = None,
        *,
        key: str | None = None,
        node_id: str | None = None,
        limit: int = 1000,
        tenant: str | None = None,
    ) -> list[IncidentView]:
        """Incidents, open and closed, newest failure last; filtered on the projection."""
        if state is not None and state not in INCIDENT_STATES:
            raise InvalidOperation(
                f"no incident state {state!r}; states: {', '.join(INCIDENT_STATES)}"
            )
        q = select(incident_table.c.id, incident_table.c.instance_id)
        if tenant is not None:
            q = q.where(incident_table.c.tenant_id == tenant)
        if instance_id is not None:
            q = q.where(incident_table.c.instance_id == instance_id)
        if state is not None:
            q = q.where(incident_table.c.state == state)
        if key is not None:
            q = q.where(incident_table.c.process_key == key)
        if node_id is not None:
            q = q.where(incident_table.c.node_id == node_id)
        with self._db.read() as conn:
            rows = list(conn.execute(q.order_by(incident_table.c.last_at).limit(limit)))
        views: dict[str, InstanceView] = {}
        out: list[IncidentView] = []
        for row in rows:
            if row.instance_id not in views:
                views[row.instance_id] = self.instance(row.instance_id)
            out.extend(i for i in views[row.instance_id].incidents if i.id == row.id)
        return out

    def incident(self, incident_id: str) -> IncidentView:
        """One incident by id, whatever its state (UnknownIncident if none has it)."""
        with self._db.read() as conn:
            instance_id = conn.execute(
                select(incident_table.c.instance_id).where(incident_table.c.id == incident_id)
            ).scalar()
        if instance_id is not None:
            for view in self.instance(instance_id).incidents:
                if view.id == incident_id:
                    return view
        raise UnknownIncident(
            f"no incident {incident_id!r}; list them with `dormant incidents list`"
        )

    def counts(self) -> dict[str, int]:
        """Rows per table: what the tests assert hold syncs against."""
        with self._db.read() as conn:
            return {
                name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
                for name, t in _COUNTED.items()
            }

    def holds(self, instance_id: str) -> dict[str, list[dict[str, Any]]]:
        """The hold rows of one instance, for tests and `instances show`."""
        with self._db.read() as conn:
            return {
                name: [
                    dict(r._mapping)
                    for r in conn.execute(
                        select(t).where(t.c.instance_id == instance_id).order_by(t.c.wait_id)
                    )
                ]
                for name, t in (
                    ("deadlines", deadlines),
                    ("subscriptions", subscriptions),
                    ("user_tasks", user_tasks),
                    ("user_task_candidates", user_task_candidates),
                )
            }


def _candidates(
    conn: Connection, instance_ids: set[str]
) -> dict[tuple[str, str], dict[str, list[str]]]:
    """(instance, wait) -> {"user": [...], "group": [...]}, in name order."""
    c = user_task_candidates
    out: dict[tuple[str, str], dict[str, list[str]]] = {}
    ids = sorted(instance_ids)
    for start in range(0, len(ids), 500):
        q = (
            select(c.c.instance_id, c.c.wait_id, c.c.kind, c.c.name)
            .where(c.c.instance_id.in_(ids[start : start + 500]))
            .order_by(c.c.name)
        )
        for r in conn.execute(q):
            out.setdefault((r.instance_id, r.wait_id), {}).setdefault(r.kind, []).append(r.name)
    return out


def _task_view(r: Any, names: dict[str, list[str]]) -> UserTaskView:
    return UserTaskView(
        id=r.task_id,
        instance_id=r.instance_id,
        node_id=r.node_id,
        name=r.name,
        assignee=r.assignee,
        candidate_users=tuple(names.get("user", ())),
        candidate_groups=tuple(names.get("group", ())),
        created_at=r.created_at,
        due_date=r.due_date,
        follow_up_date=r.follow_up_date,
        priority=r.priority,
        form_key=r.form_key,
        form_id=r.form_id,
        external_reference=r.external_reference,
        state=r.state,
        denied_reason=r.denied_reason,
        tenant=r.tenant_id,
    )


class EngineQueries(Queries):
    """The reads alone, over an engine: what ``dormant instances list`` and
    ``incidents list`` use, without the Store's step machinery (and the FEEL grammar it
    imports) or Celery. Reads only: it opens no write transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        super().__init__(self)

    @property
    def is_postgres(self) -> bool:
        return self.engine.dialect.name == "postgresql"

    def suspended_among(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are suspended: the marker of the instance lists (issue 28).
        Read from the stored checkpoint's ``suspended`` field, for these rows only."""
        if not ids:
            return set()
        flag = instances.c.checkpoint["suspended"].as_boolean()
        with self.engine.connect() as conn:
            found = conn.execute(
                select(instances.c.id).where(instances.c.id.in_(list(ids)), flag.is_(True))
            )
            return {str(r[0]) for r in found}

    def read(self) -> AbstractContextManager[Connection]:
        return read_only(self.engine)

    def transaction(self) -> AbstractContextManager[Connection]:
        raise TypeError("EngineQueries reads only: writes go through the Store")


def _unreadable(conn: Connection, row: Any, exc: Exception) -> InstanceView:
    """An instance whose checkpoint this dormant cannot read, from its row alone:
    status ``flagged`` and its checkpoint incident (persistence/failed_triggers.py)."""
    incident_id = f"{row.id}.{CHECKPOINT_INCIDENT}"
    found = conn.execute(select(incident_table).where(incident_table.c.id == incident_id)).first()
    incident = IncidentView(
        id=incident_id,
        instance_id=row.id,
        node_id=CHECKPOINT_INCIDENT,
        node_name=None,
        state=IncidentState.OPEN.value,
        attempts=int(found.attempts) if found else 0,
        cause=" ".join(str(exc).split())[:2000],
        cause_class=type(exc).__name__,
        retry_at=None,
        first_at=found.first_at if found else row.updated_at,
        last_at=found.last_at if found else row.updated_at,
        data={},
    )
    return InstanceView(
        id=row.id,
        key=row.key,
        version=int(row.version),
        status=FLAGGED,
        business_key=row.business_key,
        variables={},
        tokens=[],
        incidents=[incident],
        waits=[],
        revision=int(row.revision),
        created_at=row.created_at,
        updated_at=row.updated_at,
        ended_at=None,
        parent_instance_id=row.parent_id,
    )

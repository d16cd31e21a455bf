"""The Camunda 8 REST API's names for dormant's things, and the jobs its workers take.

Camunda's clients name every deployment, process definition, instance, job, user task
and incident by a *key*: a Java ``long``, sent as a string of digits
(docs/camunda-api.md). dormant's ids stay what they are (an instance id is a hex
string, a user task ``<instance>.<wait>``); ``api_keys`` is the one home of the key
beside each: handed out on first use, by the database's own sequence, and never
changed, so a key a client saw yesterday names the same thing today. ``kind`` keeps
the spaces apart: a client that sends an incident key where a job key belongs is
answered "not found", never given another thing.

``api_jobs`` holds the jobs of the types API workers serve (``DORMANT_JOB_TYPES``
``{"type": {"api": true}}``): ``offer`` is the job dispatch for such a type (the outbox
relay calls it where it would send a Celery task), ``activate`` hands ready jobs to a
worker, ``take`` removes one whose outcome the worker reported. The job is the same
job of the engine as a Celery job: its wait, attempt, timeout, retries and incidents
are the engine's (engine_core/jobs.py); this table is only its mailbox.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, and_, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from dormant.engine_core.tenants import DEFAULT_TENANT
from dormant.persistence.tables import api_jobs, api_keys, instances, subscriptions

__all__ = [
    "KINDS",
    "ApiJob",
    "activate",
    "dormant_id",
    "extend",
    "instance_processes",
    "job",
    "key_of",
    "keys_of",
    "message_holders",
    "offer",
    "take",
]

# The kinds of thing a key names.
KINDS = frozenset(
    {
        "deployment",
        "process",
        "decision",
        "form",
        "instance",
        "element",
        "job",
        "user_task",
        "incident",
        "message",
        "signal",
        "variable",
        "decision_evaluation",
    }
)


def keys_of(engine: Engine, kind: str, ids: Iterable[str]) -> dict[str, int]:
    """The key of each id of ``kind``, handed out now for an id that has none yet."""
    if kind not in KINDS:
        raise ValueError(f"unknown key kind {kind!r}")
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    found = _select(engine, kind, wanted)
    for missing in (i for i in wanted if i not in found):
        try:
            with engine.begin() as conn:
                conn.execute(insert(api_keys).values(kind=kind, dormant_id=missing))
        except IntegrityError:
            pass  # another process named it first: its key is the key
    if len(found) < len(wanted):
        found = _select(engine, kind, wanted)
    return found


def _select(engine: Engine, kind: str, ids: list[str]) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(api_keys.c.dormant_id, api_keys.c.key).where(
                api_keys.c.kind == kind, api_keys.c.dormant_id.in_(ids)
            )
        ).all()
    return {str(r.dormant_id): int(r.key) for r in rows}


def key_of(engine: Engine, kind: str, dormant_id: str) -> int:
    return keys_of(engine, kind, [dormant_id])[dormant_id]


def dormant_id(engine: Engine, kind: str, key: int) -> str | None:
    """The id ``key`` names, if it names a thing of ``kind``."""
    with engine.connect() as conn:
        found = conn.execute(
            select(api_keys.c.dormant_id).where(api_keys.c.key == key, api_keys.c.kind == kind)
        ).scalar()
    return None if found is None else str(found)


@dataclass(frozen=True, slots=True)
class ApiJob:
    key: int
    job_type: str
    instance_id: str
    wait_id: str
    node_id: str
    attempt: int
    variables: dict[str, Any]
    headers: dict[str, str]
    worker: str | None
    deadline: datetime | None
    tenant: str = DEFAULT_TENANT


def _job(row: Any) -> ApiJob:
    return ApiJob(
        key=int(row.key),
        job_type=row.job_type,
        instance_id=row.instance_id,
        wait_id=row.wait_id,
        node_id=row.node_id,
        attempt=int(row.attempt),
        variables=dict(row.variables or {}),
        headers={str(k): str(v) for k, v in (row.headers or {}).items()},
        worker=row.worker,
        deadline=row.deadline,
        tenant=row.tenant_id,
    )


def offer(
    engine: Engine,
    *,
    idempotency_key: str,
    job_type: str,
    instance_id: str,
    wait_id: str,
    node_id: str,
    attempt: int,
    variables: dict[str, Any],
    headers: dict[str, str],
    now: datetime,
    tenant: str = DEFAULT_TENANT,
) -> int:
    """Make a dispatched job activatable; returns its key. Idempotent (the outbox may
    relay a row twice), and an earlier attempt of the same wait (the engine timed it
    out and dispatched the next) is withdrawn: its result would be stale anyway."""
    key = key_of(engine, "job", idempotency_key)
    with engine.begin() as conn:
        conn.execute(
            delete(api_jobs).where(
                api_jobs.c.instance_id == instance_id,
                api_jobs.c.wait_id == wait_id,
                api_jobs.c.attempt < attempt,
            )
        )
        exists = conn.execute(select(api_jobs.c.key).where(api_jobs.c.key == key)).first()
        if exists is None:
            conn.execute(
                insert(api_jobs).values(
                    key=key,
                    job_type=job_type,
                    instance_id=instance_id,
                    wait_id=wait_id,
                    node_id=node_id,
                    attempt=attempt,
                    variables=variables,
                    headers=headers,
                    created_at=now,
                    tenant_id=tenant,
                )
            )
    return key


def activate(
    engine: Engine,
    job_type: str,
    worker: str,
    timeout: timedelta,
    limit: int,
    now: datetime,
    tenants: Sequence[str] | None = None,
) -> list[ApiJob]:
    """Hand up to ``limit`` ready jobs of ``job_type`` (of ``tenants`` only, when
    given) to ``worker`` until now + ``timeout``. Each job goes to one activation: rows
    are locked and skipped by any other activation running at the same time (``FOR
    UPDATE SKIP LOCKED`` on PostgreSQL; SQLite has one writer)."""
    stmt = (
        select(api_jobs)
        .where(api_jobs.c.job_type == job_type, api_jobs.c.worker.is_(None))
        .order_by(api_jobs.c.key)
        .limit(limit)
    )
    if tenants is not None:
        stmt = stmt.where(api_jobs.c.tenant_id.in_(list(tenants)))
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            stmt = stmt.with_for_update(skip_locked=True)
        rows = conn.execute(stmt).all()
        if not rows:
            return []
        deadline = now + timeout
        keys = [int(r.key) for r in rows]
        conn.execute(
            update(api_jobs)
            .where(api_jobs.c.key.in_(keys))
            .values(worker=worker, deadline=deadline)
        )
    return [_activated(r, worker, deadline) for r in rows]


def _activated(row: Any, worker: str, deadline: datetime) -> ApiJob:
    job = _job(row)
    return ApiJob(**{**_fields(job), "worker": worker, "deadline": deadline})


def _fields(job: ApiJob) -> dict[str, Any]:
    return {name: getattr(job, name) for name in ApiJob.__slots__}


def job(engine: Engine, key: int) -> ApiJob | None:
    with engine.connect() as conn:
        row = conn.execute(select(api_jobs).where(api_jobs.c.key == key)).first()
    return None if row is None else _job(row)


def take(engine: Engine, key: int, tenants: Sequence[str] | None = None) -> ApiJob | None:
    """Remove the job whose outcome its worker reported; None when there is no such
    job (never activated through the API, or already reported, or not of ``tenants``
    when given: another tenant's job is no job to its caller, and stays)."""
    stmt = delete(api_jobs).where(api_jobs.c.key == key)
    if tenants is not None:
        stmt = stmt.where(api_jobs.c.tenant_id.in_(list(tenants)))
    with engine.begin() as conn:
        row = conn.execute(stmt.returning(api_jobs)).first()
    return None if row is None else _job(row)


def extend(engine: Engine, key: int, deadline: datetime) -> bool:
    """Move an activated job's deadline (``PATCH /v2/jobs/{key}`` with a timeout)."""
    with engine.begin() as conn:
        done = conn.execute(
            update(api_jobs)
            .where(and_(api_jobs.c.key == key, api_jobs.c.worker.is_not(None)))
            .values(deadline=deadline)
        )
    return bool(done.rowcount)


def instance_processes(engine: Engine, ids: Iterable[str]) -> dict[str, tuple[str, int]]:
    """The process key and version of each instance (a job names both)."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    with engine.connect() as conn:
        rows = conn.execute(
            select(instances.c.id, instances.c.key, instances.c.version).where(
                instances.c.id.in_(wanted)
            )
        ).all()
    return {str(r.id): (str(r.key), int(r.version)) for r in rows}


def message_holders(
    engine: Engine, name: str, correlation_key: str | None, tenant: str = DEFAULT_TENANT
) -> list[str]:
    """The instances of ``tenant`` waiting for a message of ``name`` and
    ``correlation_key`` now, oldest subscription first: what a synchronous correlation
    answers with."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(subscriptions.c.instance_id)
            .where(
                subscriptions.c.kind == "message",
                subscriptions.c.name == name,
                subscriptions.c.tenant_id == tenant,
                subscriptions.c.correlation_key == correlation_key
                if correlation_key is not None
                else subscriptions.c.correlation_key.is_(None),
            )
            .order_by(subscriptions.c.instance_id)
        ).all()
    return [str(r.instance_id) for r in rows]

"""The Store: the one transaction, and nothing else that changes an instance.

``Store.apply`` is the one transaction of docs/internals.md in code: lock the instance row, load the
checkpoint, let ``engine_core`` apply one trigger, then write the new checkpoint AND
every row it implies (hold rows, facts, outbox, the processed trigger id) before the
one commit. Anything the shell must do afterwards (publish jobs, follow-up triggers) is
an outbox row committed here, so a crash between commit and publish loses nothing.

No BPMN semantics live here: the Store locks, stores, projects and asks the core.
Operational database errors (connection lost, serialisation failure) propagate as
SQLAlchemy errors so the calling Celery task retries the whole trigger; the trigger id
makes that retry idempotent.

The Store is composed, not mixed: what is not the transaction lives in parts that
borrow the Store's connections (``persistence.db.Transactions``) — ``store.queries``
(reads for the Client, the CLI and the console), ``store.deployments`` (deploy, the
definition cache, start routing), ``store.outbox`` (rows to publish after a commit) and
``store.failed`` (failed triggers, flagged checkpoints). The transaction itself —
``transaction()``, ``read()``, ``start``, ``apply`` — stays on the Store: one owner,
so how a transaction is opened can change in one place.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import (
    JSON,
    Connection,
    Row,
    Text,
    any_,
    bindparam,
    cast,
    delete,
    exists,
    false,
    insert,
    literal,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ColumnElement

from dormant.engine_core import engine as core
from dormant.engine_core.checkpoint import (
    Checkpoint,
    HoldState,
    decode,
    decode_holds,
    encode_row_json,
    with_row_identity,
)
from dormant.engine_core.effects import DispatchJob, Fact, Step, encode_effect
from dormant.engine_core.errors import (
    CheckpointTooNew,
    CorruptCheckpoint,
    InvalidOperation,
    UnknownInstance,
    UnknownProcess,
)
from dormant.engine_core.inputs import check_text, check_variables
from dormant.engine_core.model import ProcessDefinition
from dormant.engine_core.operations import projected_waits
from dormant.engine_core.tenants import DEFAULT_TENANT
from dormant.engine_core.triggers import MigrateInstance, Start, Trigger
from dormant.persistence import clock, migrate, round_trips, savepoints
from dormant.persistence.db import make_engine, read_only
from dormant.persistence.decisions import DecisionCache
from dormant.persistence.deployments import Deployment, Deployments
from dormant.persistence.fact_rows import fact_rows
from dormant.persistence.failed_triggers import FLAGGED, FailedTriggers
from dormant.persistence.holds import sync_holds
from dormant.persistence.inbox import queue_mark_processed
from dormant.persistence.incident_rows import sync_incidents
from dormant.persistence.instance_rows import checkpoint_of
from dormant.persistence.job_flow import JobFlow
from dormant.persistence.outbox_queue import OutboxQueue, OutboxRow
from dormant.persistence.published_jobs import FLUSH_AFTER_SECONDS, Ride
from dormant.persistence.queries import Queries
from dormant.persistence.results import Applied
from dormant.persistence.settings import Settings
from dormant.persistence.tables import facts, instances, outbox, processed_triggers
from dormant.persistence.writes import Writes

__all__ = [
    "LOCK_WAIT_OBSERVERS",
    "Applied",
    "Deployment",
    "Found",
    "JobRun",
    "NewInstance",
    "OutboxRow",
    "RunJobFirst",
    "StartKeyTaken",
    "Store",
    "log_raised_incidents",
]

log = logging.getLogger("dormant.store")

# Called with the seconds each trigger waited for its instance's row lock. The shell
# registers its metrics here (tasks/metrics.py): persistence must not import it.
LOCK_WAIT_OBSERVERS: list[Callable[[float], None]] = []


@dataclass(frozen=True, slots=True)
class NewInstance:
    """What one start transaction writes: instance ``instance_id`` of process ``key``
    with its Start (``Store.start``, ``Store.start_in``).

    ``version``: the version to start (default the latest); ``version_tag``: the newest
    version with that ``zeebe:versionTag`` instead (a call activity's
    ``bindingType="versionTag"``). ``start_node_id``: the start event (a timer or message
    start's); ``start_key``: a keyed message start's key, unique among running
    instances; ``parent``: the calling instance of a call activity's child.
    ``trigger_id``: the start's trigger id, kept as no processed trigger id: the instance
    id is the start's own idempotency key (its row's primary key refuses a repeat, and
    no instance row is ever deleted), so the row would guard nothing; ``inbox_id``: the
    Client's inbox row behind it, marked processed in the same transaction."""

    key: str
    instance_id: str
    variables: dict[str, Any] = field(default_factory=dict)
    business_key: str | None = None
    version: int | None = None
    version_tag: str | None = None
    start_node_id: str | None = None
    start_key: str | None = None
    parent: dict[str, str] | None = None
    trigger_id: str | None = None
    inbox_id: str | None = None
    # The producer's tenant: the process must be that tenant's (``UnknownProcess`` if
    # not); a call activity's child carries its parent's. None: the process's own
    # tenant (a timer start), or with ``parent`` the parent's, read (docs/tenants.md).
    tenant: str | None = None

    def trigger(self) -> Start:
        return Start(
            variables=self.variables,
            business_key=self.business_key,
            start_node_id=self.start_node_id,
            start_key=self.start_key,
            parent=self.parent,
        )


@dataclass(frozen=True, slots=True)
class _Earlier:
    """A start's own step that is written only together with the step after it (its
    first job's outcome: ``Store._start_job_first``), and when it was taken."""

    step: Step
    at: datetime


@dataclass(frozen=True, slots=True)
class _StepWrite:
    """What one transaction writes for a step, behind its checkpoint's own write
    (``Store._write_step``): the holds, incidents and facts ``step`` implies against
    ``old`` (the state before it), its outbox rows, ``trigger_id`` as processed and
    ``inbox_id`` as marked. ``also``: more writes of the caller's; ``ride``: published
    job rows this statement deletes too; ``last``: the statement ends the transaction
    (its COMMIT may go with it); ``earlier``: a step before ``step`` never written on
    its own, whose facts go with these at its own revision and time."""

    instance_id: str
    old: Checkpoint | HoldState
    step: Step
    now: datetime
    trigger_id: str | None = None
    inbox_id: str | None = None
    also: Callable[[Writes], None] | None = None
    ride: Ride | None = None
    last: bool = False
    earlier: _Earlier | None = None
    # The instance's tenant, stamped on the hold and incident rows it writes.
    tenant: str = DEFAULT_TENANT


@dataclass(frozen=True, slots=True)
class JobRun:
    """A start's first job, run by the caller of ``Store.start(job_first=...)`` before
    the instance was written: its outcome (``JobCompleted``, ``JobErrorThrown`` or
    ``JobFailed``), or None when the job sent itself to the broker (a Celery retry) or
    reported nothing; ``at``: when it ended, the time its outcome is applied at."""

    outcome: Trigger | None
    at: datetime


class RunJobFirst(Protocol):
    """Who runs a start's first job before the start is written (``Store.start``)."""

    def may_run(self, job_type: str) -> bool:
        """Might a job of ``job_type`` (a literal, or "=expr" computed at run time) be
        run? A start whose model names none such is stepped in its own transaction."""
        ...

    def __call__(self, job: DispatchJob) -> JobRun | None:
        """Run ``job`` and answer its ``JobRun``, or None when it was not run."""
        ...


@dataclass(frozen=True, slots=True)
class Found:
    """What a caller's own locking statement found (``Store.apply_found``): the
    instance, its locked row (the columns of ``_LOCK``: key, version, status, revision,
    checkpoint text, whether ``trigger_id`` is applied; a key of None when the instance
    is gone), and what to apply to it."""

    instance_id: str
    row: Any
    trigger: Trigger
    trigger_id: str | None
    also: Callable[[Writes], None] | None = None


def _is_processed_conflict(exc: IntegrityError) -> bool:
    """Is ``exc`` the processed trigger id's primary key refusing a second row (a
    concurrent delivery of the same trigger committed first)?"""
    diag = getattr(exc.orig, "diag", None)
    if diag is not None:
        return getattr(diag, "constraint_name", None) == "pk_processed_triggers"
    return "processed_triggers." in str(exc.orig)  # SQLite names the columns


class _Duplicate(Exception):
    """A concurrent delivery of the same trigger committed first (seen at the final
    write): roll this transaction back and answer 'duplicate'."""


class StartKeyTaken(InvalidOperation):
    """A keyed message start lost the race: a running instance already has that key."""

    def __init__(self, key: str, start_key: str) -> None:
        self.key = key
        self.start_key = start_key
        super().__init__(
            f"process {key!r} already has a running instance started with key {start_key!r}"
        )


def _document(cp: Checkpoint | str, postgres: bool) -> ColumnElement[Any]:
    """The new checkpoint as ``encode_row_json``'s text (or that text), written in one pass:
    cast to ``json`` on PostgreSQL, which checks it and stores the text as it is, as
    SQLite does (tables.py ``JsonText``)."""
    doc = literal(cp if isinstance(cp, str) else encode_row_json(cp), Text)
    return cast(doc, JSON) if postgres else doc


def waiting_nodes(cp: Checkpoint) -> str:
    """The ``waiting_nodes`` column's JSON text for ``cp``: its live tokens' node ids,
    sorted and distinct, so a step whose tokens stay where they were writes the very
    value already stored, and PostgreSQL keeps the UPDATE HOT (migration 0013)."""
    return json.dumps(sorted({t.node_id for t in cp.tokens.values()}), separators=(",", ":"))


def log_raised_incidents(applied: Applied) -> None:
    """Log every incident a committed step raised, once, at ERROR (docs/incidents.md).

    Called after the commit, so a transaction that rolled back (and is retried) logs
    nothing; a duplicate or stale trigger carries no ``raised`` fact. Names only: the
    instance, the incident, the node, the cause class and the attempt, never a value.
    """
    for fact in applied.facts:
        if fact.kind == "Incident" and fact.details.get("action") == "raised":
            log.error(
                "incident raised instance=%s incident=%s node=%s cause_class=%s attempts=%s",
                applied.instance_id,
                fact.details.get("incident"),
                fact.details.get("node"),
                fact.details.get("cause_class"),
                fact.details.get("attempts"),
            )


def locking_instance(instance_id: Any, trigger_id: Any | None) -> Any:
    """The SELECT that locks the instance ``instance_id`` (an expression: a bound
    parameter, or a caller's subquery that finds it) and answers what
    ``_apply_locked`` needs: its key, version, status, revision, checkpoint text and
    whether ``trigger_id`` is already applied to it (``duplicate``; false without one)."""
    duplicate: Any = (
        exists()
        .where(
            processed_triggers.c.instance_id == instances.c.id,
            processed_triggers.c.trigger_id == trigger_id,
        )
        .label("duplicate")
        if trigger_id is not None
        else false().label("duplicate")
    )
    return (
        select(
            instances.c.key,
            instances.c.version,
            instances.c.status,
            instances.c.revision,
            instances.c.tenant_id,
            # As text (``checkpoint::text`` on PostgreSQL): ``apply`` validates it in
            # one pass, with no dict parsed by the driver in between.
            cast(instances.c.checkpoint, Text).label("checkpoint"),
            duplicate,
        )
        .where(instances.c.id == instance_id)
        .with_for_update(of=instances)
    )


def _lock_statement(checks_trigger: bool) -> Any:
    """``Store._lock``'s statement, built once per process with bound parameters: the
    same object at every trigger, so neither its construction nor its cache key is
    paid again (about 90 microseconds a statement, measured)."""
    return locking_instance(
        bindparam("instance_id"), bindparam("trigger_id") if checks_trigger else None
    )


# with a trigger id to check, and without
_LOCK = {True: _lock_statement(True), False: _lock_statement(False)}

# The writes of nearly every trigger, prebuilt like the lock for PostgreSQL's one write
# statement (persistence/writes.py ``add_prebuilt``): the checkpoint's UPDATE (a
# migration moves the instance's pin: the version is written too), the published job
# rows' DELETE (persistence/published_jobs.py), a start's instance row and the
# processed trigger id's INSERT. Those two are plain INSERTs: a row already there fails
# the whole statement (a duplicate: ``_Duplicate``, or the start's existing row), which
# must not commit anything — and on PostgreSQL its COMMIT goes with it
# (persistence/round_trips.py), so a RETURNING read afterwards would come too late.
_CHECKPOINT_PARAMS = (
    "checkpoint_instance",
    "checkpoint_document",
    "checkpoint_status",
    "checkpoint_revision",
    "checkpoint_version",
    "checkpoint_at",
    "checkpoint_nodes",
)
_CHECKPOINT = (
    update(instances)
    .where(instances.c.id == bindparam("checkpoint_instance"))
    .values(
        checkpoint=cast(bindparam("checkpoint_document", type_=Text), JSON),
        status=bindparam("checkpoint_status"),
        revision=bindparam("checkpoint_revision"),
        version=bindparam("checkpoint_version"),
        updated_at=bindparam("checkpoint_at"),
        waiting_nodes=cast(bindparam("checkpoint_nodes", type_=Text), JSONB),
    )
)
_DELETE_PUBLISHED = delete(outbox).where(
    outbox.c.id == any_(bindparam("published_ids", type_=ARRAY(outbox.c.id.type)))
)
# A start's instance row on PostgreSQL; its primary key refuses a redelivered start.
_START = insert(instances).values(
    {
        **{
            name: bindparam(f"start_{name}")
            for name in (
                "id",
                "key",
                "version",
                "status",
                "business_key",
                "start_key",
                "revision",
                "created_at",
                "updated_at",
                "parent_id",
                "tenant_id",
            )
        },
        "checkpoint": cast(bindparam("start_checkpoint", type_=Text), JSON),
        "waiting_nodes": cast(bindparam("start_waiting_nodes", type_=Text), JSONB),
    }
)
_PROCESSED_PARAMS = ("processed_instance", "processed_trigger", "processed_at")
_PROCESSED = insert(processed_triggers).values(
    instance_id=bindparam("processed_instance"),
    trigger_id=bindparam("processed_trigger"),
    at=bindparam("processed_at"),
)


class Store:
    """One database, one SQLAlchemy Engine, the one transaction; the rest in its parts
    (the module docstring)."""

    def _compute(
        self,
        definition: ProcessDefinition,
        checkpoint: Checkpoint | str,
        trigger: Trigger,
        *,
        now: datetime,
        services: core.Services,
        keep_holds: bool = False,
    ) -> Step:
        """The core's apply inside the compute guard (see ``__init__``)."""
        with self.compute_guard():
            return core.apply(
                definition, checkpoint, trigger, now=now, services=services, keep_holds=keep_holds
            )

    def __init__(
        self,
        database_url: str | None = None,
        *,
        settings: Settings | None = None,
        check_schema: bool = True,
        compute_guard: Callable[[], AbstractContextManager[object]] = nullcontext,
    ) -> None:
        if settings is None:
            settings = Settings.from_env(database_url=database_url)
        elif database_url is not None:
            settings = Settings.from_env(
                {}, **(settings.model_dump() | {"database_url": database_url})
            )
        self.settings = settings
        self.url = settings.database_url
        # Wraps each pure computation (the core's apply), never a SQL statement: a
        # main-lane worker's budget (tasks/lanes.py) interrupts there, and only there.
        self.compute_guard = compute_guard
        self.engine = make_engine(
            self.url,
            statement_timeout_seconds=settings.db_statement_timeout_seconds,
            idle_in_transaction_timeout_seconds=settings.db_idle_in_transaction_timeout_seconds,
        )
        self.is_postgres = self.engine.dialect.name == "postgresql"
        self.services = core.Services(
            job_retry_backoff_seconds=settings.job_retry_backoff_seconds,
            job_timeout_seconds=settings.job_timeout_seconds,
            incident_retry_policy=settings.incident_retry_policy,
            limits=settings.limits,
            job_types=settings.job_type_settings,
            step_budget=settings.step_budget,
            max_loop_items=settings.max_loop_items,
        )
        self._decisions = DecisionCache(self.services)
        self.queries = Queries(self)
        self.deployments = Deployments(self)
        self.failed = FailedTriggers(self)
        # Published job rows wait there for a write to carry their DELETE; the timer's
        # bound stays well under the sweep's age, which would send them again.
        self.outbox = OutboxQueue(
            self, min(FLUSH_AFTER_SECONDS, settings.outbox_sweep_after_seconds / 4)
        )
        self.flow = JobFlow(self.engine, {t: s.flow_limits for t, s in settings.job_types.items()})
        if check_schema:
            migrate.ensure_schema(self.engine)

    def close(self) -> None:
        self.outbox.published_jobs.flush()  # before the pool goes: nothing left for the sweep
        self.engine.dispose()

    def database_time(self) -> clock.ClockReading | None:
        """The database server's clock, the fleet's one time (persistence/clock.py),
        stamped around its statement alone: the connection's check-out before it and
        its return after are no part of the window. ``None`` for SQLite, whose only
        clock is the host's."""
        if not self.is_postgres:
            return None
        with read_only(self.engine) as conn:
            sent = time.monotonic()
            value: datetime = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
            received = time.monotonic()
        return clock.ClockReading(value, sent, received)

    # -- transactions -------------------------------------------------------------

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        """A write transaction (BEGIN IMMEDIATE on SQLite); on PostgreSQL its BEGIN and
        COMMIT ride with its first and last statements (persistence/round_trips.py).
        Inside a batch (persistence/savepoints.py) it is a savepoint of the batch's."""
        batch = savepoints.joined(self.engine)
        if batch is not None:
            with round_trips.savepoint(batch):
                yield batch
            return
        if not self.is_postgres:
            with self.engine.begin() as conn:
                yield conn
            return
        with self.engine.connect() as conn, round_trips.open_late(conn):
            yield conn

    def _read(self) -> AbstractContextManager[Connection]:
        return read_only(self.engine)

    def transaction(self) -> AbstractContextManager[Connection]:
        """A write transaction on this Store's database, for the layers that build on
        it (routing, the scheduler): committed when the block ends, rolled back if it
        raises. (BEGIN IMMEDIATE on SQLite: the database write lock.)"""
        return self._tx()

    def read(self) -> AbstractContextManager[Connection]:
        """A connection for reads (persistence/db.py ``read_only``): autocommit on
        PostgreSQL, each statement its own READ COMMITTED snapshot; a DEFERRED read
        transaction on SQLite."""
        return self._read()

    # -- the one transaction ------------------------------------------------------

    def start(
        self, new: NewInstance, *, now: datetime, job_first: RunJobFirst | None = None
    ) -> Applied:
        """Create ``new.instance_id`` and apply its Start, in one transaction; with
        ``new.version_tag``, of the newest version carrying it (``UnknownProcess`` if
        none has it).

        Idempotent on the instance id: a redelivered start finds the row and returns
        ``changed=False``. A keyed start racing another with the same key loses on the
        partial unique index and raises ``StartKeyTaken`` (the router joins instead).

        ``job_first``: the caller may run the first job the start dispatches before
        anything is written (``_start_job_first``).
        """
        limits = self.settings.limits
        check_text(new.instance_id, "instance id", limits)
        new = dataclasses.replace(
            new, variables=check_variables(new.variables, "variables", limits)
        )
        if new.business_key is not None:
            check_text(new.business_key, "business key", limits)
        try:
            if job_first is not None and self.may_run_a_job_first(new.key, new.version, job_first):
                applied = self._start_job_first(new, now, job_first)
            else:
                with self.outbox.published_jobs.riding() as ride, self._tx() as conn:
                    if new.version_tag is not None and new.version is None:
                        tagged = self.deployments.tagged_version(conn, new.key, new.version_tag)
                        new = dataclasses.replace(new, version=tagged)
                    applied = self.start_in(
                        conn, new, now=now, checked=not self.is_postgres, ride=ride, last=True
                    )
            log_raised_incidents(applied)
            return applied
        except _Duplicate:
            with self._read() as conn:
                existing = self._existing(conn, new.instance_id)
            assert existing is not None  # its INSERT met the row
            return existing
        except IntegrityError as exc:
            with self._read() as conn:
                existing = self._existing(conn, new.instance_id)
            if existing is not None:
                return existing
            if new.start_key is not None:
                raise StartKeyTaken(new.key, new.start_key) from exc
            raise

    def start_in(
        self,
        conn: Connection,
        new: NewInstance,
        *,
        now: datetime,
        checked: bool = True,
        ride: Ride | None = None,
        last: bool = False,
    ) -> Applied:
        """``start``'s body inside the CALLER's transaction, so a caller that must change
        other rows with the start (a timer start arming its next repetition) commits
        both at once. An existing ``instance_id`` is returned as a duplicate.

        ``checked=False`` (``start`` on PostgreSQL) leaves the existence check to the
        instance INSERT inside the one write statement: a redelivered start fails it on
        the instance's primary key (nothing of it written) and ``start`` answers with
        the existing row. One round trip fewer. ``last``: that statement ends the
        transaction (``start``'s own), its COMMIT may go with it.

        ``ride``: published job rows this transaction deletes too (``_write_step``)."""
        if checked:
            existing = self._existing(conn, new.instance_id)
            if existing is not None:
                return existing
        definition, ver = self.deployments.definition(new.key, new.version, conn=conn)
        new = dataclasses.replace(new, tenant=self._start_tenant(conn, new))
        first = core.new_checkpoint(definition, new.instance_id, ver, now)
        services = self._decisions.services(conn, definition)
        step = self._compute(definition, first, new.trigger(), now=now, services=services)
        written = _StepWrite(
            new.instance_id,
            first,
            step,
            now,
            None,  # no processed id: the instance row's key refuses a repeat (``NewInstance``)
            new.inbox_id,
            ride=ride,
            last=last,
            tenant=new.tenant or DEFAULT_TENANT,
        )
        return self._write_start(conn, new, written, checked)

    def _start_tenant(self, conn: Connection, new: NewInstance) -> str:
        """The tenant of the instance ``new`` starts: its process's. A producer bound to
        another tenant meets ``UnknownProcess``, worded as for a key nobody deployed,
        so a start tells no tenant what another one has; a call activity's child must
        be of its parent's tenant (the start task names it; a caller of the Store that
        does not costs one more read)."""
        owner = self.deployments.tenant(new.key, conn=conn)
        asked = new.tenant
        if asked is None and new.parent is not None:
            asked = conn.execute(
                select(instances.c.tenant_id).where(instances.c.id == new.parent["instance_id"])
            ).scalar()
        if asked is not None and asked != owner:
            raise UnknownProcess(f"no process {new.key!r} is deployed for tenant {asked!r}")
        return owner

    def _write_start(
        self, conn: Connection, new: NewInstance, written: _StepWrite, checked: bool
    ) -> Applied:
        """The new instance's row and everything its first step implies, as one write
        statement (``start_in``'s; ``checked`` as there). ``written.old`` is the new
        instance's first checkpoint; with ``written.earlier`` (``_start_job_first``)
        the instance was created at that step's time."""
        earlier, now = written.earlier, written.now
        cp = written.step.checkpoint
        writes = Writes(conn)
        document = encode_row_json(cp)
        row = {
            "id": new.instance_id,
            "key": new.key,
            "version": cp.version,  # the pin, as the checkpoint it writes carries it
            "status": cp.status.value,
            "business_key": new.business_key,
            "start_key": new.start_key,
            "revision": cp.revision,
            "checkpoint": document,
            "created_at": earlier.at if earlier is not None else now,
            "updated_at": now,
            "parent_id": (new.parent or {}).get("instance_id"),
            "tenant_id": written.tenant,
            "waiting_nodes": waiting_nodes(cp),
        }
        postgres = conn.dialect.name == "postgresql"

        def documents() -> dict[str, Any]:
            return {
                **row,
                "checkpoint": _document(document, postgres),
                "waiting_nodes": _document(str(row["waiting_nodes"]), postgres),
            }

        if not checked:
            writes.add_prebuilt(
                _START,
                {f"start_{name}": value for name, value in row.items()},
                lambda: insert(instances).values(documents()),
            )
        else:
            writes.add(insert(instances).values(documents()))
        return self._write_step(writes, written)

    def may_run_a_job_first(self, key: str, version: int | None, job_first: RunJobFirst) -> bool:
        """Is ``_start_job_first`` worth it? When no job runs first, its definition read
        is a statement and a server transaction of its own, where the ordinary start
        sends it with its BEGIN. So only for a model of ``key`` this process has loaded
        (the version asked for, else the latest it has seen) that names a job type
        ``job_first`` may run. A guess, never a rule: either path ends the same, only
        its cost differs."""
        known = self.deployments.seen(key, version)
        return known is not None and any(job_first.may_run(t) for t in known.index.job_types)

    def _start_job_first(self, new: NewInstance, now: datetime, job_first: RunJobFirst) -> Applied:
        """A start whose first job runs before the instance is written: the start is
        stepped in memory, ``job_first`` may run the first job it dispatches, its
        outcome is stepped onto that state, and both are written in ONE transaction —
        one instance, one commit, where the job's wait would have cost a commit, a
        hold row, an outbox row and a second locked transaction.

        Why this is safe for a start and for nothing else: until its first commit the
        instance exists nowhere, so no other trigger can lock, see or change it while
        its job runs, and no transaction is open meanwhile (the definition is read in
        autocommit). What makes the job durable is the start itself: the caller runs
        this only for a start its broker holds unacknowledged until the task ends and
        marks when it delivers again, and a redelivered start takes the ordinary path
        (its job's wait written first), so a job that kills its worker is counted by
        the engine's retries, not run by every redelivery. A job may still run twice
        (a start re-sent by the inbox sweep while its job runs): jobs are
        at-least-once, and both runs see the same idempotency key.

        ``job_first`` answers None when it did not run the job (its dispatch is
        written and published as usual), else a ``JobRun``: its outcome is applied,
        or with no outcome (a Celery retry sent it to the broker) its wait is written
        and its dispatch is not."""
        version = new.version
        with self._read() as conn:
            if new.version_tag is not None and version is None:
                version = self.deployments.tagged_version(conn, new.key, new.version_tag)
            definition, ver = self.deployments.definition(new.key, version, conn=conn)
            tenant = self._start_tenant(conn, new)
            services = self._decisions.services(conn, definition)
        first = core.new_checkpoint(definition, new.instance_id, ver, now)
        step = self._compute(definition, first, new.trigger(), now=now, services=services)
        job = next((e for e in step.effects if isinstance(e, DispatchJob)), None)
        run = job_first(job) if job is not None else None
        earlier: _Earlier | None = None
        written_at = now
        if run is not None:
            rest = tuple(e for e in step.effects if e is not job)
            then = (
                self._compute(
                    definition, step.checkpoint, run.outcome, now=run.at, services=services
                )
                if run.outcome is not None
                else None
            )
            if then is not None and then.changed:
                earlier, written_at = _Earlier(step, now), run.at
                step = dataclasses.replace(then, effects=rest + then.effects, holds_before=None)
            else:
                step = dataclasses.replace(step, effects=rest)
        with self.outbox.published_jobs.riding() as ride, self._tx() as conn:
            checked = not self.is_postgres
            if checked and (existing := self._existing(conn, new.instance_id)) is not None:
                return existing
            written = _StepWrite(
                new.instance_id,
                first,
                step,
                written_at,
                None,  # no processed id: the instance row's key refuses a repeat
                new.inbox_id,
                ride=ride,
                last=True,
                earlier=earlier,
                tenant=tenant,
            )
            return self._write_start(conn, new, written, checked)

    def _existing(self, conn: Connection, instance_id: str) -> Applied | None:
        row = conn.execute(
            select(instances.c.revision, instances.c.status).where(instances.c.id == instance_id)
        ).first()
        if row is None:
            return None
        return Applied(instance_id, int(row.revision), row.status, changed=False, duplicate=True)

    def apply(
        self,
        instance_id: str,
        trigger: Trigger,
        now: datetime,
        *,
        trigger_id: str | None = None,
        precondition: Callable[[Connection], bool] | None = None,
        also: Callable[[Writes], None] | None = None,
        inbox_id: str | None = None,
    ) -> Applied:
        """Apply one trigger to one instance: THE transaction (see ``_apply``).

        ``inbox_id``: the Client's inbox row behind this trigger, marked processed in
        the same transaction (not in a second one after it).

        After the commit, every incident the step raised is logged once at ERROR. A
        checkpoint this dormant cannot read flags the instance with an incident of its
        own class (after the rollback, in a transaction of its own) and the error goes
        on to the caller, who keeps the trigger (persistence/failed_triggers.py)."""
        applied = self._settled(
            lambda: instance_id,
            now,
            lambda: self._apply(
                instance_id,
                trigger,
                now,
                trigger_id=trigger_id,
                precondition=precondition,
                also=also,
                inbox_id=inbox_id,
            ),
        )
        assert applied is not None
        return applied

    def rehearse(self, instance_id: str, trigger: Trigger, now: datetime) -> None:
        """Apply ``trigger`` to the instance as it is now and throw the result away: the
        refusal an operator's action would meet on a worker (an unknown variable to
        unset, a node that is not there, an incident already closed) is raised here, to
        the caller who asked (issue 28: it used to reach only the worker's log).

        Read without the lock and written nowhere, so it answers for the state it read;
        the worker applies the trigger again under the lock and may still refuse it if
        the instance moved in between (the refusal is then in its log and the
        instance's history, as before). A rehearsal that fails for any reason other
        than the action's own refusal (``DormantError``) says nothing about the action
        and is left to the worker."""
        with self._read() as conn:
            row = conn.execute(
                select(
                    instances.c.id, instances.c.key, instances.c.version, instances.c.checkpoint
                ).where(instances.c.id == instance_id)
            ).first()
            if row is None:
                raise UnknownInstance(f"no instance has id {instance_id!r}")
            definition, _ = self.deployments.definition(row.key, row.version, conn=conn)
            services = self._decisions.services(conn, definition)
            if isinstance(trigger, MigrateInstance):
                target, _ = self.deployments.definition(row.key, trigger.version, conn=conn)
                services = dataclasses.replace(services, migration_target=target)
        self._compute(definition, checkpoint_of(row), trigger, now=now, services=services)

    def apply_found(
        self, find: Callable[[Connection], Found | None], now: datetime
    ) -> Applied | None:
        """``apply`` for a caller whose first statement in the transaction finds the
        instance AND locks its row (the router folds the message's duplicate check and
        holders lookup into the lock: a statement and a round trip fewer per message).
        ``find`` runs under the transaction; when it returns None nothing is applied
        (None, committed as it is). Errors as ``apply``'s, for the instance found."""
        found: list[Found] = []

        def run() -> Applied | None:
            with self.outbox.published_jobs.riding() as ride, self._tx() as conn:
                what = find(conn)
                if what is None:
                    return None
                found.append(what)
                if what.row.key is None:
                    raise UnknownInstance(f"no instance has id {what.instance_id!r}")
                return self._apply_locked(
                    conn,
                    ride,
                    what.instance_id,
                    what.row,
                    what.trigger,
                    now,
                    what.trigger_id,
                    what.also,
                    None,
                )

        return self._settled(lambda: found[0].instance_id if found else None, now, run)

    def _settled(
        self,
        instance: Callable[[], str | None],
        now: datetime,
        run: Callable[[], Applied | None],
    ) -> Applied | None:
        """Run one apply transaction, then: a checkpoint this dormant cannot read flags
        its instance (and raises on), a duplicate caught at the write answers with the
        row as committed, and a committed step's incidents are logged."""
        try:
            applied = run()
        except (CorruptCheckpoint, CheckpointTooNew) as exc:
            instance_id = instance()
            if instance_id is not None:
                self.failed.flag_checkpoint(instance_id, exc, now)
            raise
        except _Duplicate:
            instance_id = instance()
            assert instance_id is not None
            with self._read() as conn:
                existing = self._existing(conn, instance_id)
            assert existing is not None  # it committed the same trigger id
            applied = existing
        if applied is not None:
            log_raised_incidents(applied)
        return applied

    def _apply(
        self,
        instance_id: str,
        trigger: Trigger,
        now: datetime,
        *,
        trigger_id: str | None = None,
        precondition: Callable[[Connection], bool] | None = None,
        also: Callable[[Writes], None] | None = None,
        inbox_id: str | None = None,
    ) -> Applied:
        """Apply one trigger to one instance: THE transaction (see the module docstring).

        Two statements on PostgreSQL: the locking SELECT (which also answers "is this
        trigger id already applied?"), then every write as one statement
        (persistence/writes.py), with BEGIN and COMMIT two round trips
        (persistence/round_trips.py). The definition comes from this process's cache.

        The order inside is the contract: the row lock is taken before the checkpoint is
        read (a racing trigger waits, then applies to the new state — single flight);
        the duplicate check is answered under the lock, and once more by the processed
        trigger id's primary key at the write: a delivery that waited for the lock
        while another delivery of the same trigger committed read the answer from its
        statement's older snapshot, and its write fails there, is rolled back
        (``_Duplicate``), so two deliveries of one trigger never both apply. Hold rows
        change only together with the checkpoint that implies them, so a failure
        anywhere rolls back both and no wait is ever lost.

        ``precondition`` runs under the lock (the scheduler checks its claim there);
        when it returns False nothing is applied and ``skipped`` is set. ``also`` queues
        more writes into the same statement after a step that changed the instance (the
        router records a delivered message there, saving a commit per message).
        """
        if trigger.repeat_is_stale:
            trigger_id = None  # its repeat is refused by the checkpoint itself
        with self.outbox.published_jobs.riding() as ride, self._tx() as conn:
            row = self._lock(conn, instance_id, trigger_id)
            if precondition is not None and not precondition(conn):
                return Applied(
                    instance_id, int(row.revision), row.status, False, skipped=True, key=row.key
                )
            return self._apply_locked(
                conn, ride, instance_id, row, trigger, now, trigger_id, also, inbox_id
            )

    def _apply_locked(
        self,
        conn: Connection,
        ride: Ride,
        instance_id: str,
        row: Any,
        trigger: Trigger,
        now: datetime,
        trigger_id: str | None,
        also: Callable[[Writes], None] | None,
        inbox_id: str | None,
    ) -> Applied:
        """``_apply`` after the lock: ``row`` is the locked instance's key, version,
        status, revision, checkpoint text and whether ``trigger_id`` is applied (the
        columns of ``_LOCK``, or of a caller's statement that locked it itself)."""
        writes = Writes(conn)
        marked = self._mark_inbox(writes, inbox_id, now)
        if row.duplicate:
            writes.flush(last=True)
            return Applied(
                instance_id,
                int(row.revision),
                row.status,
                False,
                duplicate=True,
                key=row.key,
                inbox_marked=marked,
            )
        # The stored text goes to ``apply`` as it is, with its row's id and key put
        # back in front (persistence/instance_rows.py): its decode is the step's
        # private working state (no copy), and a corrupt or too-new document is
        # refused there with its classified error.
        stored: str = with_row_identity(row.checkpoint, instance_id, row.key)
        if row.status == FLAGGED:
            self.failed.unflag_in(conn, instance_id, decode(stored).status.value)
        definition, _ = self.deployments.definition(row.key, row.version, conn=conn)
        services = self._decisions.services(conn, definition)
        if isinstance(trigger, MigrateInstance):
            target, _ = self.deployments.definition(row.key, trigger.version, conn=conn)
            services = dataclasses.replace(services, migration_target=target)
        step = self._compute(
            definition, stored, trigger, now=now, services=services, keep_holds=True
        )
        if not step.changed:
            old = step.checkpoint  # an unchanged step returns the state as stored
            self._queue_facts(writes, instance_id, old.revision, step.facts, now)
            writes.flush(last=True)
            return Applied(
                instance_id,
                old.revision,
                old.status.value,
                False,
                facts=list(step.facts),
                key=row.key,
                inbox_marked=marked,
            )
        cp = step.checkpoint
        self._queue_checkpoint(writes, instance_id, cp, now)
        before = step.holds_before if step.holds_before is not None else decode_holds(stored)
        return self._write_step(
            writes,
            _StepWrite(
                instance_id,
                before,
                step,
                now,
                trigger_id,
                also=also,
                ride=ride,
                last=True,
                tenant=row.tenant_id,
            ),
        )

    def _queue_checkpoint(
        self, writes: Writes, instance_id: str, cp: Checkpoint, now: datetime
    ) -> None:
        """The checkpoint's own write: the prebuilt UPDATE on PostgreSQL (``_CHECKPOINT``)."""
        document, nodes = encode_row_json(cp), waiting_nodes(cp)
        values = (instance_id, document, cp.status.value, cp.revision, cp.version, now, nodes)
        writes.add_prebuilt(
            _CHECKPOINT,
            dict(zip(_CHECKPOINT_PARAMS, values, strict=True)),
            lambda: (
                update(instances)
                .where(instances.c.id == instance_id)
                .values(
                    checkpoint=_document(document, self.is_postgres),
                    status=cp.status.value,
                    revision=cp.revision,
                    version=cp.version,  # a migration moves the instance's pin
                    updated_at=now,
                    waiting_nodes=_document(nodes, self.is_postgres),
                )
            ),
        )

    def _lock(self, conn: Connection, instance_id: str, trigger_id: str | None) -> Row[Any]:
        """The instance row, locked, and whether ``trigger_id`` is already applied."""
        params = {"instance_id": instance_id, "trigger_id": trigger_id}
        began = time.perf_counter()
        rows = round_trips.first(conn, _LOCK[trigger_id is not None], params)
        row: Row[Any] | None = rows[0] if rows else None
        for observe in LOCK_WAIT_OBSERVERS:
            observe(time.perf_counter() - began)
        if row is None:
            raise UnknownInstance(f"no instance has id {instance_id!r}")
        return row

    @staticmethod
    def _mark_inbox(writes: Writes, inbox_id: str | None, now: datetime) -> bool:
        if inbox_id is None:
            return False
        queue_mark_processed(writes, inbox_id, now)
        return True

    def _write_step(self, writes: Writes, written: _StepWrite) -> Applied:
        """Everything the new checkpoint implies, queued on ``writes`` behind the
        checkpoint's own write and sent as one statement (``_StepWrite``).

        With ``ride``, the statement also deletes the job rows this process published
        since its last write (persistence/published_jobs.py): no transaction of their
        own. Taken here, just before the statement, not at BEGIN: a transaction that
        waited for its row lock would otherwise have held them back from the timer.
        They are other rows than the ones this statement inserts, so one snapshot for
        every CTE is no obstacle; ``= ANY`` of one array parameter keeps the
        statement's compiled form cached (and unrewritten) whatever their number."""
        instance_id, step, now, trigger_id = (
            written.instance_id,
            written.step,
            written.now,
            written.trigger_id,
        )
        old, earlier, ride = written.old, written.earlier, written.ride
        cp = step.checkpoint
        waits_before, waits_after = projected_waits(old), projected_waits(cp)
        buffered = sync_holds(
            writes,
            instance_id,
            cp.process_key,
            waits_before,
            waits_after,
            now,
            tenant=written.tenant,
        )
        sync_incidents(writes, old, cp, written.tenant)
        facts_at = [(cp.revision, now, f) for f in step.facts]
        if earlier is not None:
            before = earlier.step
            facts_at[:0] = [(before.checkpoint.revision, earlier.at, f) for f in before.facts]
        self._queue_facts_at(writes, instance_id, facts_at)
        # Each effect's trigger id names its origin (instance, revision, index), never
        # the row id: SQLite reuses the id of a deleted row, so a CancelChild published
        # as "outbox:7" after the StartChild "outbox:7" was deleted would be dropped by
        # the child as a duplicate of its own start.
        # A non-default tenant rides each payload: a thrown message or signal stays in
        # it, a child starts in it, a job carries it (tasks/outbox.py).
        envelope = {} if written.tenant == DEFAULT_TENANT else {"tenant": written.tenant}
        rows: list[dict[str, Any]] = [
            {
                "kind": kind,
                "payload": payload | {"trigger_id": f"{instance_id}@{cp.revision}.{i}"} | envelope,
                "created_at": now,
            }
            for i, (kind, payload) in enumerate(encode_effect(e) for e in step.effects)
        ]
        # Flow control (persistence/job_flow.py): a job over its type's limits waits
        # instead of being sent; a job whose wait ended frees its slot for the next.
        rows = self.flow.on_step(writes.conn, instance_id, waits_before, waits_after, rows, now)
        if rows:
            writes.add_rows(outbox, rows, returning=(outbox.c.id, "outbox"))
        if trigger_id is not None:
            writes.add_prebuilt(
                _PROCESSED,
                dict(zip(_PROCESSED_PARAMS, (instance_id, trigger_id, now), strict=True)),
                lambda: insert(processed_triggers).values(
                    instance_id=instance_id, trigger_id=trigger_id, at=now
                ),
            )
        marked = self._mark_inbox(writes, written.inbox_id, now)
        if written.also is not None:
            written.also(writes)
        if ride is not None and (published := ride.take()):
            writes.add_prebuilt(
                _DELETE_PUBLISHED,
                {"published_ids": published},
                lambda: delete(outbox).where(outbox.c.id.in_(published)),
            )
        try:
            returned = writes.flush(last=written.last)
        except IntegrityError as exc:
            if trigger_id is not None and _is_processed_conflict(exc):
                raise _Duplicate(trigger_id) from exc
            raise
        ids = sorted(int(i) for i in returned.get("outbox", []))  # written in row order
        outbox_rows = [
            OutboxRow(row_id, r["kind"], r["payload"], now)
            for row_id, r in zip(ids, rows, strict=True)
        ]
        outbox_rows += [b.row for b in buffered]
        return Applied(
            instance_id,
            cp.revision,
            cp.status.value,
            True,
            False,
            outbox_rows,
            [f for _, _, f in facts_at],
            key=cp.process_key,
            inbox_marked=marked,
        )

    @classmethod
    def _queue_facts(
        cls,
        writes: Writes,
        instance_id: str,
        revision: int,
        new: tuple[Fact, ...],
        now: datetime,
    ) -> None:
        cls._queue_facts_at(writes, instance_id, [(revision, now, f) for f in new])

    @staticmethod
    def _queue_facts_at(
        writes: Writes, instance_id: str, new: list[tuple[int, datetime, Fact]]
    ) -> None:
        """Facts, each at its revision and time: one row per step (persistence/fact_rows.py),
        one INSERT."""
        if new:
            writes.add_rows(facts, fact_rows(instance_id, new))

    def record_fact(self, instance_id: str, fact: Fact, now: datetime) -> None:
        """History only (e.g. a joined keyed start, a failed wake): no state changes."""
        with self._tx() as conn:
            rev = conn.execute(
                select(instances.c.revision).where(instances.c.id == instance_id)
            ).scalar()
            writes = Writes(conn)
            self._queue_facts(writes, instance_id, int(rev or 0), (fact,), now)
            writes.flush()

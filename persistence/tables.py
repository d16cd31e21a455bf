"""The schema: one instance row holding the checkpoint, and the rows it implies.

Hold tables (``deadlines``, ``subscriptions``, ``user_tasks``) are a projection of the
checkpoint's armed waits, written by the same transaction as the checkpoint, so
foreign keys add nothing: a hold row and its wait are born and die together.

Every timestamp is stored as UTC and read back timezone-aware (``UtcDateTime``), so
SQLite (which keeps no zone) and PostgreSQL compare and return the same instants.
Migrations (``persistence/migrations``) are written out explicitly; this module is
what they must produce, and a test compares the two.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    DateTime,
    Dialect,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator

from dormant.engine_core.checkpoint import IncidentState, InstanceStatus
from dormant.engine_core.tenants import DEFAULT_TENANT, MAX_TENANT_LENGTH

__all__ = [
    "ACTIVE_STATUSES",
    "INSTANCES_FILLFACTOR",
    "OPEN_INCIDENT_STATES",
    "JsonDoc",
    "JsonText",
    "UtcDateTime",
    "api_jobs",
    "api_keys",
    "batch_items",
    "batches",
    "console_sessions",
    "deadlines",
    "decisions",
    "definitions",
    "deployments",
    "facts",
    "failed_triggers",
    "held_jobs",
    "inbox",
    "instances",
    "job_flow_keys",
    "job_flow_slots",
    "job_flow_types",
    "job_flow_waiting",
    "job_type_pauses",
    "message_correlations",
    "messages",
    "metadata",
    "outbox",
    "processed_triggers",
    "start_timers",
    "subscriptions",
    "tenant_column",
    "trigger_redeliveries",
    "unmatched_messages",
    "user_task_candidates",
    "user_tasks",
]

# Instance statuses that still count as "running" for a keyed message start.
ACTIVE_STATUSES = tuple(status.value for status in InstanceStatus if not status.ended)
# Incident states an operator can still act on (open, or a retry scheduled).
OPEN_INCIDENT_STATES = tuple(state.value for state in IncidentState if not state.closed)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend.

    SQLite has no zone: values are stored naive-in-UTC and given UTC back on read, so
    ``due_at <= :now`` compares the same instants as on PostgreSQL.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} given to the database; pass UTC-aware")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def JsonDoc() -> Any:
    """JSON on SQLite, JSONB on PostgreSQL (indexable, and compared by value)."""
    return JSON().with_variant(JSONB(), "postgresql")


def JsonText() -> Any:
    """JSON kept as the compact text written, on both databases (PostgreSQL ``json``),
    for the documents the engine writes whole on every trigger and reads whole: the
    checkpoint, a step's facts, an outbox row's payload (migration 0024). JSONB's binary
    form is about a fifth larger for such small documents (offsets per key, padded
    numbers), so every write logged more WAL, and reading the checkpoint back as text
    rendered it again; ``json`` stores and returns the text, checked once on its way in.
    Such a column has no equality operator: never DISTINCT, UNION or compare it whole."""
    return JSON()


def _Id() -> Any:
    """An autoincrementing id: BIGINT on PostgreSQL, SQLite's rowid alias on SQLite."""
    return BigInteger().with_variant(Integer(), "sqlite")


def tenant_column() -> Column[str]:
    """The tenant a row belongs to (migration 0022, docs/tenants.md): NOT NULL, and
    ``<default>`` for every row written before tenants or without one, so a database
    that never names a tenant reads exactly as before."""
    return Column(
        "tenant_id",
        String(MAX_TENANT_LENGTH),
        nullable=False,
        server_default=text(f"'{DEFAULT_TENANT}'"),
    )


metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# A deployment: the set of resources (processes, decisions) deployed together, in one
# call. ``resources`` lists each one as it came out of this deployment:
# [{"kind": "process"|"decision", "id", "version", "created", "name"}], where a resource
# that was unchanged names the version an earlier deployment made. The definitions and
# decisions a deployment created carry its key: a call activity (or business rule
# task) bound by "deployment" finds its target through it.
deployments = Table(
    "deployments",
    metadata,
    Column("key", _Id(), primary_key=True, autoincrement=True),
    Column("deployed_at", UtcDateTime, nullable=False),
    Column("resources", JsonDoc(), nullable=False),
    tenant_column(),
)

definitions = Table(
    "definitions",
    metadata,
    Column("key", String(255), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("checksum", String(64), nullable=False),
    Column("source", Text, nullable=False),
    Column("deployed_at", UtcDateTime, nullable=False),
    # Start-event metadata for routing without parsing every model per message:
    # {"message": {name: [node_id, ...]}, "signal": {name: [node_id, ...]},
    #  "none": whether it has a none start event (a call activity needs one)}
    Column("starts", JsonDoc(), nullable=False),
    Column("deployment_key", _Id(), index=True),
    Column("version_tag", String(255)),
    # The tenant that owns this process id: every version of a key has the same one
    # (a deploy for another tenant is refused, docs/tenants.md).
    tenant_column(),
)

# DMN decisions, one row per (decision id, version). ``source`` is the whole .dmn file
# (a decision is read together with the decisions it requires); ``checksum`` is the
# decision's own content, so redeploying a file where only one decision changed bumps
# that decision alone. ``dmn_checksum`` keys the parsed-file cache.
decisions = Table(
    "decisions",
    metadata,
    Column("decision_id", String(255), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("name", String(255)),
    Column("checksum", String(64), nullable=False),
    Column("source", Text, nullable=False),
    Column("dmn_checksum", String(64), nullable=False),
    Column("deployed_at", UtcDateTime, nullable=False),
    Column("deployment_key", _Id(), index=True),
    Column("version_tag", String(255)),
)

# Room left on each page of ``instances`` for the new version of a row, so a checkpoint
# UPDATE that changes no indexed column stays on its page: a HOT update, with no entry
# written in any of the table's indexes (migration 0013, docs/console.md).
INSTANCES_FILLFACTOR = 70

# Camunda Forms (``.form`` files), one row per (form id, version); ``source`` is the
# form's JSON as deployed (persistence/forms.py; migration 0014).
forms = Table(
    "forms",
    metadata,
    Column("form_id", String(255), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("checksum", String(64), nullable=False),
    Column("source", Text, nullable=False),
    Column("deployed_at", UtcDateTime, nullable=False),
    Column("deployment_key", _Id(), index=True),
)

instances = Table(
    "instances",
    metadata,
    Column("id", String(255), primary_key=True),
    Column("key", String(255), nullable=False),
    Column("version", Integer, nullable=False),
    Column("status", String(32), nullable=False),
    Column("business_key", String(255)),
    Column("start_key", String(255)),
    Column("revision", Integer, nullable=False, server_default=text("0")),
    Column("checkpoint", JsonText(), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("parent_id", String(255)),
    # The live tokens' node ids, sorted and distinct, written by the Store with each
    # checkpoint: the console's "a token waits at node X" (migration 0013). A trigger
    # whose tokens stay put writes the same value, which keeps its UPDATE HOT.
    Column("waiting_nodes", JsonDoc(), nullable=False, server_default=text("'[]'")),
    # Its process's tenant, fixed at the start (docs/tenants.md).
    tenant_column(),
    # Keyed message start joins, never duplicates: at most one RUNNING instance per
    # (process key, start key). Two racing starts: the second insert waits for the
    # first to commit and then fails, and the router turns that into a join.
    Index(
        "uq_instances_running_start_key",
        "key",
        "start_key",
        unique=True,
        postgresql_where=text("start_key IS NOT NULL AND status IN ('active', 'active_incidents')"),
        sqlite_where=text("start_key IS NOT NULL AND status IN ('active', 'active_incidents')"),
    ),
    # The console's lists, newest first behind one equality filter (migration 0007).
    Index("ix_instances_created_at_id", "created_at", "id"),
    Index("ix_instances_key_version_created_at_id", "key", "version", "created_at", "id"),
    Index("ix_instances_status_created_at_id", "status", "created_at", "id"),
    # Only the rows that have one (migration 0023): most instances have no business
    # key, and every write of such a row would otherwise add an entry that no query
    # reads (any filter on the column implies it is not null).
    Index(
        "ix_instances_business_key_created_at_id",
        "business_key",
        "created_at",
        "id",
        postgresql_where=text("business_key IS NOT NULL"),
        sqlite_where=text("business_key IS NOT NULL"),
    ),
    # A call activity's children, looked up by their parent (migration 0023).
    Index(
        "ix_instances_parent_id",
        "parent_id",
        postgresql_where=text("parent_id IS NOT NULL"),
        sqlite_where=text("parent_id IS NOT NULL"),
    ),
    # A tenant's lists, newest first (migration 0022).
    Index("ix_instances_tenant_id_created_at_id", "tenant_id", "created_at", "id"),
    postgresql_with={"fillfactor": INSTANCES_FILLFACTOR},
)
# "A token waits at node X" (persistence/console_queries.py): GIN over ``waiting_nodes``
# on PostgreSQL; on the embedded SQLite a plain index the filter cannot use (it scans),
# kept so both schemas have the same indexes. Only rows with a live token (migration
# 0023): an ended instance's row, and its last UPDATE, add no entry. The query repeats
# this predicate word for word, which is how PostgreSQL knows the index answers it.
INSTANCES_WITH_TOKENS = "waiting_nodes <> '[]'"
Index(
    "ix_instances_waiting_nodes",
    instances.c.waiting_nodes,
    postgresql_using="gin",
    postgresql_where=text(f"{INSTANCES_WITH_TOKENS}::jsonb"),
    sqlite_where=text(INSTANCES_WITH_TOKENS),
)

deadlines = Table(
    "deadlines",
    metadata,
    Column("instance_id", String(255), primary_key=True),
    Column("wait_id", String(64), primary_key=True),
    Column("due_at", UtcDateTime, nullable=False, index=True),
    Column("claimed_until", UtcDateTime),
    Column("claim_token", String(64)),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("last_error", Text),
)

# Definition-level deadlines: the timer start events of the LATEST version of each
# process. Scanned with ``deadlines`` by the same beat; firing one starts an instance
# and arms the next repetition in one transaction. A deploy of a new version replaces
# its key's rows in the deploy transaction (persistence/start_timers.py).
start_timers = Table(
    "start_timers",
    metadata,
    Column("key", String(255), primary_key=True),
    Column("node_id", String(255), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("due_at", UtcDateTime, nullable=False, index=True),
    # Cycles: repetitions left after the coming firing (NULL = forever) and the period;
    # a one-shot timer (date, duration) has no interval and is deleted when it fires.
    Column("cycle_remaining", Integer),
    Column("interval_seconds", Float),
    Column("claimed_until", UtcDateTime),
    Column("claim_token", String(64)),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("last_error", Text),
)

subscriptions = Table(
    "subscriptions",
    metadata,
    Column("instance_id", String(255), primary_key=True),
    Column("wait_id", String(64), primary_key=True),
    Column("kind", String(16), nullable=False),  # 'message' | 'signal'
    Column("name", String(255), nullable=False),
    Column("correlation_key", String(255)),
    # The holder's tenant: a message or signal reaches only its own tenant's holders.
    tenant_column(),
    Index("ix_subscriptions_kind_name_key_tenant", "kind", "name", "correlation_key", "tenant_id"),
)

user_tasks = Table(
    "user_tasks",
    metadata,
    Column("task_id", String(320), primary_key=True),
    Column("instance_id", String(255), nullable=False, index=True),
    Column("wait_id", String(64), nullable=False),
    Column("node_id", String(255), nullable=False),
    Column("name", String(255)),
    Column("assignee", String(255), index=True),
    Column("created_at", UtcDateTime, nullable=False),
    Column("due_date", UtcDateTime, index=True),
    Column("follow_up_date", UtcDateTime),
    Column("priority", Integer, nullable=False, server_default=text("50")),
    Column("form_key", String(1024)),
    Column("form_id", String(1024)),
    Column("external_reference", String(1024)),
    # The lifecycle (engine_core TaskState): 'created', or the transition whose
    # listeners run; and why the last transition was denied.
    Column("state", String(16), nullable=False, server_default=text("'created'")),
    Column("denied_reason", String(1024)),
    tenant_column(),
    Index("ix_user_tasks_tenant_id", "tenant_id"),
)

# A user task's candidate users and groups, one row each, so "tasks group G may take"
# is an index lookup; part of the task's projection, written with it.
user_task_candidates = Table(
    "user_task_candidates",
    metadata,
    Column("instance_id", String(255), primary_key=True),
    Column("wait_id", String(64), primary_key=True),
    Column("kind", String(8), primary_key=True),  # 'user' | 'group'
    Column("name", String(255), primary_key=True),
    Index("ix_user_task_candidates_kind_name", "kind", "name"),
)

# A projection of every checkpoint's incidents (open and closed), written by the same
# transaction as the checkpoint: operators list and find incidents without loading
# every instance. The checkpoint stays the truth (cause chain, data snapshot).
incidents = Table(
    "incidents",
    metadata,
    Column("id", String(320), primary_key=True),
    Column("instance_id", String(255), nullable=False, index=True),
    Column("process_key", String(255), nullable=False, index=True),
    Column("node_id", String(255), nullable=False),
    Column("state", String(32), nullable=False, index=True),
    Column("cause_class", String(255), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("first_at", UtcDateTime, nullable=False),
    Column("last_at", UtcDateTime, nullable=False),
    Column("retry_at", UtcDateTime),
    tenant_column(),
    Index("ix_incidents_tenant_id", "tenant_id"),
    Index("ix_incidents_state_process_key_node_id", "state", "process_key", "node_id"),
    Index("ix_incidents_last_at_id", "last_at", "id"),
)

facts = Table(
    "facts",
    metadata,
    Column("id", _Id(), primary_key=True, autoincrement=True),
    Column("instance_id", String(255), nullable=False, index=True),
    Column("revision", Integer),
    Column("at", UtcDateTime, nullable=False),
    Column("kind", String(64), nullable=False),
    Column("details", JsonText(), nullable=False),
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", _Id(), primary_key=True, autoincrement=True),
    Column("kind", String(64), nullable=False),
    Column("payload", JsonText(), nullable=False),
    # Not indexed (migration 0023): the sweep reads the oldest rows first, in id order,
    # which the primary key gives; every job row paid an entry no query needed.
    Column("created_at", UtcDateTime, nullable=False),
    Column("published_at", UtcDateTime),
    # A row the relay could not publish, parked with its error so the sweep goes on
    # (migration 0017, persistence/parked.py).
    Column("parked_at", UtcDateTime),
    Column("parked_error", Text),
)

processed_triggers = Table(
    "processed_triggers",
    metadata,
    Column("instance_id", String(255), primary_key=True),
    Column("trigger_id", String(255), primary_key=True),
    Column("at", UtcDateTime, nullable=False),
    # The retention sweep's range (persistence/processed.py, migration 0013): BRIN on
    # PostgreSQL, whose summary of the growing end costs an insert nothing; a B-tree on
    # the embedded SQLite.
    Index("ix_processed_triggers_at", "at", postgresql_using="brin"),
)

# A message id is its producer's: unique within its tenant (migration 0022), so one
# tenant's id never makes another tenant's message a duplicate.
messages = Table(
    "messages",
    metadata,
    Column("message_id", String(255), primary_key=True),
    Column(
        "tenant_id",
        String(MAX_TENANT_LENGTH),
        primary_key=True,
        server_default=text(f"'{DEFAULT_TENANT}'"),
    ),
    Column("name", String(255), nullable=False),
    Column("correlation_key", String(255)),
    Column("variables", JsonDoc(), nullable=False),
    Column("expires_at", UtcDateTime),
    Column("received_at", UtcDateTime, nullable=False),
    Column("consumed_by_instance", String(255)),
    Column("consumed_at", UtcDateTime),
    # How many processes the message reached when it was recorded (its receipt's N;
    # NULL on rows written before migration 0019).
    Column("correlations", Integer),
    Index("ix_messages_name_key", "name", "correlation_key"),
)

# Recent messages that went nowhere (no holder, no start, no TTL): written by the
# Router in the transaction that drops the message, trimmed there by count and age
# (persistence/unmatched.py, docs/limits.md).
unmatched_messages = Table(
    "unmatched_messages",
    metadata,
    Column("id", _Id(), primary_key=True, autoincrement=True),
    Column("message_id", String(255), nullable=False, index=True),
    Column("name", String(255), nullable=False, index=True),
    Column("correlation_key", String(255)),
    Column("at", UtcDateTime, nullable=False, index=True),
    tenant_column(),
)

# The processes a message has correlated to, each once (Zeebe's cardinality): written
# with the message's own record at publish and by each buffered delivery, whose
# primary key is what lets only one instance of a process take it from the buffer.
message_correlations = Table(
    "message_correlations",
    metadata,
    Column("message_id", String(255), primary_key=True),
    Column("process_key", String(255), primary_key=True),
    Column("instance_id", String(255), nullable=False),
    Column("at", UtcDateTime, nullable=False),
)

inbox = Table(
    "inbox",
    metadata,
    Column("id", String(255), primary_key=True),
    Column("kind", String(64), nullable=False),
    Column("payload", JsonDoc(), nullable=False),
    Column("created_at", UtcDateTime, nullable=False, index=True),
    Column("processed_at", UtcDateTime),
    # When the sweep last re-published it: a broker outage must not make every sweep
    # re-send every waiting trigger (a storm of duplicates that slows the recovery).
    Column("republished_at", UtcDateTime),
    # A row the sweep could not send again, parked with its error so the sweep goes
    # on (migration 0017, persistence/parked.py).
    Column("parked_at", UtcDateTime),
    Column("parked_error", Text),
    # Deliveries after the first that were counted (migration 0020, persistence/
    # deliveries.py): the sweep's re-sends and the broker's flagged redeliveries.
    Column("redeliveries", Integer, nullable=False, server_default="0"),
    # The last error known of a delivery that died (a hard time limit's, written by the
    # worker's main process): what a poison trigger is kept with.
    Column("last_error", Text),
)
# Only the rows still waiting (migration 0009): the sweep and the backlog gauge read
# these, and processed rows are kept as the producer's record.
Index(
    "ix_inbox_unprocessed",
    inbox.c.created_at,
    postgresql_where=inbox.c.processed_at.is_(None),
    sqlite_where=inbox.c.processed_at.is_(None),
)

# The redeliveries of a trigger with no inbox row, keyed by its trigger id (migration
# 0020, persistence/deliveries.py): a row only once the broker delivered it again.
trigger_redeliveries = Table(
    "trigger_redeliveries",
    metadata,
    Column("trigger_id", String(255), primary_key=True),
    Column("redeliveries", Integer, nullable=False),
    Column("last_error", Text),
    Column("updated_at", UtcDateTime, nullable=False, index=True),
)

# Triggers that could not be applied, kept for an operator (persistence/failed_triggers.py).
# ``body`` is TEXT holding JSON, never JSONB: a trigger refused for a NUL character or a
# nesting depth JSONB cannot hold must still be kept whole.
failed_triggers = Table(
    "failed_triggers",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("task", String(255), nullable=False),
    Column("routing_key", Text, nullable=False),
    Column("instance_id", String(255), index=True),
    Column("trigger_id", Text),
    Column("body", Text, nullable=False),
    Column("error_class", String(255), nullable=False),
    Column("error", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("first_at", UtcDateTime, nullable=False),
    Column("last_at", UtcDateTime, nullable=False, index=True),
)

# Bulk operations (persistence/batches.py): one durable row per batch with what selected
# it, and one row per selected target, so a batch survives any restart, is watched by
# reading two rows, and re-running it applies nothing twice (each item's trigger id).
batches = Table(
    "batches",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("operation", String(32), nullable=False),
    Column("selector", JsonDoc(), nullable=False),
    Column("params", JsonDoc(), nullable=False),
    Column("state", String(16), nullable=False, index=True),
    Column("selected", Integer, nullable=False),
    Column("applied", Integer, nullable=False, server_default=text("0")),
    Column("refused", Integer, nullable=False, server_default=text("0")),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime),
    Column("claimed_until", UtcDateTime),
    Column("claim_token", String(64)),
)

batch_items = Table(
    "batch_items",
    metadata,
    Column("batch_id", String(64), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("target_id", String(320), nullable=False),
    Column("instance_id", String(255)),
    Column("outcome", String(16)),  # NULL while pending, then 'applied' or 'refused'
    Column("reason", Text),
    Column("done_at", UtcDateTime),
)

# Paused job types (persistence/job_pause.py): a job of a paused type is not sent; its
# outbox row moves to ``held_jobs`` and goes back to the outbox when the type resumes.
job_type_pauses = Table(
    "job_type_pauses",
    metadata,
    Column("job_type", String(255), primary_key=True),
    Column("paused_at", UtcDateTime, nullable=False),
)

held_jobs = Table(
    "held_jobs",
    metadata,
    Column("id", _Id(), primary_key=True, autoincrement=True),
    Column("job_type", String(255), nullable=False, index=True),
    Column("payload", JsonDoc(), nullable=False),
    Column("held_at", UtcDateTime, nullable=False),
)

# Flow control of job types (persistence/job_flow.py, docs/flow-control.md; migration
# 0021). One row per limited type (its counts, its run-time limits if an operator set
# them, its pause) and per key of it; a slot per job out; a waiting row per job that
# was over a limit, granted round-robin across keys when a slot frees.
job_flow_types = Table(
    "job_flow_types",
    metadata,
    Column("job_type", String(255), primary_key=True),
    Column("running", Integer, nullable=False, default=0),
    Column("waiting", Integer, nullable=False, default=0),
    # every grant of the type counts here; a key's ``last_grant`` is the count then
    Column("grants", BigInteger, nullable=False, default=0),
    Column("paused_until", UtcDateTime),
    Column("tokens", Float),
    Column("tokens_at", UtcDateTime),
    # the operator's limits (``dormant job-types set-limit``), over DORMANT_JOB_TYPES
    Column("limits", JsonDoc()),
    Column("limits_set_at", UtcDateTime),
)

job_flow_keys = Table(
    "job_flow_keys",
    metadata,
    Column("job_type", String(255), primary_key=True),
    Column("flow_key", String(255), primary_key=True),
    Column("running", Integer, nullable=False, default=0),
    Column("waiting", Integer, nullable=False, default=0),
    Column("last_grant", BigInteger, nullable=False, default=0),
    Column("paused_until", UtcDateTime),
    Column("tokens", Float),
    Column("tokens_at", UtcDateTime),
)

job_flow_slots = Table(
    "job_flow_slots",
    metadata,
    Column("instance_id", String(255), primary_key=True),
    Column("wait_id", String(255), primary_key=True),
    Column("job_type", String(255), nullable=False),
    Column("flow_key", String(255), nullable=False),
    Column("payload", JsonDoc(), nullable=False),
    Column("granted_at", UtcDateTime, nullable=False),
)

job_flow_waiting = Table(
    "job_flow_waiting",
    metadata,
    Column("id", _Id(), primary_key=True, autoincrement=True),
    Column("job_type", String(255), nullable=False),
    Column("flow_key", String(255), nullable=False),
    Column("instance_id", String(255), nullable=False),
    Column("wait_id", String(255), nullable=False),
    Column("payload", JsonDoc(), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Index("job_flow_waiting_key", "job_type", "flow_key", "id"),
    Index("job_flow_waiting_wait", "instance_id", "wait_id"),
)

# The console's signed-in sessions (persistence/console_sessions.py): the cookie names a
# row; signing out deletes it.
console_sessions = Table(
    "console_sessions",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("started_at", UtcDateTime, nullable=False),
    Column("ends_at", UtcDateTime, nullable=False),
)

# The Camunda 8 REST API (tasks/api, docs/camunda-api.md) names everything by a numeric
# key (a Java long). ``api_keys`` is the one home of that name: one row per dormant id
# of a kind (instance, process definition, job, user task, incident, deployment), its
# key handed out once and never changed (persistence/api_keys.py).
api_keys = Table(
    "api_keys",
    metadata,
    Column("key", _Id(), primary_key=True, autoincrement=True),
    Column("kind", String(32), nullable=False),
    Column("dormant_id", String(320), nullable=False),
    UniqueConstraint("kind", "dormant_id"),
)

# Jobs of a type served by API workers (``DORMANT_JOB_TYPES`` ``{"api": true}``): the
# dispatch writes the job here instead of sending it to Celery; an activation takes it
# (``worker``, ``deadline``); its completion, failure or error deletes it.
api_jobs = Table(
    "api_jobs",
    metadata,
    Column("key", BigInteger, primary_key=True, autoincrement=False),
    Column("job_type", String(255), nullable=False),
    Column("instance_id", String(255), nullable=False),
    Column("wait_id", String(255), nullable=False),
    Column("node_id", String(255), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("variables", JsonDoc(), nullable=False),
    Column("headers", JsonDoc(), nullable=False),
    Column("worker", String(255)),
    Column("deadline", UtcDateTime),
    Column("created_at", UtcDateTime, nullable=False),
    # Its instance's tenant: an activation may ask for chosen tenants' jobs only.
    tenant_column(),
    Index("ix_api_jobs_job_type_worker", "job_type", "worker"),
    Index("ix_api_jobs_instance_id_wait_id", "instance_id", "wait_id"),
)

# The audit trail of operator actions (persistence/audit.py, docs/operations.md "Audit
# trail"): append-only; a row is written when an action is accepted and another with its
# outcome, both naming one ``command_id``. ``params`` never holds a variable's value.
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", _Id(), primary_key=True, autoincrement=True),
    Column("command_id", String(64), nullable=False, index=True),
    Column("at", UtcDateTime, nullable=False, index=True),
    Column("actor", String(255), nullable=False, index=True),
    Column("source", String(16), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", String(320)),
    Column("instance_id", String(255), index=True),
    Column("params", JsonDoc(), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("detail", Text),
)

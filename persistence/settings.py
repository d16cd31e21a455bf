"""Settings: where the database and broker are, and the few timings the shell uses.

Read once from the environment (``DORMANT_*``) by every entry point, or passed
explicitly. Frozen, so a Store or a worker cannot drift from what it was started with.
A bad value is refused at start-up with ``InvalidSetting`` naming the variable and the
value, never discovered later as a confusing failure deep in a transaction.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dormant.engine_core.errors import InvalidSetting
from dormant.engine_core.inputs import DEFAULT_LIMITS, Limits
from dormant.engine_core.job_flow import FlowLimits
from dormant.engine_core.model import RetryPolicy
from dormant.engine_core.services import JobTypeSettings

__all__ = ["ENV_VARS", "Settings", "normalise_database_url", "parse_bool"]


class JobTypeSetting(BaseModel):
    """One job type's own timeout and retry backoff (``DORMANT_JOB_TYPES``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_seconds: PositiveFloat | None = None
    retry_backoff_seconds: PositiveFloat | None = None
    # Run a job of this type in the worker that dispatched it, right after the trigger
    # commits, instead of through the broker (tasks/jobs.py, "Eager jobs").
    eager: bool = False
    # Served by the Camunda 8 REST API's job workers (``POST /v2/jobs/activation``,
    # docs/camunda-api.md): a job of this type is never sent to Celery; it waits in
    # ``api_jobs`` for an activation (persistence/api_keys.py).
    api: bool = False
    # Flow control (docs/flow-control.md, engine_core/job_flow.py): jobs out at once for
    # the type and per key (``key``: FEEL over the job's variables, e.g. "=customerId"),
    # and jobs started per ``rate_period_seconds`` for the type and per key.
    concurrency: int | None = Field(default=None, ge=1)
    key: str | None = Field(default=None, min_length=1, max_length=1000)
    key_concurrency: int | None = Field(default=None, ge=1)
    rate: int | None = Field(default=None, ge=1)
    key_rate: int | None = Field(default=None, ge=1)
    rate_period_seconds: PositiveFloat = 1.0

    @model_validator(mode="after")
    def _flow(self) -> JobTypeSetting:
        try:
            self.flow_limits  # noqa: B018 - checked once here, with its one-line error
        except InvalidSetting as exc:
            raise ValueError(str(exc)) from exc
        return self

    @property
    def flow_limits(self) -> FlowLimits:
        return FlowLimits(
            concurrency=self.concurrency,
            key=self.key,
            key_concurrency=self.key_concurrency,
            rate=self.rate,
            key_rate=self.key_rate,
            rate_period_seconds=self.rate_period_seconds,
        )

    @field_validator("eager", mode="before")
    @classmethod
    def _eager(cls, value: Any) -> bool:
        try:
            return parse_bool("eager", value)
        except InvalidSetting as exc:
            raise ValueError(str(exc)) from exc


# field name -> environment variable
ENV_VARS: dict[str, str] = {
    "database_url": "DORMANT_DATABASE_URL",
    "broker_url": "DORMANT_BROKER_URL",
    "deadline_claim_seconds": "DORMANT_DEADLINE_CLAIM_SECONDS",
    "wake_retry_backoff_seconds": "DORMANT_WAKE_RETRY_BACKOFF_SECONDS",
    "outbox_sweep_after_seconds": "DORMANT_OUTBOX_SWEEP_AFTER_SECONDS",
    "outbox_redeliver_after_seconds": "DORMANT_OUTBOX_REDELIVER_AFTER_SECONDS",
    "job_retry_backoff_seconds": "DORMANT_JOB_RETRY_BACKOFF_SECONDS",
    "job_timeout_seconds": "DORMANT_JOB_TIMEOUT_SECONDS",
    "incident_retry_attempts": "DORMANT_INCIDENT_RETRY_ATTEMPTS",
    "incident_retry_backoff_seconds": "DORMANT_INCIDENT_RETRY_BACKOFF_SECONDS",
    "trigger_soft_time_limit_seconds": "DORMANT_TRIGGER_SOFT_TIME_LIMIT_SECONDS",
    "trigger_time_limit_seconds": "DORMANT_TRIGGER_TIME_LIMIT_SECONDS",
    "trigger_batch_max": "DORMANT_TRIGGER_BATCH_MAX",
    "job_batch_max": "DORMANT_JOB_BATCH_MAX",
    "job_batch_fast_seconds": "DORMANT_JOB_BATCH_FAST_SECONDS",
    "job_batch_seconds": "DORMANT_JOB_BATCH_SECONDS",
    "db_statement_timeout_seconds": "DORMANT_DB_STATEMENT_TIMEOUT_SECONDS",
    "db_idle_in_transaction_timeout_seconds": "DORMANT_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS",
    "worker_shutdown_timeout_seconds": "DORMANT_WORKER_SHUTDOWN_TIMEOUT_SECONDS",
    "max_variables_bytes": "DORMANT_MAX_VARIABLES_BYTES",
    "max_variables_depth": "DORMANT_MAX_VARIABLES_DEPTH",
    "batch_claim_seconds": "DORMANT_BATCH_CLAIM_SECONDS",
    "redis_visibility_timeout": "DORMANT_REDIS_VISIBILITY_TIMEOUT",
    "processed_trigger_retention_seconds": "DORMANT_PROCESSED_TRIGGER_RETENTION_SECONDS",
    "audit_retention_days": "DORMANT_AUDIT_RETENTION_DAYS",
    "job_types": "DORMANT_JOB_TYPES",
    "priority_levels": "DORMANT_PRIORITY_LEVELS",
    "priority_variable": "DORMANT_PRIORITY_VARIABLE",
    "step_budget": "DORMANT_STEP_BUDGET",
    "max_model_bytes": "DORMANT_MAX_MODEL_BYTES",
    "max_loop_items": "DORMANT_MAX_LOOP_ITEMS",
    "max_checkpoint_bytes": "DORMANT_MAX_CHECKPOINT_BYTES",
    "max_tokens": "DORMANT_MAX_TOKENS",
    "unmatched_messages_kept": "DORMANT_UNMATCHED_MESSAGES_KEPT",
    "max_deliveries": "DORMANT_MAX_DELIVERIES",
    "unmatched_messages_retention_seconds": "DORMANT_UNMATCHED_MESSAGES_RETENTION_SECONDS",
    "transient_retries": "DORMANT_TRANSIENT_RETRIES",
    "transient_backoff_seconds": "DORMANT_TRANSIENT_BACKOFF_SECONDS",
    "transient_backoff_max_seconds": "DORMANT_TRANSIENT_BACKOFF_MAX_SECONDS",
    "worker_lane": "DORMANT_WORKER_LANE",
    "lane_budget_seconds": "DORMANT_LANE_BUDGET_SECONDS",
    "lane_time_limit_seconds": "DORMANT_LANE_TIME_LIMIT_SECONDS",
}

# The processed trigger ids' retention is at least this many times the longest
# redelivery delay (the Redis visibility timeout, the outbox relay's re-send).
PROCESSED_RETENTION_FACTOR = 10
# The spellings a boolean setting may take (compared without case); anything else is
# refused rather than read as false: ``True`` silently meaning "off" is how a Secure
# cookie flag goes missing in production.
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def parse_bool(name: str, raw: object) -> bool:
    """The one reading of a boolean setting: ``1/true/yes/on`` or ``0/false/no/off``
    (any case; empty is false), a JSON boolean as itself, anything else an
    ``InvalidSetting`` naming the setting and the value."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str):
        word = raw.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    raise InvalidSetting(
        f"{name}={raw!r} is not a boolean: use one of 1, true, yes, on or 0, false, no, off"
    )


# The most transient retries a setting may ask for: past it a trigger that cannot heal
# waits hours at the backoff cap before a person hears of it.
TRANSIENT_RETRIES_CEILING = 100
# Past this the JSON encoder and decoder themselves would recurse too deep.
MAX_DEPTH_CEILING = 500
# The most triggers one task applies in one transaction: past a few dozen the commit
# saved is noise, while every trigger in the batch waits for the slowest one's savepoint.
MAX_TRIGGER_BATCH = 256
# The bounds of a job batch's time settings (tasks/job_batches.py).
_JOB_BATCH_TIME_BOUNDS = {"job_batch_fast_seconds": 1.0, "job_batch_seconds": 60.0}


def normalise_database_url(url: str) -> str:
    """Accept the spellings users paste (``postgres://``, ``postgresql://``) and pin
    the driver to psycopg 3, the one dormant is tested with."""
    url = url.strip()
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


class Settings(BaseModel):
    """Everything configurable about the shell. ``Settings.from_env()`` is the usual door."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    database_url: str = "sqlite:///dormant.sqlite3"
    broker_url: str = "sqla+sqlite:///dormant-broker.sqlite3"
    # How long a claimed deadline belongs to its claimer; after that another scan may
    # claim it again (the claimer died between claim and fire).
    deadline_claim_seconds: float = 30.0
    # How far a failed fire pushes the deadline (docs/waits.md); default: half the claim.
    wake_retry_backoff_seconds: float | None = None
    # Outbox rows older than this are published by the sweeper (the publisher died).
    outbox_sweep_after_seconds: float = 5.0
    # A follow-up trigger published but not yet consumed after this long is published
    # again (the broker lost it: a Redis restart without persistence). Harmless when it
    # was merely slow: the consumer drops a trigger id it has already applied.
    outbox_redeliver_after_seconds: float = 60.0
    job_retry_backoff_seconds: float = 1.0
    # A dispatched job with no result after this long is dispatched again (a lost job
    # message, a worker that vanished): the engine's answer to "at least once".
    job_timeout_seconds: float = 300.0
    # The engine-wide incident retry policy, for activities without their own
    # <dormant:retryPolicy>: 0 attempts (the default) means no automatic retry, so every
    # incident waits for an operator (docs/incidents.md, Retry policies).
    incident_retry_attempts: int = 0
    incident_retry_backoff_seconds: float = 60.0
    # Wall-clock bounds on every trigger task (Celery soft/hard limits, prefork pool).
    # Past the soft one the task gets SoftTimeLimitExceeded, which the trigger tasks'
    # seam keeps as a failed trigger; the hard one kills the pool process, and the
    # trigger is redelivered (acks late). Both stay under the Redis visibility timeout
    # (60 s), past which a running trigger would be delivered a second time anyway.
    trigger_soft_time_limit_seconds: float = 30.0
    trigger_time_limit_seconds: float = 45.0
    # How many queued triggers one trigger task may apply in one transaction, each in a
    # savepoint of its own (tasks/drain.py; docs/internals.md, "Several triggers per
    # task"). 1 turns batching off; an idle queue gives batches of 1 anyway.
    trigger_batch_max: int = 16
    # How many queued jobs of proven-fast types one job task may run in its pool
    # process, their results applied in one transaction (tasks/job_batches.py;
    # docs/internals.md, "Several jobs per task"). 1 turns it off.
    job_batch_max: int = 16
    # A job type is taken so once each of its last three runs in the process took at
    # most this long; a batch gives back, unrun, the jobs whose turn comes after
    # job_batch_seconds.
    job_batch_fast_seconds: float = 0.01
    job_batch_seconds: float = 0.05
    # On every engine connection to PostgreSQL (applied at connect): no statement, lock
    # wait included, runs longer than this, and no session sits idle inside an open
    # transaction (holding an instance's row lock) longer than that.
    db_statement_timeout_seconds: float = 15.0
    db_idle_in_transaction_timeout_seconds: float = 30.0
    # After SIGTERM a worker lets running triggers finish this long, then stops them
    # (unacknowledged, so they are delivered again) and exits.
    worker_shutdown_timeout_seconds: float = 10.0
    # What one trigger's variables, or one variable a model writes, may weigh and how
    # deep it may nest (docs/limits.md, "Inputs checked at the edge").
    max_variables_bytes: int = DEFAULT_LIMITS.max_bytes
    max_variables_depth: int = DEFAULT_LIMITS.max_depth
    # How long a bulk batch belongs to its runner without a renewal; after that the
    # sweep hands it to another worker (its runner died).
    batch_claim_seconds: float = 30.0
    # Redis only: seconds before the broker hands a task whose worker never acknowledged
    # it (dead or paused) to another worker. A trigger running longer is delivered
    # twice, harmlessly (trigger ids); the fault suite shortens it to pause past it.
    redis_visibility_timeout: float = 60.0
    # How long an applied trigger's id is kept to refuse its redelivery
    # (persistence/processed.py): far past the longest a delivery of an applied trigger
    # can arrive (the broker's redelivery after the visibility timeout, the outbox
    # relay's re-send), at least PROCESSED_RETENTION_FACTOR times both (docs/limits.md).
    processed_trigger_retention_seconds: float = 86_400.0
    # How long the audit trail keeps an operator action's rows (persistence/audit.py):
    # the housekeeping sweep deletes older ones (docs/limits.md, "Audit trail").
    audit_retention_days: float = 90.0
    # Per job type: {"charge-card": {"timeout_seconds": 600, "retry_backoff_seconds": 5,
    # "eager": true}} (JSON in the environment); a type not named uses the two settings
    # above and goes through the broker.
    job_types: dict[str, JobTypeSetting] = Field(default_factory=dict)
    # Instance priorities (docs/flow-control.md, "Priorities"): 0 is off; N gives the
    # broker's queues N + 1 levels (RabbitMQ x-max-priority, Redis priority steps), and a
    # start's or a job's message its priority from the variable ``priority_variable``.
    priority_levels: int = Field(default=0, ge=0, le=10)
    priority_variable: str = Field(default="priority", min_length=1, max_length=255)
    # Node entries one trigger may make before the instance commits and continues in a
    # follow-up trigger (docs/limits.md, "Step budget").
    step_budget: int = 1000
    # The largest BPMN/DMN file a deploy reads (Client.deploy, ``dormant deploy``); a
    # bigger one is refused before it is read whole (docs/limits.md, "Models").
    max_model_bytes: int = 4 * 1024 * 1024
    # Inner instances of one multi-instance activity; more is an incident there.
    max_loop_items: int = 10_000
    # What one instance may hold: its variables and multi-instance outputs (about, as
    # encoded), and its live tokens; past either, an incident at the node that would
    # grow it (docs/limits.md, "Every bound at a glance").
    max_checkpoint_bytes: int = DEFAULT_LIMITS.max_checkpoint_bytes
    max_tokens: int = DEFAULT_LIMITS.max_tokens
    # The record of recent messages that went nowhere (persistence/unmatched.py): at
    # most this many rows, none older than the retention; each drop trims it in its
    # own transaction, so the table never grows past the bound (docs/limits.md).
    unmatched_messages_kept: int = 1000
    unmatched_messages_retention_seconds: float = 86_400.0
    # Deliveries of one trigger that may start; the next one is not applied: the trigger
    # is kept as a PoisonTrigger (persistence/deliveries.py; docs/limits.md, "What an
    # operator sees: poison triggers").
    max_deliveries: int = 3
    # A transient failure (tasks/transient.py: a lost connection, a deadlock, a lock or
    # statement timeout, the broker unreachable) is retried this many times after the
    # first try, each after a jittered wait that doubles from the base up to the cap,
    # before it is kept like a deterministic one (docs/limits.md, "Transient failures").
    # The defaults ride out about a minute and a half of outage.
    transient_retries: int = 8
    transient_backoff_seconds: float = 0.5
    transient_backoff_max_seconds: float = 15.0
    # Which triggers this worker serves (tasks/lanes.py; docs/operations.md, "Two
    # lanes"): ``all`` both queues with the full limits; ``main`` the usual queues, a
    # trigger whose computation outlasts ``lane_budget_seconds``, or whose delivery is
    # a redelivery, moved to the quarantine queue; ``quarantine`` that queue only.
    worker_lane: Literal["all", "main", "quarantine"] = "all"
    lane_budget_seconds: float = Field(default=0.5, gt=0)
    # A main-lane worker's hard time limit on a trigger task (a trigger or a batch of
    # them), when under DORMANT_TRIGGER_TIME_LIMIT_SECONDS: what no budget interrupts
    # (a call into C, a long lock wait) holds a main-lane pool process this long at most.
    lane_time_limit_seconds: float = Field(default=5.0, gt=0)

    @field_validator("audit_retention_days")
    @classmethod
    def _days(cls, value: float) -> float:
        if not value > 0:
            raise ValueError("must be a positive number of days")
        return value

    @field_validator("database_url", "broker_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value or not value.strip() or "://" not in value:
            raise ValueError("must be a URL such as postgresql://user@host/db")
        return value.strip()

    @field_validator("database_url")
    @classmethod
    def _normalise(cls, value: str) -> str:
        return normalise_database_url(value)

    @field_validator(
        "deadline_claim_seconds",
        "wake_retry_backoff_seconds",
        "outbox_sweep_after_seconds",
        "outbox_redeliver_after_seconds",
        "job_retry_backoff_seconds",
        "job_timeout_seconds",
        "incident_retry_backoff_seconds",
        "trigger_soft_time_limit_seconds",
        "trigger_time_limit_seconds",
        "db_statement_timeout_seconds",
        "db_idle_in_transaction_timeout_seconds",
        "worker_shutdown_timeout_seconds",
        "batch_claim_seconds",
        "redis_visibility_timeout",
        "processed_trigger_retention_seconds",
        "unmatched_messages_retention_seconds",
        "transient_backoff_seconds",
        "transient_backoff_max_seconds",
    )
    @classmethod
    def _positive(cls, value: float | None) -> float | None:
        if value is not None and not value > 0:
            raise ValueError("must be a positive number of seconds")
        return value

    @field_validator("job_types", mode="before")
    @classmethod
    def _job_types_json(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError(f"must be a JSON object of job types: {exc}") from exc
        return value

    @property
    def job_type_settings(self) -> dict[str, JobTypeSettings]:
        """The per-job-type settings as the core takes them (``Services.job_types``)."""
        return {
            name: JobTypeSettings(s.timeout_seconds, s.retry_backoff_seconds)
            for name, s in self.job_types.items()
        }

    @field_validator(
        "step_budget", "max_loop_items", "max_tokens", "unmatched_messages_kept", "max_deliveries"
    )
    @classmethod
    def _budget(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be a whole number, 1 or more")
        return value

    @field_validator("max_model_bytes", "max_checkpoint_bytes")
    @classmethod
    def _model_bytes(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be a whole number of bytes, 1 or more")
        return value

    @field_validator("incident_retry_attempts")
    @classmethod
    def _attempts(cls, value: int) -> int:
        if value < 0:
            raise ValueError("must be a whole number of attempts, 0 (no automatic retry) or more")
        return value

    @field_validator("transient_retries")
    @classmethod
    def _transient_retries(cls, value: int) -> int:
        if not 0 <= value <= TRANSIENT_RETRIES_CEILING:
            raise ValueError(
                "must be a whole number of retries from 0 (keep at the first transient "
                f"failure) to {TRANSIENT_RETRIES_CEILING}"
            )
        return value

    @field_validator("max_variables_bytes")
    @classmethod
    def _bytes(cls, value: int) -> int:
        if value < 1024:
            raise ValueError("must be a whole number of bytes, at least 1024")
        return value

    @field_validator("trigger_batch_max", "job_batch_max")
    @classmethod
    def _batch(cls, value: int, info: ValidationInfo) -> int:
        if not 1 <= value <= MAX_TRIGGER_BATCH:
            what = "triggers" if info.field_name == "trigger_batch_max" else "jobs"
            raise ValueError(f"must be a whole number of {what} from 1 to {MAX_TRIGGER_BATCH}")
        return value

    @field_validator("job_batch_fast_seconds", "job_batch_seconds")
    @classmethod
    def _job_batch_time(cls, value: float, info: ValidationInfo) -> float:
        # Past a second a "fast" job holds the results before it as long as a slow one.
        most = _JOB_BATCH_TIME_BOUNDS[str(info.field_name)]
        if not 0 < value <= most:
            raise ValueError(f"must be more than 0 and at most {most} seconds")
        return value

    @field_validator("max_variables_depth")
    @classmethod
    def _depth(cls, value: int) -> int:
        if not 2 <= value <= MAX_DEPTH_CEILING:
            raise ValueError(f"must be a whole number of levels from 2 to {MAX_DEPTH_CEILING}")
        return value

    @property
    def limits(self) -> Limits:
        """The input bounds the core, the Store and the Client check against."""
        return Limits(
            max_bytes=self.max_variables_bytes,
            max_depth=self.max_variables_depth,
            max_checkpoint_bytes=self.max_checkpoint_bytes,
            max_tokens=self.max_tokens,
        )

    @model_validator(mode="after")
    def _hard_after_soft(self) -> Settings:
        # The soft limit is the one that ends as a visible failed trigger; a hard limit
        # at or below it would kill the process before the soft one could be handled.
        if not self.trigger_time_limit_seconds > self.trigger_soft_time_limit_seconds:
            raise ValueError(
                "DORMANT_TRIGGER_TIME_LIMIT_SECONDS must be greater than "
                "DORMANT_TRIGGER_SOFT_TIME_LIMIT_SECONDS"
            )
        return self

    @model_validator(mode="after")
    def _backoff_cap_past_base(self) -> Settings:
        if self.transient_backoff_max_seconds < self.transient_backoff_seconds:
            raise ValueError(
                "DORMANT_TRANSIENT_BACKOFF_MAX_SECONDS must be at least "
                f"DORMANT_TRANSIENT_BACKOFF_SECONDS ({self.transient_backoff_seconds:g} s here)"
            )
        return self

    @model_validator(mode="after")
    def _retention_past_redelivery(self) -> Settings:
        # A trigger id swept while its trigger can still be delivered again would let
        # that delivery apply twice: the retention must outlast every redelivery path.
        floor = PROCESSED_RETENTION_FACTOR * max(
            self.redis_visibility_timeout, self.outbox_redeliver_after_seconds
        )
        if self.processed_trigger_retention_seconds < floor:
            raise ValueError(
                "DORMANT_PROCESSED_TRIGGER_RETENTION_SECONDS must be at least "
                f"{PROCESSED_RETENTION_FACTOR} times DORMANT_REDIS_VISIBILITY_TIMEOUT and "
                f"DORMANT_OUTBOX_REDELIVER_AFTER_SECONDS ({floor:g} s here)"
            )
        return self

    @model_validator(mode="after")
    def _derive_backoff(self) -> Settings:
        # Derived from the claim rather than a constant, so an operator who lengthens
        # the claim does not get a retry cadence that fights it.
        if self.wake_retry_backoff_seconds is None:
            object.__setattr__(self, "wake_retry_backoff_seconds", self.deadline_claim_seconds / 2)
        return self

    @property
    def wake_backoff(self) -> float:
        """The resolved wake retry backoff (never None after validation)."""
        assert self.wake_retry_backoff_seconds is not None
        return self.wake_retry_backoff_seconds

    @property
    def incident_retry_policy(self) -> RetryPolicy | None:
        """The engine default for ``Services``: None unless attempts were set."""
        if self.incident_retry_attempts == 0:
            return None
        return RetryPolicy(self.incident_retry_attempts, self.incident_retry_backoff_seconds)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``DORMANT_*`` variables; explicit ``overrides`` win (None = unset)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for name, var in ENV_VARS.items():
            raw = env.get(var)
            if raw is not None and raw.strip() != "":
                values[name] = raw
                sources[name] = var
        for name, value in overrides.items():
            if value is None:
                continue
            if name not in ENV_VARS:
                raise InvalidSetting(f"unknown setting {name!r}; known: {', '.join(ENV_VARS)}")
            values[name] = value
            sources[name] = name
        try:
            return cls(**values)
        except ValidationError as exc:
            err = exc.errors()[0]
            if not err["loc"]:  # a rule across fields: its message names them
                raise InvalidSetting(str(err["msg"]).removeprefix("Value error, ")) from exc
            field = str(err["loc"][0])
            where = sources.get(field, ENV_VARS.get(field, field))
            raise InvalidSetting(
                f"{where}={values.get(field)!r} is not usable: {err['msg']}"
            ) from exc

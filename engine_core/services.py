"""What the shell lends the pure core for one step: settings and data, never I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dormant.engine_core.inputs import DEFAULT_LIMITS, Limits
from dormant.engine_core.model import ProcessDefinition, RetryPolicy

if TYPE_CHECKING:
    # annotations only: the decision and version types bring the FEEL grammar, which
    # the shell's settings (persistence/settings.py) read without ever evaluating
    from dormant.engine_core.bindings import DecisionVersion, ProcessVersion
    from dormant.engine_core.dmn import Decision

__all__ = ["DEFAULT_SERVICES", "JobTypeSettings", "Services"]


@dataclass(frozen=True, slots=True)
class JobTypeSettings:
    """One job type's own timeout and retry backoff (None: the engine-wide setting)."""

    timeout_seconds: float | None = None
    retry_backoff_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Services:
    """Settings and data the step reads, passed in so the core reads no environment.

    ``decisions`` is the latest deployed version of every DMN decision, by id, loaded
    by the shell before the step: a business rule task evaluates against it, and one
    whose decision is missing opens an incident that a retry after deploying heals.

    ``processes`` and ``decision_versions`` are what is deployed, version by version,
    for the bindings (``engine_core/bindings.py``): lent for a process that has a call
    activity (or a business rule task bound by deployment or version tag), so the
    element finds its target before it arms anything. ``processes`` None: not lent
    (a pure caller of the core), the child's latest version is then chosen by the
    shell after the commit, and a missing one fails back to the call activity.
    """

    default_job_retries: int = 3
    job_retry_backoff_seconds: float = 1.0
    # No result this long after a dispatch: the job is dispatched again (next attempt,
    # retries untouched), so a job message lost with a broker is never a stuck instance.
    job_timeout_seconds: float = 300.0
    incident_retry_policy: RetryPolicy | None = None
    decisions: Mapping[str, Decision] = field(default_factory=dict)
    processes: Mapping[str, Sequence[ProcessVersion]] | None = None
    decision_versions: Mapping[str, Sequence[DecisionVersion]] = field(default_factory=dict)
    # What a model may store in a variable (engine_core/inputs.py); past it the node
    # that wrote it gets an incident, so the checkpoint can always be stored.
    limits: Limits = DEFAULT_LIMITS
    # Per-job-type timeout and retry backoff (engine_core/jobs.py).
    job_types: Mapping[str, JobTypeSettings] = field(default_factory=dict)
    # A MigrateInstance trigger: the target version's definition, loaded by the shell.
    migration_target: ProcessDefinition | None = None
    # Node entries one step may make. Past it the step commits with the tokens still to
    # run left active, and a ``ContinueInstance`` effect asks for a ``Continue``
    # trigger: a loop with no wait state costs throughput, never a held worker.
    step_budget: int = 1000
    # Inner instances one multi-instance activity may have (each is a token and a scope
    # in the checkpoint); more is an incident at the activity.
    max_loop_items: int = 10_000


DEFAULT_SERVICES = Services()

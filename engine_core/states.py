"""The states an instance, a token and an incident can be in: one vocabulary for the
core, the Store, the CLI, the console and Flower (issue 28).

Plain enums with no dependency, so ``dormant --help`` can list them without loading the
checkpoint document (bench/bench_cli.py). The checkpoint stores these values; the legal
moves between them are engine_core/transitions.py. Two statuses exist only outside the
checkpoint and are listed here so every list and filter offers them: ``flagged`` (an
instance whose checkpoint this dormant cannot read, persistence/failed_triggers.py) and
``queued`` (a start accepted but not applied by a worker yet: no checkpoint exists).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "AUDIT_OUTCOMES",
    "AUDIT_SOURCES",
    "FLAGGED",
    "INCIDENT_STATES",
    "LISTED_STATUSES",
    "QUEUED",
    "IncidentState",
    "InstanceStatus",
    "TokenState",
]


class InstanceStatus(StrEnum):
    ACTIVE = "active"
    ACTIVE_INCIDENTS = "active_incidents"
    COMPLETED = "completed"
    TERMINATED = "terminated"
    FAILED = "failed"

    @property
    def ended(self) -> bool:
        return self in _ENDED


# Read on every turn of the run loop: a set lookup, not three enum attribute reads.
_ENDED = frozenset({InstanceStatus.COMPLETED, InstanceStatus.TERMINATED, InstanceStatus.FAILED})


class TokenState(StrEnum):
    ACTIVE = "active"
    WAITING = "waiting"
    INCIDENT = "incident"
    COMPLETED = "completed"
    WITHDRAWN = "withdrawn"


class IncidentState(StrEnum):
    """``retried``: closed because a retry succeeded (the node ran again and moved on);
    ``resolved``: closed by the operator's Resolve, which skips the node's work. Two
    words for two outcomes (issue 28: a successful retry used to read ``resolved``)."""

    OPEN = "open"
    RETRY_SCHEDULED = "retry_scheduled"
    RETRIED = "retried"
    RESOLVED = "resolved"
    DEAD_LETTERED = "dead_lettered"
    OVERTAKEN = "overtaken"

    @property
    def closed(self) -> bool:
        return self in _CLOSED


_CLOSED = frozenset(
    {
        IncidentState.RETRIED,
        IncidentState.RESOLVED,
        IncidentState.DEAD_LETTERED,
        IncidentState.OVERTAKEN,
    }
)


# The statuses of an instance that no checkpoint carries (see the module docstring).
FLAGGED = "flagged"
QUEUED = "queued"

# What ``--status`` accepts and the help lists, in this order.
LISTED_STATUSES: tuple[str, ...] = (*(s.value for s in InstanceStatus), FLAGGED, QUEUED)
INCIDENT_STATES: tuple[str, ...] = tuple(s.value for s in IncidentState)

# The audit trail's closed vocabularies (docs/audit.md): the door an operator action came
# through, and what became of it. Here, not in persistence/audit.py, so that the CLI's
# ``--source`` / ``--outcome`` choices cost its start-up no database import.
AUDIT_SOURCES: tuple[str, ...] = ("cli", "console", "api", "client", "celery")
AUDIT_OUTCOMES: tuple[str, ...] = ("accepted", "applied", "refused", "done")

"""Timer start events: definition-level deadlines in ``start_timers``.

A process whose start event is a timer (timeDate, timeCycle, timeDuration at process
level) has no instance to hold its deadline, so the deadline belongs to the deployed
definition: one row per (process key, start node) of the LATEST version. Rules, and
why:

* ``replace_start_timers`` runs inside the deploy transaction: the new version's rows
  replace the old version's (Camunda 8 does the same), so a deploy never leaves two
  versions' timers armed, nor none, whatever fails.
* The due time is computed once, at deploy, from the deploy's ``now`` (N9: a timeDate
  in the past is due at once; a cycle ``R/P1D`` is first due one period after deploy).
* Firing (``scheduler.deadlines.fire``) starts an instance whose id is derived from
  key + version + node + due time, and arms the next repetition, in ONE transaction;
  a repeated fire of the same due time finds the instance and starts nothing.
* A timer expression that cannot be evaluated without an instance (it names a
  variable) refuses the deploy with ``InvalidModel`` naming the start event.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Connection, delete, insert

from dormant.engine_core.errors import InvalidModel
from dormant.engine_core.expressions import TechnicalFailure
from dormant.engine_core.model import ProcessDefinition
from dormant.engine_core.timers import arm_timer
from dormant.persistence.tables import start_timers

__all__ = ["START_TIMER_PREFIX", "is_start_timer", "replace_start_timers", "start_instance_id"]

# Claims of start timers travel through the same ``fire_deadline`` task as instance
# deadlines, as (instance_id, wait_id) = (PREFIX + process key, start node id). Process
# keys are XML NCNames (no ':'), instance ids minted by dormant are uuids or
# "<parent>.<wait>", so the prefix cannot name a real instance.
START_TIMER_PREFIX = "start-timer:"

_NAMESPACE = uuid.UUID("0b8f9a53-3c1e-4d3a-8f0e-5e2f7d0c4a12")


def is_start_timer(instance_id: str) -> bool:
    return instance_id.startswith(START_TIMER_PREFIX)


def start_instance_id(key: str, version: int, node_id: str, due_at: datetime) -> str:
    """Deterministic, so firing the same due time twice never starts two instances."""
    return str(uuid.uuid5(_NAMESPACE, f"{key}\x00{version}\x00{node_id}\x00{due_at.isoformat()}"))


def replace_start_timers(
    conn: Connection, definition: ProcessDefinition, version: int, now: datetime
) -> int:
    """Delete ``definition.key``'s start timers and arm this version's; returns how many."""
    conn.execute(delete(start_timers).where(start_timers.c.key == definition.key))
    rows = []
    for node in definition.timer_starts():
        spec = node.event.timer
        assert spec is not None  # the reader requires a timer value
        try:
            armed = arm_timer(spec, {}, node.id, now)
        except TechnicalFailure as exc:
            raise InvalidModel(
                f"timer start event {node.id!r} of process {definition.key!r}: {exc} "
                "(a timer start has no instance variables; use a literal or a "
                "variable-free expression)"
            ) from exc
        rows.append(
            {
                "key": definition.key,
                "node_id": node.id,
                "version": version,
                "due_at": armed.due_at,
                "cycle_remaining": armed.cycle_remaining,
                "interval_seconds": armed.interval_seconds,
                "attempts": 0,
            }
        )
    if rows:
        conn.execute(insert(start_timers), rows)
    return len(rows)

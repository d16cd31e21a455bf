"""Message correlation as a plan: which waits a message wakes, which processes it
starts or joins, and whether it is buffered.

Pure: ``persistence/routing.py`` executes the plan (the lookups, the locks, the
transactions) and asks again when what it finds changes under it (a subscription that
appeared before the message was recorded, a keyed start taken meanwhile). The rules,
as Camunda 8 correlates:

* Holders first: every instance that holds a matching subscription (name, and the
  correlation key for a message) gets the message, one wait per instance — the first
  in (instance, wait) order; an instance already served is not served again.
* Only when no holder took it, the message starts each process whose latest version
  has a message start event of that name, at its first such start event; with a
  correlation key, an instance already running with that start key is joined instead
  (a keyed start never makes a second instance).
* Taken by nobody, it is buffered for its TTL when that is positive, else dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["JoinRunning", "StartProcess", "buffer_it", "start_or_join", "waits_to_wake"]


def waits_to_wake(
    holders: Iterable[tuple[str, str]], served: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """(instance id, wait id) to deliver to: one wait per instance, none twice."""
    seen = set(served)
    chosen: list[tuple[str, str]] = []
    for instance_id, wait_id in sorted(holders):
        if instance_id in seen:
            continue
        seen.add(instance_id)
        chosen.append((instance_id, wait_id))
    return chosen


@dataclass(frozen=True, slots=True)
class StartProcess:
    process_key: str
    version: int
    start_node_id: str
    start_key: str | None


@dataclass(frozen=True, slots=True)
class JoinRunning:
    process_key: str
    instance_id: str


def start_or_join(
    process_key: str,
    version: int,
    start_nodes: Sequence[str],
    correlation_key: str | None,
    running: str | None,
) -> StartProcess | JoinRunning:
    """For one process with a matching message start: start it, or join ``running``
    (the instance already running with this start key; only a keyed message joins)."""
    if correlation_key is not None and running is not None:
        return JoinRunning(process_key, running)
    return StartProcess(process_key, version, start_nodes[0], correlation_key)


def buffer_it(taken: bool, ttl_seconds: float | None) -> bool:
    """A message nobody took waits for a subscriber only while its TTL lasts."""
    return not taken and ttl_seconds is not None and ttl_seconds > 0

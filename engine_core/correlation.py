"""Message correlation as a plan: which waits a message wakes, which processes it
starts or joins, and whether it is buffered.

Pure: ``persistence/routing.py`` executes the plan (the lookups, the locks, the
transactions) and asks again when what it finds changes under it (a subscription that
appeared before the message was recorded, a keyed start taken meanwhile). The rules,
as Camunda 8 correlates:

* Message cardinality (Zeebe): a message correlates at most ONCE PER PROCESS ID
  (the BPMN process id, across all its versions). Of the instances of one process
  that hold a matching subscription (name, and correlation key), the first — in the
  order the subscriptions were opened, as the shell lists them — gets it; instances of
  different processes each get it. A process already served is not served again (a
  second round after a subscription appeared, a redelivery). If the first holder's
  wait went stale under the lock, the next holder of that process is tried.
* A process that no holder served and whose latest version has a message start event
  of that name is started once, at its first such start event; with a correlation
  key, an instance already running with that start key is joined instead (a keyed
  start never makes a second instance).
* With a positive TTL it is buffered until it expires, whether or not it was taken:
  a subscription opened later takes it if its process has not had it yet (each
  process id gets a message once, at publish or from the buffer). Without a TTL, what
  nobody took is dropped.

Before this rule, every instance holding a matching subscription got the message
(one wait per instance), and message starts ran only when no instance held one.
Signals are unchanged: they broadcast to every holder and start every signal start.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "Holder",
    "JoinRunning",
    "StartProcess",
    "buffer_it",
    "processes_to_start",
    "start_or_join",
    "waits_to_wake",
]


@dataclass(frozen=True, slots=True)
class Holder:
    """A matching subscription: the process of the instance that holds it, and the wait."""

    process_key: str
    instance_id: str
    wait_id: str


def waits_to_wake(holders: Iterable[Holder], served: Iterable[str] = ()) -> list[list[Holder]]:
    """Per process not yet ``served`` (process keys), its holders in the order given:
    the message goes to the first of each list (the next when one went stale), so it
    correlates once per process id and one wait per instance."""
    done = set(served)
    groups: dict[str, list[Holder]] = {}
    seen_instances: set[str] = set()
    for holder in holders:
        if holder.process_key in done or holder.instance_id in seen_instances:
            continue
        seen_instances.add(holder.instance_id)
        groups.setdefault(holder.process_key, []).append(holder)
    return list(groups.values())


def processes_to_start(start_processes: Iterable[str], served: Iterable[str]) -> list[str]:
    """The processes with a matching message start that no holder served: each is
    started (or its keyed instance joined) once."""
    done = set(served)
    return [key for key in start_processes if key not in done]


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


def buffer_it(ttl_seconds: float | None) -> bool:
    """A message waits for the processes it has not reached only while its TTL lasts."""
    return ttl_seconds is not None and ttl_seconds > 0

"""Two lanes for triggers: one the engine could not foresee was expensive leaves the
main lane for the quarantine lane (issue 24, the hostile-load target).

Why: a worker has a few pool processes. Every trigger's work is bounded
(docs/limits.md), so a hostile model's trigger ends as an incident, and a trigger that
kills its pool process ends as a ``PoisonTrigger``; but until then it holds a pool
process: FEEL work until the soft time limit, a hang until the hard one, three times.
Two such triggers at once hold a two-process worker whole, and every other trigger
waits seconds behind them.

So a deployment may run two kinds of worker (docs/operations.md, "Two lanes"):

* ``dormant worker --lane main`` serves the usual queues. Each trigger's computation
  (the core's ``apply``: pure, no SQL inside) gets ``DORMANT_LANE_BUDGET_SECONDS``. Past
  it the computation is interrupted (``OutOfLaneBudget``), the trigger's transaction
  rolls back — nothing of it was written — and the trigger is published unchanged to
  the ``dormant.quarantine`` queue and acknowledged. A delivery the broker flags as
  redelivered (the one before it died with its pool process) goes there at once,
  counted, before any of its work runs again.
* ``dormant worker --lane quarantine`` serves only that queue, with the full time
  limits: there the slow trigger becomes its incident, the dying one its
  ``PoisonTrigger``, and a merely heavy one is applied as it would have been.

So the main lane's pool processes are held by a trigger nobody could foresee at most the
budget (or, for one that never gives the interpreter back, one hard time limit), and
never again by the same delivery. A worker without ``--lane`` (``all``, the default,
and ``dormant dev``) reads both queues with the full limits: nothing is moved, and no
trigger waits on a lane nobody serves.

The interrupt is ``SIGALRM`` from an interval timer, armed around the computation only
(``Store(compute_guard=...)``), in a pool process's main thread only: never inside a SQL
statement, whose connection an interrupt would leave unusable.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from types import FrameType

__all__ = [
    "QUARANTINE_KEY_PREFIX",
    "SUSPECT_SECONDS",
    "OutOfLaneBudget",
    "compute_guard",
    "movable",
    "quarantine_key",
    "suspect",
    "suspected",
]

QUARANTINE_KEY_PREFIX = "quarantine."
"""Routing keys of the quarantine queue: the trigger's own key behind this prefix, so
none of them matches the main queue's ``trigger.#``-style bindings."""


class OutOfLaneBudget(BaseException):
    """The main lane's budget ran out inside a trigger's computation.

    A BaseException, as Celery's own time limits are for the code they interrupt: no
    ``except Exception`` between the signal and the trigger's shell (a FEEL built-in,
    the core turning a model's failure into an incident) may take it for the model's
    failure; the transaction's context rolls back on it like on any exception."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the main lane's budget ({seconds:g} s, DORMANT_LANE_BUDGET_SECONDS)")
        self.seconds = seconds


SUSPECT_SECONDS = 300.0
"""How long a main-lane pool process remembers what a moved trigger belonged to."""
MAX_SUSPECTS = 1000
"""How many it remembers at most (the oldest forgotten first): a bound on its memory."""

_suspects: dict[str, float] = {}


def suspect(key: str | None) -> None:
    """Remember ``key`` (a start's process, an instance) as expensive: the next trigger
    of it that reaches this pool process moves before it runs, instead of paying the
    budget again. Per process, in memory: a main lane of N pool processes pays the
    budget at most N times per key and ``SUSPECT_SECONDS``, and a restarted worker
    learns again."""
    if key is None:
        return
    _suspects.pop(key, None)
    _suspects[key] = time.monotonic() + SUSPECT_SECONDS
    while len(_suspects) > MAX_SUSPECTS:
        del _suspects[next(iter(_suspects))]


def suspected(key: str | None) -> bool:
    """Was a trigger of ``key`` moved by this process within ``SUSPECT_SECONDS``?"""
    if key is None:
        return False
    until = _suspects.get(key)
    if until is None:
        return False
    if until < time.monotonic():
        del _suspects[key]
        return False
    return True


def quarantine_key(routing_key: str) -> str:
    """The quarantine lane's routing key for a trigger published under ``routing_key``."""
    if routing_key.startswith(QUARANTINE_KEY_PREFIX):
        return routing_key
    return QUARANTINE_KEY_PREFIX + routing_key


def compute_guard(lane: str, seconds: float) -> Callable[[], AbstractContextManager[object]]:
    """What the Store wraps each computation in: on a main-lane worker, the budget;
    anywhere else, nothing."""
    if lane != "main":
        return nullcontext

    def guard() -> AbstractContextManager[object]:
        return _budget(seconds)

    return guard


class _State(threading.local):
    movable = False  # inside a trigger shell that moves a trigger out of budget
    armed = False  # a budget's timer runs


_state = _State()


@contextmanager
def movable() -> Iterator[None]:
    """The trigger shell's apply (tasks/triggers.py ``_run``): only there is a budget
    armed, since only that shell moves a trigger whose budget ran out. Every other
    computation (a job's result, a timer's fire, an operator's command) runs with the
    full limits wherever it is."""
    outer = _state.movable
    _state.movable = True
    try:
        yield
    finally:
        _state.movable = outer


@contextmanager
def _budget(seconds: float) -> Iterator[None]:
    """Raise ``OutOfLaneBudget`` in this block once ``seconds`` of wall clock passed.

    Only inside ``movable``, and only where a signal can land: the process's main
    thread (a prefork pool process runs its task there; a thread pool's worker threads
    get no budget), and not inside another armed block (the outer one's timer stands)."""
    if (
        not _state.movable
        or _state.armed
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def out_of_budget(signum: int, frame: FrameType | None) -> None:
        raise OutOfLaneBudget(seconds)

    previous = signal.signal(signal.SIGALRM, out_of_budget)
    _state.armed = True
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        _state.armed = False

"""Job rows this process has published and not yet deleted (PostgreSQL only).

A job's outbox row is the one record that its dispatch was published: until the row
is gone, beat's sweep (``pending_outbox``) takes it for a job nobody sent and sends it
again once it is ``DORMANT_OUTBOX_SWEEP_AFTER_SECONDS`` old. Deleting it in a
transaction of its own after every publish cost one write transaction per job (a third
of a start → job → end). So the publisher only *remembers* the id here, and the
process's next write transaction through the Store's one write statement carries
``DELETE FROM outbox WHERE id IN (...)`` as one more CTE (``Store._write_step``): that
is usually the job's own result, applied in the same pool process, or the next trigger.

The rules that keep this from sending a job twice:

* a transaction takes the ids only when it queues the DELETE (``Ride.take``), and gives
  them back if it does not commit (``riding``): a rolled-back trigger leaves them
  pending for the next one;
* once an id has waited ``bound_seconds`` (well under the sweep's age) with no
  transaction taking it, a timer thread deletes every pending id in one transaction of
  its own, so an idle worker leaves nothing for the sweep (a failed delete puts them
  back, and the timer tries again). The timer goes by the oldest id's age, not by when
  it was armed: in a busy process the next trigger takes each id a few milliseconds
  after its publish, and a timer that fired on schedule would delete, alone, the one id
  the next trigger was about to carry;
* ``Store.close``, the interpreter's exit and Celery's ``worker_process_shutdown``
  (``flush_every``) delete what is left.

The window: a process that dies with ids pending (``kill -9``, a hard time limit, a
lost connection at the last flush) leaves their rows looking unpublished, and the sweep
sends those jobs again — a duplicate job message, which jobs already tolerate (they are
at-least-once, with an idempotency key per attempt). The same window existed before,
between the publish and its own delete; it is now at most ``bound_seconds`` wide.

Per process: a forked child starts with nothing pending (``os.register_at_fork``), as
the ids, the lock and the timer are its parent's. Thread-safe: a worker's threads and
the timer share one set under one lock.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["FLUSH_AFTER_SECONDS", "PublishedJobs", "Ride", "flush_every"]

log = logging.getLogger("dormant.outbox")

# How long a published job's row may wait for a transaction to carry its DELETE before
# the timer deletes it alone (the Store uses at most a quarter of the sweep's age).
FLUSH_AFTER_SECONDS = 0.5

_EVERY: weakref.WeakSet[PublishedJobs] = weakref.WeakSet()


class PublishedJobs:
    """The published, not yet deleted job rows of one Store in this process."""

    def __init__(self, delete: Callable[[list[int]], None], bound_seconds: float) -> None:
        self._delete = delete
        self.bound_seconds = bound_seconds
        self._lock = threading.Lock()
        # id -> when it was published (time.monotonic), kept across a give-back
        self._ids: dict[int, float] = {}
        self._timer: threading.Timer | None = None
        _EVERY.add(self)

    def add(self, row_id: int) -> None:
        """Row ``row_id``'s job was published: delete the row with the next write."""
        with self._lock:
            self._ids.setdefault(row_id, time.monotonic())
            self._arm(self.bound_seconds)

    def pending(self) -> list[int]:
        """The ids waiting for a transaction (for tests and operators' eyes)."""
        with self._lock:
            return sorted(self._ids)

    @contextmanager
    def riding(self) -> Iterator[Ride]:
        """One write transaction's share: what it takes goes back if the block raises
        (the transaction rolled back, or its commit failed)."""
        ride = Ride(self)
        try:
            yield ride
        except BaseException:
            self._put_back(ride.ids)
            raise

    def take(self) -> dict[int, float]:
        """Every pending id (with its publish time), now the caller's to delete."""
        with self._lock:
            ids, self._ids = self._ids, {}
            return ids

    def flush(self) -> None:
        """Delete every pending row now, in a transaction of its own."""
        self._delete_now(self.take())

    def _due(self) -> None:
        """The timer: delete everything pending once the oldest id waited its bound;
        before that, wait on (the ids a transaction took since need nothing)."""
        with self._lock:
            self._timer = None
            if not self._ids:
                return
            left = min(self._ids.values()) + self.bound_seconds - time.monotonic()
            if left > 0:
                self._arm(left)
                return
            ids, self._ids = self._ids, {}
        self._delete_now(ids)

    def _delete_now(self, ids: dict[int, float]) -> None:
        if not ids:
            return
        try:
            self._delete(sorted(ids))
        except Exception as exc:  # the database is away: keep them, the timer retries
            log.warning("published job rows %s not deleted yet: %r", sorted(ids), exc)
            self._put_back(ids)

    def _put_back(self, ids: dict[int, float]) -> None:
        if ids:
            with self._lock:
                for row_id, published in ids.items():
                    self._ids.setdefault(row_id, published)
                self._arm(self.bound_seconds)

    def _arm(self, delay: float) -> None:
        """Start the timer if ids wait and none runs (the lock is held)."""
        if self._timer is not None or not self._ids:
            return
        timer = threading.Timer(max(delay, 0.0), self._due)
        timer.daemon = True
        timer.name = "dormant-published-jobs"
        try:
            timer.start()
        except RuntimeError:  # the interpreter is shutting down: flush_every's turn
            return
        self._timer = timer

    def _forget(self) -> None:
        """In a forked child: the parent's ids, lock and timer are not ours."""
        self._lock = threading.Lock()
        self._ids = {}
        self._timer = None


class Ride:
    """The ids one write transaction took, given back by ``riding`` if it fails."""

    def __init__(self, owner: PublishedJobs) -> None:
        self._owner = owner
        self.ids: dict[int, float] = {}

    def take(self) -> list[int]:
        """The pending ids, for this transaction's DELETE (sorted: two transactions
        deleting the same rows lock them in one order)."""
        ids = self._owner.take()
        self.ids |= ids
        return sorted(ids)


def flush_every() -> None:
    """Delete every pending row of every Store of this process (at its exit)."""
    for published in list(_EVERY):
        published.flush()


def _forget_every() -> None:
    for published in list(_EVERY):
        published._forget()


os.register_at_fork(after_in_child=_forget_every)
atexit.register(flush_every)

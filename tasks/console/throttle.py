"""Slowing down password guessing: every failed sign-in (the form, a Basic header, a
bearer token alike) is counted per client address and across all clients.

* Per client: the first ``FREE_FAILURES`` failures (typos) are answered at once; each
  further one waits twice as long as the one before (``BASE_DELAY`` up to
  ``MAX_DELAY``); the ``LOCK_AFTER``-th locks that address out for ``LOCK_SECONDS``:
  every sign-in from it is refused (429), the right password too, without being
  compared. A success forgets the address's failures; so does ``FORGET_AFTER`` seconds
  without one.
* Globally: ``GLOBAL_LOCK_AFTER`` failures from any addresses within ``GLOBAL_WINDOW``
  seconds lock every sign-in out for ``GLOBAL_LOCK_SECONDS`` (guessing spread over many
  addresses). Sessions already signed in keep working.

Each lockout is one WARNING log line and one count of
``dormant_console_sign_in_lockouts_total{scope="client"|"global"}``. The state lives in
the console process (a restart forgets it); at most ``MAX_CLIENTS`` addresses are
remembered, the oldest dropped first. The bounds are in docs/limits.md.

Everything here runs on the event loop (the guard and the sign-in handler are async),
so a check and the count it updates never interleave with another request's.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from dormant.tasks.metrics import CONSOLE_SIGN_IN_LOCKOUTS

__all__ = ["SignInThrottle"]

log = logging.getLogger("dormant.console.security")

FREE_FAILURES = 3
BASE_DELAY = 0.25
MAX_DELAY = 2.0
LOCK_AFTER = 10
LOCK_SECONDS = 300.0
FORGET_AFTER = 900.0
GLOBAL_LOCK_AFTER = 100
GLOBAL_WINDOW = 600.0
GLOBAL_LOCK_SECONDS = 60.0
MAX_CLIENTS = 10_000


@dataclass(slots=True)
class _Client:
    failures: int = 0
    last: float = 0.0
    locked_until: float = 0.0


class SignInThrottle:
    """Failed sign-ins per client address and overall; see the module's docstring."""

    def __init__(
        self,
        *,
        free_failures: int = FREE_FAILURES,
        base_delay: float = BASE_DELAY,
        max_delay: float = MAX_DELAY,
        lock_after: int = LOCK_AFTER,
        lock_seconds: float = LOCK_SECONDS,
        global_lock_after: int = GLOBAL_LOCK_AFTER,
        global_window: float = GLOBAL_WINDOW,
        global_lock_seconds: float = GLOBAL_LOCK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.free_failures = free_failures
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.lock_after = lock_after
        self.lock_seconds = lock_seconds
        self.global_lock_after = global_lock_after
        self.global_window = global_window
        self.global_lock_seconds = global_lock_seconds
        self._clock = clock
        self._clients: OrderedDict[str, _Client] = OrderedDict()
        self._recent: deque[float] = deque()
        self._global_until = 0.0

    def refused_for(self, client: str) -> float:
        """Seconds until this client may try again (0: it may now)."""
        now = self._clock()
        waits = [self._global_until - now]
        record = self._clients.get(client)
        if record is not None:
            waits.append(record.locked_until - now)
        return max(0.0, *waits)

    def failed(self, client: str) -> float:
        """Count one failure; the seconds to hold its answer back."""
        now = self._clock()
        record = self._clients.pop(client, None)
        if record is None or now - record.last > FORGET_AFTER:
            record = _Client()
        record.failures += 1
        record.last = now
        self._clients[client] = record  # newest last: the oldest is dropped first
        while len(self._clients) > MAX_CLIENTS:
            self._clients.popitem(last=False)
        self._count_globally(now)
        if record.failures >= self.lock_after:
            record.failures = 0
            record.locked_until = now + self.lock_seconds
            CONSOLE_SIGN_IN_LOCKOUTS.labels(scope="client").inc()
            log.warning(
                "sign-in lockout: %s failed %d sign-ins; refused for %.0f s",
                client,
                self.lock_after,
                self.lock_seconds,
            )
            return 0.0
        extra = record.failures - self.free_failures
        if extra <= 0:
            return 0.0
        return float(min(self.max_delay, self.base_delay * 2 ** (extra - 1)))

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)

    def _count_globally(self, now: float) -> None:
        self._recent.append(now)
        while self._recent and now - self._recent[0] > self.global_window:
            self._recent.popleft()
        if len(self._recent) >= self.global_lock_after:
            self._recent.clear()
            self._global_until = now + self.global_lock_seconds
            CONSOLE_SIGN_IN_LOCKOUTS.labels(scope="global").inc()
            log.warning(
                "sign-in lockout: %d failed sign-ins from all clients within %.0f s; "
                "every sign-in refused for %.0f s",
                self.global_lock_after,
                self.global_window,
                self.global_lock_seconds,
            )

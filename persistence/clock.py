"""The shell's one clock: every "now" that tasks/, scheduler/ and persistence/ use.

``engine_core`` never reads a clock (it is handed ``now``); the shell reads it here and
only here, so the time every trigger task, deadline scan, inbox/outbox sweep and
message TTL sees can be moved in ONE place.

**The database's clock, not the host's.** Deadlines are rows compared against "now"
by every worker of the fleet; if each worker read its own host clock, one host whose
clock stepped forward (an NTP correction, a suspended VM resumed, an operator's typo)
would claim and fire timers early for everybody, and one stepped back would arm timers
that fire early by the real time. So a process that registers its database
(``use_database_clock``: the worker, beat and CLI do, in tasks/app.py) gets the
database server's clock, read every ``SYNC_SECONDS`` and carried forward between reads
by the process's monotonic clock, which host clock steps do not move.

**Never ahead, and behind by no more than the read.** The server took its time
somewhere between the statement's send and the value's arrival. The anchor is the
arrival (``ClockReading.received``), so this clock never runs ahead of the database's
and a deadline is never claimed early. It lags the server by at most the window, and
a timer armed at "now + delay" is armed early by that lag against the server's clock:
so the window is the statement's round trip alone (the source stamps it, not the
ROLLBACK and pool check-in after it, which once put milliseconds between the value and
its anchor under load), and a read whose window is wider than ``TIGHT_SECONDS`` (the
process waited for a core) is read again, ``READ_TRIES`` times at most, the narrowest
kept. A failed read (the database is down)
keeps the last anchor, carried forward, and is retried after ``RETRY_SECONDS``; before
the first successful read the host clock stands in. The embedded SQLite default has no
clock but the host's (the source answers ``None``). The anchor survives ``fork`` (the
monotonic clock is the machine's), and the registered source resolves the process's own
Store at each read, so a pool child reads through its own connections.

``DORMANT_CLOCK_OFFSET_FILE`` — FOR TESTS AND DRILLS ONLY. When set, it names a file
whose content is a number of seconds (float, may be negative) added to the time above;
a missing or empty file means 0. Read at every call, so a running worker and beat
follow an edit at once: a drill can move the whole fleet's time past a 24 h boundary
timer without waiting a day, and the deadline arithmetic stays the real code (the
recorded ``due_at`` is compared against this ``now``). A file that does not hold a
number raises ``InvalidSetting`` naming the file. Leave it unset in production.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from dormant.engine_core.errors import InvalidSetting

__all__ = [
    "OFFSET_FILE_VAR",
    "READ_TRIES",
    "RETRY_SECONDS",
    "SYNC_SECONDS",
    "TIGHT_SECONDS",
    "ClockReading",
    "now",
    "offset_seconds",
    "use_database_clock",
]

log = logging.getLogger(__name__)

OFFSET_FILE_VAR = "DORMANT_CLOCK_OFFSET_FILE"
SYNC_SECONDS = 30.0
RETRY_SECONDS = 2.0
TIGHT_SECONDS = 0.002
READ_TRIES = 3


@dataclass(frozen=True, slots=True)
class ClockReading:
    """The server's time and the monotonic instants around the one statement that read
    it: the server read its clock somewhere between ``sent`` and ``received``."""

    database_time: datetime
    sent: float
    received: float

    @property
    def window(self) -> float:
        return self.received - self.sent


DatabaseClock = Callable[[], ClockReading | None]


@dataclass(frozen=True, slots=True)
class _Anchor:
    database_time: datetime
    monotonic: float


_lock = threading.Lock()
_source: DatabaseClock | None = None
_anchor: _Anchor | None = None
_next_read = 0.0


def use_database_clock(read: DatabaseClock | None) -> None:
    """Make ``read`` (one round trip answering the database server's time, stamped by
    ``ClockReading``, or ``None`` where the database has no clock of its own) this
    process's source; ``None`` drops it."""
    global _source, _anchor, _next_read
    with _lock:
        _source = read
        _anchor = None  # another source is another clock: nothing of the old one stays
        _next_read = 0.0


def offset_seconds() -> float:
    """The configured offset in seconds (0.0 when the setting or the file is absent)."""
    path = os.environ.get(OFFSET_FILE_VAR)
    if not path:
        return 0.0
    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read().strip()
    except FileNotFoundError:
        return 0.0
    if not raw:
        return 0.0
    try:
        return float(raw)
    except ValueError as exc:
        raise InvalidSetting(
            f"{OFFSET_FILE_VAR}={path!r} holds {raw[:40]!r}, not a number of seconds"
        ) from exc


def _narrowest(source: DatabaseClock) -> ClockReading | None:
    """The narrowest of up to ``READ_TRIES`` reads, stopping at the first tight one."""
    best: ClockReading | None = None
    for _ in range(READ_TRIES):
        try:
            reading = source()
        except Exception:
            if best is None:
                raise
            return best  # the connection went between tries: the read we have stands
        if reading is None:
            return None
        if best is None or reading.window < best.window:
            best = reading
        if best.window <= TIGHT_SECONDS:
            break
    return best


def _resync(source: DatabaseClock, mono: float) -> None:
    global _anchor, _next_read
    try:
        reading = _narrowest(source)
    except Exception as exc:  # the database is unreachable: carry the last anchor on
        log.warning("database clock unreadable (%s); retrying in %.0f s", exc, RETRY_SECONDS)
        _next_read = mono + RETRY_SECONDS
        return
    if reading is None:  # no clock but the host's
        _anchor = None
        _next_read = time.monotonic() + SYNC_SECONDS
        return
    # The value's arrival, not the call's return: never ahead of the server, and
    # behind it by no more than the statement's own round trip.
    _anchor = _Anchor(reading.database_time.astimezone(UTC), reading.received)
    _next_read = reading.received + SYNC_SECONDS


def _base_time() -> datetime:
    mono = time.monotonic()
    source = _source
    if source is not None and mono >= _next_read:
        with _lock:
            if mono >= _next_read:
                _resync(source, mono)
        mono = time.monotonic()
    anchor = _anchor
    if anchor is None:
        return datetime.now(UTC)
    return anchor.database_time + timedelta(seconds=mono - anchor.monotonic)


def now() -> datetime:
    """The database's current time, timezone-aware UTC, plus the test/drill offset."""
    offset = offset_seconds()
    current = _base_time()
    return current + timedelta(seconds=offset) if offset else current

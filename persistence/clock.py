"""The shell's one clock: every "now" that tasks/, scheduler/ and persistence/ use.

``engine_core`` never reads a clock (it is handed ``now``); the shell reads it here and
only here, so the time every trigger task, deadline scan, inbox/outbox sweep and
message TTL sees can be moved in ONE place.

``DORMANT_CLOCK_OFFSET_FILE`` — FOR TESTS AND DRILLS ONLY. When set, it names a file
whose content is a number of seconds (float, may be negative) added to the real time;
a missing or empty file means 0. Read at every call, so a running worker and beat
follow an edit at once: a drill can jump a 24 h boundary timer forward without
waiting a day, and the deadline arithmetic stays the real code (the recorded
``due_at`` is compared against this ``now``). A file that does not hold a number
raises ``InvalidSetting`` naming the file. Leave it unset in production.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from engine_core.errors import InvalidSetting

__all__ = ["OFFSET_FILE_VAR", "now", "offset_seconds"]

OFFSET_FILE_VAR = "DORMANT_CLOCK_OFFSET_FILE"


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


def now() -> datetime:
    """The current time, timezone-aware UTC, plus the test/drill offset if any."""
    offset = offset_seconds()
    current = datetime.now(UTC)
    return current + timedelta(seconds=offset) if offset else current

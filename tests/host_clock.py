"""A process whose HOST clock is stepped, and only that process's.

The engine's test offset (``DORMANT_CLOCK_OFFSET_FILE``) moves the engine's time for the
whole fleet, which is how a drill makes a day pass. A host clock that steps on one
machine is a different fault: the kernel's ``CLOCK_REALTIME`` of that process jumps,
its monotonic clock does not. libfaketime (the ``libfaketime`` dev dependency vendors
it), preloaded into one child process, is that fault for real: ``datetime.now``,
``time.time`` and every C library call that reads the wall clock see the step; Python's
``time.monotonic`` does not (``DONT_FAKE_MONOTONIC``). The step is read from a file at
every call (``FAKETIME_NO_CACHE``), so a test moves it while the process runs.
"""

from __future__ import annotations

from pathlib import Path

import libfaketime

__all__ = ["stepped_host_clock"]


def stepped_host_clock(step_file: Path, step: str = "+0") -> dict[str, str]:
    """Environment for a child process whose host clock reads ``step_file``'s step
    (libfaketime's relative form: ``+2h``, ``-10m``, ``+0``), starting at ``step``."""
    step_file.write_text(step + "\n")
    _, additions = libfaketime.get_reload_information()
    library = Path(additions["LD_LIBRARY_PATH"]) / "libfaketime.so.1"
    assert library.is_file(), f"libfaketime's library is missing at {library}"
    return {
        "LD_PRELOAD": str(library),
        "DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_TIMESTAMP_FILE": str(step_file),
    }

"""The inbox sweep re-sends a stuck trigger once per redelivery window, not on every
sweep: a broker outage must not turn recovery into a storm of duplicates."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dormant.persistence import clock


def test_a_stuck_trigger_is_resent_once_per_window(store: Any, tmp_path: Path) -> None:
    from dormant.persistence import inbox

    offset = tmp_path / "offset"
    offset.write_text("0")
    os.environ[clock.OFFSET_FILE_VAR] = str(offset)
    try:
        row = inbox.record(store.engine, "dormant.signal", "signal.x", {"name": "x"})
        assert inbox.unprocessed(store.engine, 5) == []  # too young: its publisher may live
        offset.write_text("6")
        assert [r.id for r in inbox.unprocessed(store.engine, 5)] == [row]
        inbox.mark_republished(store.engine, [row])
        offset.write_text("30")
        assert inbox.unprocessed(store.engine, 5, redeliver_after_seconds=60) == []
        offset.write_text("70")
        assert [r.id for r in inbox.unprocessed(store.engine, 5, redeliver_after_seconds=60)] == [
            row
        ]
        inbox.mark_processed(store.engine, row)
        offset.write_text("500")
        assert inbox.unprocessed(store.engine, 5) == []
    finally:
        del os.environ[clock.OFFSET_FILE_VAR]

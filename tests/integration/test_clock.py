"""The shell's one clock (persistence/clock.py) and its test/drill offset file."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engine_core.errors import InvalidSetting
from persistence import clock


def test_no_setting_is_the_real_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(clock.OFFSET_FILE_VAR, raising=False)
    got = clock.now()
    assert got.tzinfo is not None
    # the database's clock (or the host's): the same machine's time, give or take a trip
    assert abs((got - datetime.now(UTC)).total_seconds()) < 1


def test_offset_file_moves_now_and_is_read_at_every_call(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "offset"
    monkeypatch.setenv(clock.OFFSET_FILE_VAR, str(path))
    assert clock.offset_seconds() == 0.0  # missing file: no offset
    path.write_text("")
    assert clock.offset_seconds() == 0.0  # empty file: no offset
    path.write_text("86400\n")
    shifted = clock.now() - datetime.now(UTC)
    assert 86399 < shifted.total_seconds() < 86401
    path.write_text("-3600.5")
    assert clock.offset_seconds() == -3600.5


def test_a_file_that_is_not_a_number_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "offset"
    path.write_text("tomorrow")
    monkeypatch.setenv(clock.OFFSET_FILE_VAR, str(path))
    with pytest.raises(InvalidSetting, match="DORMANT_CLOCK_OFFSET_FILE"):
        clock.now()


def test_the_shell_reads_time_only_through_the_clock() -> None:
    root = Path(__file__).resolve().parents[2]
    offenders = [
        str(p.relative_to(root))
        for layer in ("tasks", "scheduler", "persistence")
        for p in (root / layer).rglob("*.py")
        if p.name not in ("clock.py", "demo.py") and "datetime.now(" in p.read_text()
    ]
    assert offenders == []


def test_a_registered_database_clock_is_carried_by_the_monotonic_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fleet's time is the database's: read once, then carried forward by the
    monotonic clock (a host clock step in between moves nothing), never ahead of it.
    The clock's own state is only changed through its API, so nothing of this test's
    fake server outlives it in the process."""
    monkeypatch.delenv(clock.OFFSET_FILE_VAR, raising=False)
    server = datetime(2031, 5, 1, 12, 0, tzinfo=UTC)
    reads: list[int] = []
    failing = [False]
    registered = clock._source

    def database() -> datetime:
        if failing[0]:
            raise OSError("connection refused")
        reads.append(1)
        return server

    try:
        clock.use_database_clock(database)
        first = clock.now()
        second = clock.now()
        assert len(reads) == 1  # one round trip per SYNC_SECONDS, not per call
        assert server <= first <= second < server + timedelta(seconds=1)

        monkeypatch.setattr(clock, "SYNC_SECONDS", 0.0)  # read at every call from here
        clock.now()
        failing[0] = True
        kept = clock.now()  # unreadable: the last anchor, carried on
        assert server <= kept < server + timedelta(seconds=1)

        clock.use_database_clock(lambda: None)  # SQLite: the host's clock
        assert abs((clock.now() - datetime.now(UTC)).total_seconds()) < 1
        # Another source is another clock: an unreadable one does not inherit the
        # fake server's anchor.
        clock.use_database_clock(database)
        assert abs((clock.now() - datetime.now(UTC)).total_seconds()) < 1
    finally:
        clock.use_database_clock(registered)
    assert abs((clock.now() - datetime.now(UTC)).total_seconds()) < 1

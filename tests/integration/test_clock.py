"""The shell's one clock (persistence/clock.py) and its test/drill offset file."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dormant.engine_core.errors import InvalidSetting
from dormant.persistence import clock


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

    def database() -> clock.ClockReading:
        if failing[0]:
            raise OSError("connection refused")
        reads.append(1)
        return clock.ClockReading(server, time.monotonic(), time.monotonic())

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


class _Server:
    """A database server whose clock runs with this process's monotonic clock, and a
    read of it that does ``after`` seconds of work once the value is read (a ROLLBACK,
    a pool check-in, a moment without a core), and ``insides`` seconds, one per read,
    between the statement's send and the value's arrival."""

    def __init__(self) -> None:
        self.base = datetime(2031, 5, 1, 12, 0, tzinfo=UTC)
        self.started = time.monotonic()
        self.insides: list[float] = []
        self.after = 0.0
        self.reads = 0
        self.refuse_from = 0  # the read (1-based) from which the server is unreachable

    def time_now(self) -> datetime:
        return self.base + timedelta(seconds=time.monotonic() - self.started)

    def read(self) -> clock.ClockReading:
        self.reads += 1
        if self.refuse_from and self.reads >= self.refuse_from:
            raise OSError("connection refused")
        sent = time.monotonic()
        time.sleep(self.insides.pop(0) if self.insides else 0.0)
        value = self.time_now()
        received = time.monotonic()
        time.sleep(self.after)
        return clock.ClockReading(value, sent, received)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    """A fake server; the test registers it once it is set up, and the process's own
    source comes back afterwards."""
    monkeypatch.delenv(clock.OFFSET_FILE_VAR, raising=False)
    registered = clock._source
    yield _Server()
    clock.use_database_clock(registered)


def test_work_after_the_read_does_not_make_the_clock_lag_the_server(server: _Server) -> None:
    """A timer is armed at now + its delay: a clock behind the server arms it early by
    the server's own time. The anchor is the instant the value arrived, not the end of
    whatever the read did afterwards: 200 ms of ROLLBACK and check-in cost nothing."""
    server.after = 0.2
    clock.use_database_clock(server.read)
    ours = clock.now()
    lag = (server.time_now() - ours).total_seconds()
    assert lag < 0.1, f"the clock lags the server by {lag * 1000:.1f} ms"
    assert ours <= server.time_now()  # and never ahead of it


def test_a_read_that_waited_for_a_core_is_read_again(server: _Server) -> None:
    """The server's time was taken somewhere between the statement's send and the
    value's arrival: a wide window is an uncertain anchor, so the read is repeated
    and the narrowest one kept."""
    server.insides = [0.2, 0.0]
    clock.use_database_clock(server.read)
    ours = clock.now()
    # read again at least once; a loaded machine may widen the second window too
    assert 2 <= server.reads <= clock.READ_TRIES
    lag = (server.time_now() - ours).total_seconds()
    assert lag < 0.1, f"the clock lags the server by {lag * 1000:.1f} ms"
    assert ours <= server.time_now()


def test_a_server_that_only_answers_slowly_is_read_a_bounded_number_of_times(
    server: _Server,
) -> None:
    server.insides = [0.3, 0.2, 0.4, 0.0]
    clock.use_database_clock(server.read)
    ours = clock.now()
    assert server.reads == clock.READ_TRIES
    # The narrowest window (200 ms) is kept: behind the server by at most its width.
    assert server.time_now() - timedelta(seconds=0.3) <= ours <= server.time_now()


def test_a_retry_that_fails_keeps_the_read_already_made(server: _Server) -> None:
    """The connection goes between two tries: the wide read already made is an anchor
    (behind the server by its window, never ahead), better than the host's clock."""
    server.insides = [0.2]
    server.refuse_from = 2
    clock.use_database_clock(server.read)
    ours = clock.now()
    assert server.reads == 2
    assert server.time_now() - timedelta(seconds=0.3) <= ours <= server.time_now()

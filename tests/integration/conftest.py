"""Real processes for the integration tests: a ``dormant worker`` and a ``dormant beat``.

``stack`` is parametrised over the two deployment shapes and never skips:

* ``pg_redis`` — a fresh, migrated PostgreSQL database per test (tests/conftest.py's
  ``pg_empty_database``) and Redis at 127.0.0.1:6379 on a database number this run
  holds a lock on (tests/redis_lock.py: only an empty db is taken, only our own is
  flushed), so parallel runs never share a queue and nobody else's data is touched.
  Redis unreachable → the test fails.
* ``embedded`` — a SQLite file and the ``sqla+sqlite`` broker in the test's tmp dir.

Workers ``--include tests.integration.test_tasks_jobs`` (the test job tasks). Every
process is started with its own log file, waited for until it says it is ready, and
killed (its whole process group) at teardown; a failing test prints the log tails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests import cli_forks

REPO = Path(__file__).resolve().parents[2]
REDIS_HOST = os.environ.get("DORMANT_TEST_REDIS", "redis://127.0.0.1:6379")
# Comma-separated: the job modules every test worker loads.
JOBS_MODULE = "tests.integration.test_tasks_jobs,tests.integration.incident_jobs"
# The log lines that say a worker, a beat is up.
WORKER_READY = "ready."
BEAT_READY = "beat: Starting"


def wait_for(
    condition: Callable[[], Any],
    timeout: float = 20.0,
    interval: float = 0.1,
    what: str = "condition",
) -> Any:
    """Poll ``condition`` until it returns a truthy value; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception as exc:  # e.g. UnknownInstance before the start ran
            last_exc = exc
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}"
        + (f" (last error: {last_exc!r})" if last_exc else "")
    )


class Proc:
    """One dormant subprocess with its log."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.log = cwd / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self, ready: str | None = WORKER_READY, timeout: float = 30.0) -> Proc:
        self.launch()
        if ready:
            self.wait_ready(ready, timeout)
        return self

    def launch(self) -> Proc:
        """Start the process and return at once (``wait_ready`` waits for its line)."""
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def wait_ready(self, ready: str, timeout: float = 30.0) -> Proc:
        wait_for(
            lambda: self._check_alive() and ready in self.text(),
            timeout,
            what=f"{self.name} ready",
        )
        return self

    def _check_alive(self) -> bool:
        assert self.popen is not None
        if self.popen.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.popen.returncode}:\n{self.tail()}")
        return True

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0) -> None:
        """SIGTERM (warm shutdown), SIGKILL after ``timeout``: acks late loses nothing."""
        if self.popen is None or self.popen.poll() is not None:
            return
        try:
            os.killpg(self.popen.pid, sig)
            self.popen.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(timeout=10)


class Stack:
    """URLs, a Client, and the worker/beat processes of one deployment shape."""

    def __init__(self, kind: str, database_url: str, broker_url: str, tmp: Path) -> None:
        self.kind = kind
        self.database_url = database_url
        self.broker_url = broker_url
        self.tmp = tmp
        self.env = dict(
            os.environ,
            DORMANT_DATABASE_URL=database_url,
            DORMANT_BROKER_URL=broker_url,
            PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
        )
        self.procs: list[Proc] = []
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            from dormant.tasks.client import Client

            self._client = Client(self.database_url, self.broker_url)
        return self._client

    def dormant(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "dormant.tasks.cli", *args]

    def worker(
        self,
        name: str = "worker",
        concurrency: int = 2,
        queues: str | None = None,
        *,
        tenants: str | None = None,
    ) -> Proc:
        """A ``dormant worker``; ``queues``: its ``--queues`` (default: the CLI's);
        ``tenants``: its ``--tenants``."""
        return self._worker(name, concurrency, queues, tenants).start()

    def _worker(
        self, name: str, concurrency: int, queues: str | None, tenants: str | None = None
    ) -> Proc:
        proc = Proc(
            f"{name}-{len(self.procs)}",
            self.dormant(
                "worker",
                "--include",
                JOBS_MODULE,
                "--concurrency",
                str(concurrency),
                "--loglevel",
                "INFO",
                *(("--queues", queues) if queues else ()),
                *(("--tenants", tenants) if tenants else ()),
            ),
            self.env,
            self.tmp,
        )
        self.procs.append(proc)
        return proc

    def beat(self) -> Proc:
        return self._beat().start(ready=BEAT_READY)

    def _beat(self) -> Proc:
        proc = Proc(
            f"beat-{len(self.procs)}",
            self.dormant("beat", "--loglevel", "INFO"),
            self.env,
            self.tmp,
        )
        self.procs.append(proc)
        return proc

    def worker_and_beat(self) -> tuple[Proc, Proc]:
        """A worker and a beat, both ready.

        On PostgreSQL they start side by side: each spends its first seconds importing,
        and the database is migrated already (the worker and the beat only check it).
        On the embedded default the worker is ready before the beat starts, because
        each migrates the SQLite file on start and two migrating at once would race.
        """
        worker = self._worker("worker", 2, None).launch()
        if self.kind == "embedded":
            worker.wait_ready(WORKER_READY)
            return worker, self.beat()
        beat = self._beat().launch()
        return worker.wait_ready(WORKER_READY), beat.wait_ready(BEAT_READY)

    def run_cli(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``dormant ARGS`` in a process of its own with this stack's environment, forked
        from one that imported the CLI once (tests/cli_forks.py says why and what it
        keeps of a fresh interpreter)."""
        return cli_forks.run(args, self.env, self.tmp, timeout)

    def wait_status(self, instance_id: str, status: str, timeout: float = 25.0) -> Any:
        def check() -> Any:
            view = self.client.instance(instance_id)
            return view if view.status == status else None

        try:
            return wait_for(check, timeout, what=f"instance {instance_id} to be {status}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.diagnostics(instance_id)}") from None

    def diagnostics(self, instance_id: str | None = None) -> str:
        parts = []
        if instance_id is not None:
            try:
                parts.append(f"instance: {self.client.instance(instance_id)}")
            except Exception as exc:
                parts.append(f"instance: {exc!r}")
        for proc in self.procs:
            parts.append(f"--- {proc.name} ---\n{proc.tail(40)}")
        return "\n".join(parts)

    def close(self) -> None:
        """Kill every process of the stack (SIGKILL, whole process group) and close the
        Client.

        Teardown only frees what the test held, and nothing it does is checked, so it
        does not sit through a shutdown: an idle worker takes two to seven seconds to
        stop on SIGTERM, and across the suite's stacks that was a good part of its
        time. Acks late: nothing a killed worker held is lost. A test that means a
        graceful stop says so with ``Proc.stop()``.
        """
        for proc in reversed(self.procs):
            proc.stop(sig=signal.SIGKILL)
        if self._client is not None:
            self._client._store.close()


def _redis_db() -> Iterator[str]:
    """Lock one empty Redis database number for this test (fail if Redis is unreachable).

    tests/redis_lock.py never takes a database holding data and never flushes one whose
    lock is not ours: the server is shared."""
    import redis

    from tests.redis_lock import borrow_redis_db

    try:
        with borrow_redis_db(REDIS_HOST) as borrowed:
            yield borrowed.url
    except redis.ConnectionError as exc:
        pytest.fail(
            f"Redis is not reachable at {REDIS_HOST} ({exc}); integration tests never skip",
            pytrace=False,
        )
    except LookupError as exc:
        pytest.fail(str(exc), pytrace=False)


@contextmanager
def _urls(kind: str, tmp: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, str, str]]:
    if kind == "embedded":
        yield (
            "embedded",
            f"sqlite:///{tmp / 'dormant.sqlite3'}",
            f"sqla+sqlite:///{tmp / 'broker.sqlite3'}",
        )
        return
    from dormant.persistence import migrate

    database_url = request.getfixturevalue("pg_empty_database")()
    migrate.upgrade(database_url)
    gen = _redis_db()
    broker_url = next(gen)
    try:
        yield ("pg_redis", database_url, broker_url)
    finally:
        gen.close()


@pytest.fixture(params=["pg_redis", "embedded"])
def stack_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    with _urls(request.param, tmp_path, request) as urls:
        yield urls


@contextmanager
def running_stack(
    kind: str,
    name: str,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    **env: str,
) -> Iterator[Stack]:
    """A stack of ``kind`` with a worker and a beat started, ``env`` on top of the
    stack's environment: a module fixture's whole body."""
    tmp = tmp_path_factory.mktemp(f"{name}-{kind}")
    with _urls(kind, tmp, request) as urls:
        s = Stack(*urls, tmp)
        s.env.update(env)
        try:
            s.worker_and_beat()
            yield s
        finally:
            s.close()


@pytest.fixture(scope="module", params=["pg_redis", "embedded"])
def shared_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """One worker and one beat per test module and shape, for tests that neither
    restart processes nor count rows: starting processes is most of an integration
    test's time. Tests sharing it use their own process keys and instance ids."""
    with running_stack(request.param, "shared", request, tmp_path_factory) as s:
        yield s


@pytest.fixture
def stack(
    stack_urls: tuple[str, str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    """A deployment shape with a worker and a beat running (see the module docstring)."""
    s = Stack(*stack_urls, tmp_path)
    try:
        s.worker_and_beat()
        yield s
    finally:
        s.close()


@pytest.fixture
def bare_stack(stack_urls: tuple[str, str, str], tmp_path: Path) -> Iterator[Stack]:
    """The same shape with no processes running (bad-input tests, restart tests)."""
    s = Stack(*stack_urls, tmp_path)
    try:
        yield s
    finally:
        s.close()

"""``dormant`` commands for the tests, each in a process of its own, without paying each
one's imports.

A command run as ``python -m dormant.tasks.cli ...`` spends most of its half second to a
second importing SQLAlchemy, pydantic, Celery and dormant itself; the suite runs
hundreds of them, and on two shared cores that was a good part of its time. This
module keeps one process per test process that has imported those once (``serve``)
and forks it for each command: the command runs in a child process of its own, with
the test's environment, working directory and arguments, through the same ``main`` the
``dormant`` console script calls; it exits as a process exits (``sys.exit``, atexit
handlers, a traceback on an uncaught exception) and its standard output and error are
handed back as ``subprocess.run`` hands them back.

What it does not pre-import is what reads the environment when imported:
``dormant.tasks.app`` builds its Celery app from ``DORMANT_*`` at import, so each
command that needs it imports it in its own child, after its environment is set.

Tests of what a command imports or how the console script starts
(tests/integration/test_cli_startup.py, test_wheel_install.py, the demo) start a fresh
interpreter and never come here. ``DORMANT_TEST_CLI_FORKS=0`` runs every command as a
fresh interpreter too.
"""

from __future__ import annotations

import atexit
import base64
import json
import locale
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# Imported once by the serving process; none reads the environment when imported.
PRELOADED = (
    "dormant.tasks.cli",
    "dormant.tasks.client",
    "dormant.persistence.console_queries",
    "dormant.persistence.queries",
    "celery",
    "celery.app.base",
    "kombu.transport.redis",
    "kombu.transport.sqlalchemy",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.sqlite.pysqlite",
)


def command_line(*args: str) -> list[str]:
    """The argv of ``dormant ARGS`` as a fresh interpreter."""
    return [sys.executable, "-m", "dormant.tasks.cli", *args]


def run(
    args: tuple[str, ...] | list[str], env: dict[str, str], cwd: Path, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``dormant ARGS`` in a process of its own, as ``subprocess.run(..., text=True,
    capture_output=True, timeout=timeout)`` would run it."""
    if os.environ.get("DORMANT_TEST_CLI_FORKS") == "0":
        return subprocess.run(
            command_line(*args),
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    return _server().run(list(args), env, cwd, timeout)


class _Server:
    """The serving process, one per test process; one command at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._popen = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_forks"],
            cwd=REPO,
            env=dict(
                os.environ,
                PYTHONPATH=os.pathsep.join(
                    p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p
                ),
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def run(
        self, args: list[str], env: dict[str, str], cwd: Path, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        request = {"args": args, "env": env, "cwd": str(cwd), "timeout": timeout}
        with self._lock:
            assert self._popen.stdin is not None and self._popen.stdout is not None
            try:
                self._popen.stdin.write(json.dumps(request).encode() + b"\n")
                self._popen.stdin.flush()
                line = self._popen.stdout.readline()
            except BaseException:
                # Interrupted between a request and its reply (a test's timeout): the
                # reply would answer the next request, so this server serves no more.
                self.close()
                raise
        if not line:
            raise RuntimeError(f"the CLI fork server exited ({self._popen.poll()})")
        reply = json.loads(line)
        argv = command_line(*args)
        stdout, stderr = _text(reply["stdout"]), _text(reply["stderr"])
        if reply["timed_out"]:
            raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr)
        return subprocess.CompletedProcess(argv, reply["returncode"], stdout, stderr)

    def close(self) -> None:
        if self._popen.poll() is None:
            self._popen.kill()
            self._popen.wait()

    @property
    def serving(self) -> bool:
        return self._popen.poll() is None


def _text(encoded: str) -> str:
    """Bytes as ``subprocess.run(text=True)`` decodes them: the locale's encoding,
    universal newlines."""
    data = base64.b64decode(encoded).decode(locale.getpreferredencoding(False))
    return data.replace("\r\n", "\n").replace("\r", "\n")


_the_server: _Server | None = None
_server_lock = threading.Lock()


def _server() -> _Server:
    global _the_server
    with _server_lock:
        if _the_server is None or not _the_server.serving:
            _the_server = _Server()
            atexit.register(_the_server.close)
        return _the_server


# -- the serving process ---------------------------------------------------------------


def serve() -> None:
    """Read one request per line on stdin, fork a child per command, answer on stdout."""
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    for line in requests:
        request = json.loads(line)
        out, err = _scratch_file(), _scratch_file()
        pid = os.fork()
        if pid == 0:
            _become_the_command(request, out, err)
        timed_out, returncode = _wait(pid, float(request["timeout"]))
        reply: dict[str, Any] = {
            "returncode": returncode,
            "timed_out": timed_out,
            "stdout": base64.b64encode(out.read_bytes()).decode(),
            "stderr": base64.b64encode(err.read_bytes()).decode(),
        }
        out.unlink()
        err.unlink()
        replies.write(json.dumps(reply).encode() + b"\n")
        replies.flush()


def _scratch_file() -> Path:
    fd, path = tempfile.mkstemp(prefix="dormant-cli-")
    os.close(fd)
    return Path(path)


def _wait(pid: int, timeout: float) -> tuple[bool, int]:
    """The child's exit code as ``subprocess`` gives it (minus the signal that ended
    it), after killing it past ``timeout``."""
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return not ready, os.waitstatus_to_exitcode(status)


def _become_the_command(request: dict[str, Any], out: Path, err: Path) -> None:
    """In the forked child: the command's environment, directory and standard streams,
    then the console script's ``main``, then the end of a process (never returns)."""
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        for fd, path in ((1, out), (2, err)):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        os.close(devnull)
        import dormant.tasks.cli as cli_module
        from dormant.tasks.cli import main

        # As ``python -m dormant.tasks.cli`` (``command_line``) sees itself, which is how
        # its usage lines name it.
        sys.argv = [str(cli_module.__file__), *request["args"]]
        sys.modules["__main__"].__package__ = "dormant.tasks"
    except BaseException:
        os._exit(70)  # could not become the command: nothing of the test's ran
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:
        traceback.print_exc()  # as the interpreter reports an uncaught exception
        code = 1
    _end_as_a_process_ends(code)


def _exit_code(exc: SystemExit) -> int:
    """The status the interpreter exits with on ``exc`` (a text is printed, status 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _end_as_a_process_ends(code: int) -> None:
    """What the interpreter does at exit that a command can see: wait for its
    non-daemon threads, run its atexit functions, flush its streams. Not the teardown
    of every object of a process that has imported this much, a third of a second in
    a forked copy, which nothing of a command's behaviour depends on."""
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    serve()

# mypy: disable-error-code="untyped-decorator,no-untyped-call"
"""Loaded into the fault tests' workers (``--include``): a job that records every run
by its idempotency key, and kill points at exact places of the trigger path, chosen by
the worker's environment (test code only; nothing here is in the product):

``DORMANT_TEST_JOB_LOG`` — a file each run of ``fault-record`` appends its idempotency
key to (one ``write`` of one short line with ``O_APPEND``: lines never interleave), so a
test counts job runs per key: a key seen twice is an at-least-once redelivery.

``DORMANT_TEST_POISON`` — a file; while it exists, a trigger whose variables name
``poison`` is a poison one (issue 24, row 1): a start with ``"poison": "hang"`` never
finishes (it sleeps and swallows the soft time limit, as FEEL work in C code that never
sees it would), so only the hard time limit ends it, with its pool process; a message
with ``"poison": "kill"`` SIGKILLs its own pool process (the OOM killer's stand-in).
Deleting the file is the fix an operator makes before retrying them.

``DORMANT_TEST_KILL_AT`` — SIGKILL this worker's whole process group, once (a marker
file next to the log says it happened), at:

* ``dispatch-committed``: a trigger's transaction that dispatches a job has committed,
  and its outbox rows are not yet published;
* ``job-done``: a job's body finished, its result not yet applied;
* ``result-applied``: the result is committed, the job's message not yet acknowledged.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded

from dormant.persistence.routing import Router
from dormant.persistence.store import Store
from dormant.tasks import job_results, triggers
from dormant.tasks.app import app
from dormant.tasks.jobs import idempotency_key

KILL_AT = os.environ.get("DORMANT_TEST_KILL_AT", "")
POISON = os.environ.get("DORMANT_TEST_POISON", "")
LOG = os.environ.get("DORMANT_TEST_JOB_LOG", "")


def _die(point: str) -> None:
    if KILL_AT != point or not LOG:
        return
    marker = Path(LOG + f".killed-{point}")
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os.killpg(os.getpgid(0), signal.SIGKILL)


@app.task(name="fault-record", bind=True)
def record(self: Task, **_: Any) -> dict[str, Any]:
    key = idempotency_key(self) or "?"
    if LOG:
        fd = os.open(LOG, os.O_CREAT | os.O_APPEND | os.O_WRONLY)
        os.write(fd, (key + "\n").encode())
        os.close(fd)
    _die("job-done")
    return {"recorded": True}


_publish_rows = triggers.publish_rows


def _publish_rows_then_maybe_not(rows: Iterable[Any]) -> int:
    rows = list(rows)
    if rows:
        _die("dispatch-committed")
    return _publish_rows(rows)


_report = job_results.report


def _report_then_maybe_die(instance_id: str, trigger: Any, trigger_id: str, **kw: Any) -> None:
    _report(instance_id, trigger, trigger_id, **kw)
    _die("result-applied")


if KILL_AT:
    triggers.publish_rows = _publish_rows_then_maybe_not  # type: ignore[assignment]
    job_results.report = _report_then_maybe_die  # type: ignore[assignment]


_start = Store.start
_message = Router.message


def _start_or_hang(self: Store, new: Any, *args: Any, **kwargs: Any) -> Any:
    while new.variables.get("poison") == "hang" and os.path.exists(POISON):
        try:
            time.sleep(60)
        except SoftTimeLimitExceeded:
            continue
    return _start(self, new, *args, **kwargs)


def _message_or_die(self: Router, name: str, key: Any, variables: Any, **kwargs: Any) -> Any:
    if (variables or {}).get("poison") == "kill" and os.path.exists(POISON):
        # Mid-work, as the OOM killer strikes: a pool process killed before the main
        # process saw it take the task leaves the message reserved until the
        # visibility timeout (Celery's race, not the one under test).
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    return _message(self, name, key, variables, **kwargs)


if POISON:
    Store.start = _start_or_hang  # type: ignore[method-assign]
    Router.message = _message_or_die  # type: ignore[method-assign]


def runs(log: Path) -> dict[str, int]:
    """Job runs per idempotency key."""
    out: dict[str, int] = {}
    if log.exists():
        for line in log.read_text().split():
            out[line] = out.get(line, 0) + 1
    return out


@app.task(name="fault-flaky", bind=True)
def flaky(self: Task, **_: Any) -> dict[str, Any]:
    """Fails the first run per instance (an incident, retried by the engine's policy as
    a new wait), succeeds afterwards: marker files next to ``DORMANT_TEST_JOB_LOG``."""
    key = idempotency_key(self) or "?:?:?"
    instance = key.split(":", 1)[0].replace("/", "_")
    marker = Path(LOG + ".flaky-" + instance)
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return {"flaky": "ok"}
    raise RuntimeError("the first run of a flaky job fails")


@app.task(name="fault-unencodable")
def unencodable(what: str = "set", **_: Any) -> Any:
    """Returns what no job outcome can carry (tests/faults/test_job_survival.py)."""
    if what == "set":
        return {"s": {1, 2}}
    if what == "big":
        return {"big": 10**5000}
    if what == "object":
        return {"o": object()}
    return 10**5000  # a bare integer past Python's digit limit


@app.task(name="fault-oom")
def out_of_memory(**_: Any) -> dict[str, Any]:
    """Asks for a petabyte: a real ``MemoryError``, more than any address space holds.
    First writes its process id to ``DORMANT_TEST_JOB_LOG`` + ``.oom-pids``, so a test
    sees that process replaced afterwards."""
    if LOG:
        fd = os.open(LOG + ".oom-pids", os.O_CREAT | os.O_APPEND | os.O_WRONLY)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
    block = bytearray(1 << 50)
    return {"size": len(block)}


@app.task(name="fault-gate", bind=True)
def gate(self: Task, **_: Any) -> dict[str, Any]:
    """Records its run like ``fault-record``, then waits (at most a minute) for the file
    ``DORMANT_TEST_JOB_LOG`` + ``.open`` before it returns: the test decides when the
    job's result is reported (tests/faults/test_transient_worker.py)."""
    import time

    key = idempotency_key(self) or "?"
    fd = os.open(LOG, os.O_CREAT | os.O_APPEND | os.O_WRONLY)
    os.write(fd, (key + "\n").encode())
    os.close(fd)
    opened = Path(LOG + ".open")
    deadline = time.monotonic() + 60
    while not opened.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"gated": True}

"""Shared pieces of the fault tests in their newer shapes (pause, partition, clock,
connection kill, recovery windows, backlog): the one-line report every fault test
prints, and a sender that records when each trigger was sent so a test can say how
long recovery took.

The counting itself is tests/faults/test_faults.py's: each applied trigger increments a
counter variable and leaves one ``Hydrated`` fact, and the two must agree.
"""

from __future__ import annotations

import signal
import time

from tests.faults.test_faults import counts, loop_instances, settle
from tests.integration.conftest import BEAT_READY, WORKER_READY, Proc, Stack

__all__ = ["counts", "freeze", "loop_instances", "report_line", "settle", "thaw"]


def report_line(what: str, c: dict[str, int], worst_recovery: float, extra: str = "") -> None:
    """Print the fault's one line, then hold it to exactly-once."""
    print(
        f"\nFAULT {what}: sent={c['sent']} applied={c['applied']} "
        f"duplicates={c['duplicates']} lost={c['lost']} "
        f"worst_recovery={worst_recovery:.1f}s{extra}"
    )
    assert c["duplicates"] == 0, c
    assert c["lost"] == 0, c
    assert c["sent"] == c["applied"], c
    assert c["facts_disagree"] == 0, c


def freeze(proc: Proc) -> None:
    """SIGSTOP the process group (the Celery main process and its pool children)."""
    import os

    assert proc.popen is not None
    os.killpg(proc.popen.pid, signal.SIGSTOP)


def thaw(proc: Proc) -> None:
    import os

    assert proc.popen is not None
    os.killpg(proc.popen.pid, signal.SIGCONT)


def applied_total(stack: Stack, ids: dict[str, str], var: str) -> int:
    return sum(int(stack.client.instance(iid).variables.get(var, 0)) for iid in ids.values())


def wait_applied(
    stack: Stack, ids: dict[str, str], var: str, at_least: int, timeout: float
) -> float:
    """Seconds until ``at_least`` triggers are applied across ``ids``."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while applied_total(stack, ids, var) < at_least:
        if time.monotonic() > deadline:
            raise AssertionError(f"{var}: fewer than {at_least} applied after {timeout}s")
        time.sleep(0.2)
    return time.monotonic() - t0


def via(url: str, port: int) -> str:
    """``url`` with its host:port replaced by the proxy's loopback port."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


def worker_with(stack: Stack, *, concurrency: int = 2, **env: str) -> Proc:
    """A worker whose environment differs from the stack's by ``env`` (the stack's own
    environment is left as it was, for the Client and the other processes)."""
    saved = stack.env
    stack.env = dict(saved, **env)
    try:
        return stack.worker(concurrency=concurrency)
    finally:
        stack.env = saved


def revive(stack: Stack, proc: Proc) -> Proc:
    """Start ``proc`` again, same argv and environment, if it died (a process manager's
    ``restart: unless-stopped``); returns the live one."""
    if proc.popen is not None and proc.popen.poll() is None:
        return proc
    stack.procs.remove(proc)
    fresh = Proc(proc.name + "r", proc.argv, proc.env, proc.cwd)
    stack.procs.append(fresh)
    return fresh.start(ready=BEAT_READY if proc.name.startswith("beat") else WORKER_READY)


def included_worker(stack: Stack, *, concurrency: int = 2, **env: str) -> Proc:
    """A worker that also loads tests/faults/fault_jobs.py (the recording job and the
    kill points), with ``env`` on top of the stack's environment."""
    import tests.integration.conftest as conftest

    saved = conftest.JOBS_MODULE
    conftest.JOBS_MODULE = saved + ",tests.faults.fault_jobs"  # read when the argv is built
    try:
        return worker_with(stack, concurrency=concurrency, **env)
    finally:
        conftest.JOBS_MODULE = saved


def instance_status(stack: Stack, instance_id: str) -> str | None:
    """The instance's status, or None while no trigger has written its row yet."""
    try:
        return str(stack.client.instance(instance_id).status)
    except Exception:  # not applied yet: no instance row
        return None

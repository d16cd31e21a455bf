"""Stacks for the trust-boundary tests of the shell (job namespace, time bounds, plain
Celery producers): the integration stacks of tests/integration/conftest.py, with
workers that also load ``tests.security.security_jobs`` and take extra environment.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import JOBS_MODULE, Proc, Stack, _urls
from tests.integration.waitkit import end, esc, model, start

__all__ = ["SECURITY_JOBS", "job_model", "sec_stack", "start_worker"]

SECURITY_JOBS = f"{JOBS_MODULE},tests.security.security_jobs"


def start_worker(
    stack: Stack,
    *,
    name: str = "worker",
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
    command: str = "worker",
) -> Proc:
    """A ``dormant worker`` (or ``dev``) of ``stack`` loading the security jobs."""
    argv = stack.dormant(command, "--include", SECURITY_JOBS, "--loglevel", "INFO", *args)
    proc = Proc(f"{name}-{len(stack.procs)}", argv, {**stack.env, **(env or {})}, stack.tmp)
    stack.procs.append(proc)
    return proc.start()


@pytest.fixture(scope="module", params=["pg_redis", "embedded"])
def sec_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """One worker (concurrency 2) and one beat per module and shape."""
    tmp: Path = tmp_path_factory.mktemp(f"sec-{request.param}")
    with _urls(request.param, tmp, request) as urls:
        s = Stack(*urls, tmp)
        try:
            start_worker(s, args=("--concurrency", "2"))
            s.beat()
            yield s
        finally:
            s.close()


def job_model(
    key: str, job_type: str, *, headers: dict[str, str] | None = None, retries: int = 2
) -> str:
    """start → service task ``job`` (``job_type``, ``retries``, task headers) → end."""
    header_xml = ""
    if headers:
        header_xml = (
            "<zeebe:taskHeaders>"
            + "".join(
                f'<zeebe:header key="{esc(k)}" value="{esc(v)}"/>' for k, v in headers.items()
            )
            + "</zeebe:taskHeaders>"
        )
    job = (
        f'<bpmn:serviceTask id="job"><bpmn:extensionElements><zeebe:taskDefinition '
        f'type="{esc(job_type)}" retries="{retries}"/>{header_xml}</bpmn:extensionElements>'
        "</bpmn:serviceTask>"
    )
    return model(key, start() + job + end(), [("start", "job"), ("job", "end")])

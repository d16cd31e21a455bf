"""The documentation's Python runs as written: every ```python block of README.md, and
the docs' job definitions a user copies into a module, each in a fresh interpreter on
the embedded default with a worker running ``dormant.tasks.examples.order_jobs`` — the
README's producer snippet deploys ``order.bpmn`` from its working directory, so the
test puts the shipped example there."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import WORKER_READY, Proc, Stack, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(doc: str) -> list[str]:
    return BLOCK.findall((REPO / doc).read_text())


# Blocks that reference a caller's own objects (an ``incident_id`` in hand, a ``gateway``
# called inside a job body only) are not listed unless their top level runs alone.
DOC_JOBS = [
    ("docs/incidents.md", 1, "charge-card"),
    ("docs/operations.md", 0, "nightly-report"),
]


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(
        "embedded",
        f"sqlite:///{tmp_path / 'dormant.sqlite3'}",
        f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}",
        tmp_path,
    )
    try:
        yield s
    finally:
        s.close()


def run(stack: Stack, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=stack.tmp,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_the_readme_has_its_two_snippets() -> None:
    blocks = python_blocks("README.md")
    assert len(blocks) == 2
    assert all("from dormant import" in block for block in blocks)


def test_the_readme_producer_snippet_runs_as_written(embedded: Stack) -> None:
    shutil.copy(REPO / "tasks" / "examples" / "order.bpmn", embedded.tmp / "order.bpmn")
    # The README's own worker line; on SQLite the worker migrates before the beat starts.
    worker = Proc(
        "worker",
        embedded.dormant("worker", "--include", "dormant.tasks.examples.order_jobs"),
        embedded.env,
        embedded.tmp,
    )
    embedded.procs.append(worker)
    worker.start(ready=WORKER_READY)
    embedded.beat()
    producer = python_blocks("README.md")[0]
    done = run(embedded, producer)
    assert done.returncode == 0, done.stdout + done.stderr + embedded.diagnostics()
    assert done.stdout.strip() == "completed", done.stdout
    # start_many's o-2 and o-3 skip the review and take their buffered payments.
    wait_for(
        lambda: len(embedded.client.instances(status="completed", key="order")) == 3,
        30,
        what="the three orders to complete",
    )


def test_the_readme_job_snippet_registers_a_job_that_throws_a_bpmn_error(
    embedded: Stack,
) -> None:
    job = python_blocks("README.md")[1]
    check = (
        "\nfrom dormant import BpmnError\n"
        "assert 'charge-card' in app.tasks\n"
        "assert charge_card('o-1', 5.0) == {'receipt': 'r-o-1'}\n"
        "try:\n    charge_card('o-1', 20_000)\n"
        "except BpmnError as exc:\n    print(exc.code)\n"
    )
    done = run(embedded, job + check)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "limit-exceeded"


@pytest.mark.parametrize(("doc", "index", "task"), DOC_JOBS)
def test_a_docs_job_definition_runs_as_written(
    embedded: Stack, doc: str, index: int, task: str
) -> None:
    block = python_blocks(doc)[index]
    done = run(embedded, block + f"\nassert {task!r} in app.tasks\n")
    assert done.returncode == 0, done.stdout + done.stderr

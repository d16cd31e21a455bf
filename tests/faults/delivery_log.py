# mypy: disable-error-code="untyped-decorator"
"""Loaded into a fault test's worker (``--include``): every delivery of a task that
carries an inbox id is written to ``DORMANT_TEST_DELIVERY_LOG`` (one ``write`` of one
short line with ``O_APPEND``: lines never interleave), so a test counts deliveries per
trigger, re-sends and broker redeliveries alike. Test code only.
"""

from __future__ import annotations

import os
from typing import Any

from celery.signals import task_prerun


@task_prerun.connect(weak=False)
def _delivered(task: Any = None, kwargs: Any = None, **_: Any) -> None:
    path = os.environ.get("DORMANT_TEST_DELIVERY_LOG")
    inbox_id = (kwargs or {}).get("inbox_id")
    if not path or not inbox_id:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{getattr(task, 'name', '?')} {inbox_id}\n".encode())
    finally:
        os.close(fd)


def deliveries(path: os.PathLike[str] | str) -> dict[str, int]:
    """Deliveries per inbox id, as the workers wrote them."""
    counts: dict[str, int] = {}
    if not os.path.exists(path):
        return counts
    with open(path) as f:
        for line in f:
            _, _, inbox_id = line.strip().partition(" ")
            counts[inbox_id] = counts.get(inbox_id, 0) + 1
    return counts

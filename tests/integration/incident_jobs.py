# mypy: disable-error-code="untyped-decorator"
"""Job tasks for the incident tests (loaded by every integration worker, see conftest).

Each fails until its ``flag`` file exists — a switch outside the instance, as an
operator's fix would be — and appends one line per run to ``<flag>.runs`` (the item,
then the idempotency key), so a test counts exactly how often a job ran. The error
message names no variable value: payload values never reach a log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery import Task

from dormant.tasks.app import app
from dormant.tasks.jobs import idempotency_key


def _run(task: Task, flag: str, item: str | None, fails: bool) -> dict[str, Any]:
    with open(f"{flag}.runs", "a") as out:
        out.write(f"{item or '-'} {idempotency_key(task)}\n")
    if fails and not Path(flag).exists():
        raise RuntimeError("the flag is not set")
    return {"charged": True}


@app.task(name="inc-flag", bind=True)
def flag_job(self: Task, flag: str, item: str | None = None, **_: Any) -> dict[str, Any]:
    """Fails until the flag is set; inside a multi-instance only the item 'bad' fails."""
    return _run(self, flag, item, item is None or item == "bad")


@app.task(
    name="inc-autoretry",
    bind=True,
    autoretry_for=(RuntimeError,),
    max_retries=1,
    default_retry_delay=0,
)
def autoretry_job(self: Task, flag: str, **_: Any) -> dict[str, Any]:
    """The same, with Celery's own retries: only its final failure reaches the engine."""
    return _run(self, flag, None, True)


@app.task(name="inc-undo", bind=True)
def undo_job(self: Task, flag: str, **_: Any) -> dict[str, Any]:
    """A compensation handler: counts its runs in ``<flag>.undo.runs``."""
    return _run(self, f"{flag}.undo", None, False)

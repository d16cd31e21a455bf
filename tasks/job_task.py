# mypy: disable-error-code="misc"
"""The base class of every task of dormant's Celery app (``task_cls``): for a job it
checks the job's result, and its memory failure, before Celery handles either.

Why here, inside the task's own call (docs/incidents.md, "What a job may return"): what a
job returns is sent to the pool's parent process, logged, put in the task-succeeded
event and, where a result backend is set, stored, each time encoded by Celery. A value
that cannot be encoded (a set, an object, ``10 ** 5000``, past Python's limit on
integer digits) failed inside that handling, where no signal reports it: the job had
no outcome and its instance waited for the job timeout. A ``MemoryError`` is re-raised
by Celery's tracer past its own failure handling, and ended the pool's result handler
and with it the worker (issue 24, row 7). Both become ordinary exceptions of the job
here, so ``task_failure`` reports a ``JobFailed`` (tasks/job_results.py): the engine's
retries run and their exhaustion is an incident whose cause names what was wrong.

After a ``MemoryError`` the pool process is not trusted to run more work (the failed
allocation may have left its heap fragmented or a library's state half-built): it
retires itself by billiard's graceful restart path, the per-process event
``worker_pool_restarts`` gives it (tasks/app.py). Billiard reads that event before the
process waits for its next task, so the process first reports the job's failure like
any other, then exits with status 0 between tasks, and the pool starts a fresh process
in its place: no signal, no task in flight lost, nothing redelivered.

Tasks that are not jobs (no job headers: dormant's own tasks, or a user's task sent
directly) are left exactly as Celery runs them.
"""

from __future__ import annotations

import logging
import os
from typing import Any, ClassVar

from billiard.process import current_process
from celery import Task

from dormant.engine_core.errors import InvalidVariables
from dormant.engine_core.inputs import DEFAULT_LIMITS, Limits, check_value, check_variables
from dormant.tasks.job_headers import job_context

__all__ = ["JobOutOfMemory", "JobTask", "UnencodableJobResult", "retire_this_process"]

log = logging.getLogger("dormant.jobs")


class UnencodableJobResult(Exception):
    """A job returned what cannot be stored as variables (the message says where)."""


class JobOutOfMemory(Exception):
    """A job raised ``MemoryError``; an ``Exception``, so Celery reports it as a failure."""


class JobTask(Task):
    """Every task of the app; checks a job's outcome (see the module docstring)."""

    # Set by tasks/app.py from the process's settings (``DORMANT_MAX_VARIABLES_*``).
    limits: ClassVar[Limits] = DEFAULT_LIMITS

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if job_context(self) is None:
            return super().__call__(*args, **kwargs)
        try:
            result = super().__call__(*args, **kwargs)
        except MemoryError as exc:
            retire_this_process(f"job {self.name} ran out of memory")
            # Raised from ``None``: the traceback would keep the job's frames (and what
            # they allocated) alive while the failure is reported.
            raise JobOutOfMemory(f"the job ran out of memory (MemoryError: {exc})") from None
        return checked_result(result, self.limits)


def retire_this_process(why: str) -> bool:
    """Ask billiard to end this pool process before it takes another task (module
    docstring); False where there is no such path: not a pool process (a task run
    eagerly, a solo or threads pool), or a worker started without pool restarts."""
    worker = getattr(current_process(), "_target", None)
    event = getattr(worker, "_shutdown", None)
    if event is None or not hasattr(event, "set"):
        log.warning("%s; this process cannot be replaced and keeps running", why)
        return False
    event.set()
    log.warning("%s; pool process %d exits after reporting it and is replaced", why, os.getpid())
    return True


def checked_result(result: Any, limits: Limits) -> dict[str, Any]:
    """A job's result as the plain JSON object its outcome carries, or
    ``UnencodableJobResult`` naming what is wrong. A dict is checked as variables;
    ``None`` is no variables; any other value is checked to be JSON and carries no
    variables (as before: only a dict is merged)."""
    try:
        if result is None:
            return {}
        if isinstance(result, dict):
            return check_variables(result, "the job's result", limits)
        check_value(result, "the job's result", limits)
        return {}
    except InvalidVariables as exc:
        raise UnencodableJobResult(str(exc)) from None
    except (ValueError, TypeError, RecursionError, MemoryError) as exc:  # the encoder's own
        raise UnencodableJobResult(
            f"the job's result cannot be encoded as JSON: {type(exc).__name__}: {exc}"[:500]
        ) from None

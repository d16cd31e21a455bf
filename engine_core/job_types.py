"""Job types are a namespace of their own: a model may never name an operator's task.

A job type becomes the name of the Celery task a worker runs. The same workers also
register dormant's own tasks (``dormant.cancel``, ``dormant.incident.resolve``,
``dormant.apply_trigger``, ...: operator power over *any* instance) and Celery's
built-ins (``celery.starmap``, ``celery.chain``, ...: which call other tasks by name).
If a model could name one of those, a model author would be an operator. So both
namespaces are reserved: a static job type in one is refused at deploy, and a job type
computed by FEEL at run time that lands in one is an incident at its element. The
shell checks again at dispatch, so a row written before this rule existed cannot slip
through either.

The check folds case and ignores surrounding blanks: a name that differs from a
reserved one only in those is refused too, so the rule never depends on how a broker
or a future Celery compares names.
"""

from __future__ import annotations

__all__ = ["RESERVED_JOB_TYPE_PREFIXES", "reserved_job_type"]

# dormant's engine and management tasks, and Celery's built-in canvas/maintenance tasks.
RESERVED_JOB_TYPE_PREFIXES: tuple[str, ...] = ("dormant.", "celery.")


def reserved_job_type(job_type: str) -> str | None:
    """Why ``job_type`` cannot be a job (a sentence to put in an error), or None."""
    folded = job_type.strip().casefold()
    for prefix in RESERVED_JOB_TYPE_PREFIXES:
        if folded.startswith(prefix) or folded == prefix.rstrip("."):
            owner = "dormant's engine tasks" if prefix == "dormant." else "Celery's built-ins"
            return (
                f"job type {job_type!r} is in the reserved namespace {prefix!r} "
                f"({owner}); a job type must name a task registered as a job"
            )
    return None

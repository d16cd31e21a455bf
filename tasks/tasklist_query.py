"""The tasklist's one query: open user tasks, narrowed to a process, most urgent first.

The console's ``/tasks`` (tasks/console/tasklist.py) and ``dormant tasks list``
(tasks/cli.py) list the same tasks in the same order through this module, so a task
that heads one heads the other (issue 28: "due dates and priorities sorted and shown").
The filters on the task itself (assignee, candidates, due date) are the Client's
(``Client.user_tasks``); the process a task belongs to is its instance's, read in one
bounded statement per 500 instances (persistence/console_queries.py
``instance_processes``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from dormant.engine_core.views import UserTaskView

__all__ = ["arrange", "task_order"]

_FAR = datetime.max.replace(tzinfo=UTC)


def task_order(task: UserTaskView) -> tuple[datetime, int, datetime]:
    """Most urgent first: the earliest due date (none: last), then the highest
    priority, then the oldest."""
    return (task.due_date or _FAR, -task.priority, task.created_at or _FAR)


def arrange(
    tasks: Iterable[UserTaskView],
    processes: Mapping[str, tuple[str, int]],
    process: str | None = None,
) -> list[UserTaskView]:
    """``tasks`` of ``process`` (every process when None), most urgent first.
    ``processes``: each task's instance → (process key, version)."""
    kept = [
        t for t in tasks if process is None or processes.get(t.instance_id, ("", 0))[0] == process
    ]
    return sorted(kept, key=task_order)

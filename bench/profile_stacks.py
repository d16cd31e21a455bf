"""Where a worker's time goes: sum ``py-spy record --format raw`` stacks by owner.

``BENCH_PROFILE_DIR=DIR bench/bench_triggers.py`` records each dormant worker it starts
(bench/harness.py); this reads ``DIR/*.txt`` and prints, per worker, two tables over
the samples of its pool children (the processes that run triggers):

* by owner of the innermost frame: the driver, SQLAlchemy, Celery, the engine, ...;
* by the innermost dormant frame and the library it called there: which of dormant's
  statements or calls the time went to.

    .venv/bin/python bench/profile_stacks.py DIR [--top 20]

py-spy samples a process while it runs or waits in a system call, so the driver's share
includes the round trips to PostgreSQL (on a shared machine, its backends' CPU too).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

# (label, the start of a frame's file path), innermost frame first, first match wins.
OWNERS: tuple[tuple[str, str], ...] = (
    ("psycopg (driver; includes waiting on the server)", "psycopg/"),
    ("SQLAlchemy", "sqlalchemy/"),
    ("pydantic", "pydantic"),
    ("kombu (broker client)", "kombu/"),
    ("redis client", "redis/"),
    ("billiard (prefork pool)", "billiard/"),
    ("Celery", "celery/"),
    ("dormant engine_core", "dormant/engine_core/"),
    ("dormant persistence", "dormant/persistence/"),
    ("dormant tasks", "dormant/tasks/"),
    ("json", "json/"),
    ("logging", "logging/"),
)
# py-spy names a frame by its module's path: dormant's modules are ``dormant/...``.
DORMANT = ("dormant/engine_core/", "dormant/persistence/", "dormant/tasks/")


def _path(frame: str) -> str:
    """``func (path/to/file.py:12)`` -> ``path/to/file.py:12``."""
    return frame.rpartition("(")[2].rstrip(")")


def _owner(frames: list[str]) -> str:
    for frame in reversed(frames):
        path = _path(frame)
        for label, prefix in OWNERS:
            if path.startswith(prefix):
                return label
    return "other (stdlib, interpreter)"


def _dormant_call(frames: list[str]) -> str | None:
    """The innermost dormant frame and what it called (a library, or itself)."""
    for i in range(len(frames) - 1, -1, -1):
        path = _path(frames[i])
        if path.startswith(DORMANT) and not path.startswith("dormant/tasks/cli.py"):
            callee = _path(frames[i + 1]).split("/")[0] if i + 1 < len(frames) else "itself"
            return f"{frames[i]} -> {callee}"
    return None


def summarise(path: Path, top: int) -> None:
    owners: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        frames = stack.split(";")
        # A pool child's stack starts with two process frames: the worker's and its own.
        if sum(1 for f in frames if f.startswith("process ")) < 2:
            continue
        count = int(count_text)
        total += count
        owners[_owner(frames)] += count
        call = _dormant_call(frames)
        calls[call or "(no dormant frame: Celery between tasks)"] += count
    print(f"== {path.stem}: {total} samples of its pool children")
    for label, count in owners.most_common():
        print(f"  {count / max(total, 1):6.1%}  {label}")
    print(f"  by the innermost dormant frame (top {top}):")
    for label, count in calls.most_common(top):
        print(f"  {count / max(total, 1):6.1%}  {label}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    files = sorted(args.directory.glob("*.txt"))
    if not files:
        print(f"no profiles in {args.directory}", file=sys.stderr)
        return 1
    for path in files:
        summarise(path, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

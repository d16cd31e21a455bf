"""What a ``dormant`` command imports (bench/bench_cli.py times it; this pins why it is
fast): ``--help`` imports no database, broker or FEEL library, and the read-only lists
read the database without Celery, kombu or the FEEL grammar. Untimed: a module list is
the same on a loaded machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration

# Runs one command as the console script does, then prints which heavy libraries it
# imported on the way.
PROBE = """
import json, sys
from dormant.tasks.cli import main
sys.argv = ["dormant", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    if exc.code:
        raise
print(json.dumps(sorted(m for m in sys.modules if "." not in m)), file=sys.stderr)
"""
BROKER = {"celery", "kombu", "redis"}
FEEL_GRAMMAR = {"lark"}
SERVERS = {"starlette", "uvicorn", "prometheus_client"}
DATABASE = {"sqlalchemy", "alembic", "pydantic", "psycopg"}


def loaded(tmp_path: Path, *args: str) -> set[str]:
    """The top-level modules ``dormant ARGS`` imported, on the embedded default."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DORMANT_DATABASE_URL", "DORMANT_BROKER_URL")
    }
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_help_imports_no_database_broker_or_feel(tmp_path: Path) -> None:
    modules = loaded(tmp_path, "--help")
    assert "click" in modules  # the probe saw the command run
    assert modules & (BROKER | FEEL_GRAMMAR | SERVERS | DATABASE) == set()


@pytest.mark.parametrize("command", [("instances", "list"), ("incidents", "list")])
def test_the_lists_read_the_database_without_celery_or_feel(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    loaded(tmp_path, *command)  # the first run makes and migrates the embedded database
    assert (tmp_path / "dormant.sqlite3").exists()
    modules = loaded(tmp_path, *command)
    assert "sqlalchemy" in modules  # it read the database
    assert modules & (BROKER | FEEL_GRAMMAR | SERVERS) == set()
    assert "alembic" not in modules  # a schema that reads needs no migration check

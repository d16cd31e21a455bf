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
syntax = sys.modules.get("dormant.engine_core.feel.syntax")
built = syntax is not None and syntax.parser.cache_info().currsize > 0
modules = sorted(m for m in sys.modules if "." not in m)
print(json.dumps(modules + (["<the FEEL parser built>"] if built else [])), file=sys.stderr)
"""
# The pseudo-module the probe adds when the command built the FEEL parser from its
# grammar (engine_core/feel/syntax.py, ``parser``), which only evaluating FEEL needs.
FEEL_PARSER_BUILT = "<the FEEL parser built>"
BROKER = {"celery", "kombu", "redis"}
FEEL_GRAMMAR = {"lark"}
SERVERS = {"starlette", "uvicorn", "prometheus_client"}
DATABASE = {"sqlalchemy", "alembic", "pydantic", "psycopg"}
MODEL_WITH_FEEL = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d"
  targetNamespace="t">
  <bpmn:process id="feel" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="end">
      <bpmn:conditionExpression>= x &gt; 1</bpmn:conditionExpression>
    </bpmn:sequenceFlow>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>
"""


def probed(tmp_path: Path, code: str, *args: str) -> tuple[str, set[str]]:
    """What ``python -c CODE ARGS`` printed, and the top-level modules it imported (the
    last line CODE prints to stderr), on the embedded default."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DORMANT_DATABASE_URL", "DORMANT_BROKER_URL")
    }
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, set(json.loads(done.stderr.strip().splitlines()[-1]))


def loaded(tmp_path: Path, *args: str) -> set[str]:
    """The top-level modules ``dormant ARGS`` imported."""
    return probed(tmp_path, PROBE, *args)[1]


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


@pytest.mark.parametrize("command", [("tasks", "list"), ("audit", "list")])
def test_commands_through_the_client_check_the_schema_without_alembic_or_the_feel_parser(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """The Client imports the engine, FEEL's modules with it; building the parser from
    its grammar and reading the migration scripts through alembic was a third of such a
    command's time (persistence/migrate.py, engine_core/feel/syntax.py)."""
    loaded(tmp_path, *command)
    modules = loaded(tmp_path, *command)
    assert "sqlalchemy" in modules  # it read the database
    assert "alembic" not in modules
    assert FEEL_PARSER_BUILT not in modules


def test_a_deploy_builds_the_feel_parser_it_needs(tmp_path: Path) -> None:
    """The other side of building it on first use: a command that compiles FEEL does."""
    model = tmp_path / "flow.bpmn"
    model.write_text(MODEL_WITH_FEEL)
    modules = loaded(tmp_path, "deploy", str(model))
    assert FEEL_PARSER_BUILT in modules


@pytest.mark.parametrize("command", ["worker", "beat"])
def test_worker_and_beat_run_celerys_command_without_its_plugins(
    tmp_path: Path, command: str
) -> None:
    """``dormant worker``, ``beat`` and ``dev`` run Celery's one command, not its whole
    command group, which imports every plugin's command (Flower, the amqp shell's
    prompt toolkit) at each start (tasks/cli.py, ``_run_celery``)."""
    probe = (
        "import json, sys\n"
        "from dormant.tasks.cli import _run_celery\n"
        f"_run_celery([{command!r}, '--help'])\n"
        "print(json.dumps(sorted(m for m in sys.modules if '.' not in m)), file=sys.stderr)\n"
    )
    output, modules = probed(tmp_path, probe)
    assert f"celery {command}" in output  # Celery's own command answered
    assert "celery" in modules
    assert modules & {"flower", "click_repl", "prompt_toolkit"} == set()

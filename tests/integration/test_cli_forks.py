"""The tests' forked ``dormant`` commands (tests/cli_forks.py) answer as a fresh
interpreter answers: the same exit code, output and error line, with the caller's
environment and working directory."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import cli_forks
from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration


def fresh(
    args: tuple[str, ...], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_forks.command_line(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_a_forked_command_answers_as_a_fresh_interpreter(tmp_path: Path) -> None:
    # No database URL: the embedded default, made in the working directory.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DORMANT_DATABASE_URL", "DORMANT_BROKER_URL", "DORMANT_TEST_CLI_FORKS")
    }
    env["PYTHONPATH"] = str(REPO)
    model = tmp_path / "flow.bpmn"
    model.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
        'id="d" targetNamespace="t"><bpmn:process id="flow" isExecutable="true">'
        '<bpmn:startEvent id="s"/><bpmn:sequenceFlow id="f" sourceRef="s" targetRef="e"/>'
        '<bpmn:endEvent id="e"/></bpmn:process></bpmn:definitions>'
    )
    deployed = cli_forks.run(("deploy", str(model)), env, tmp_path)
    assert deployed.returncode == 0 and deployed.stdout.split() == ["flow", "1"], deployed
    for args in (
        ("instances", "list"),
        ("processes", "list"),
        ("incidents", "retry", "nope"),
        ("start", "nobody"),
        ("instances", "list", "--status", "sleeping"),
        ("--help",),
    ):
        forked, real = cli_forks.run(args, env, tmp_path), fresh(args, env, tmp_path)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            real.returncode,
            real.stdout,
            real.stderr,
        ), args
    assert (tmp_path / "dormant.sqlite3").exists()  # in the command's working directory
    assert forked.stdout.startswith("Usage: python -m dormant.tasks.cli ")


def test_a_command_past_its_timeout_is_killed_and_raises(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env["DORMANT_DATABASE_URL"] = f"sqlite:///{tmp_path / 'd.sqlite3'}"
    with pytest.raises(subprocess.TimeoutExpired):
        # ``db upgrade`` of a new file takes longer than a millisecond on any machine.
        cli_forks.run(("db", "upgrade"), env, tmp_path, timeout=0.001)
    after = cli_forks.run(("--help",), env, tmp_path)
    assert after.returncode == 0  # the server goes on serving

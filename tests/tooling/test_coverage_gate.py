"""CI's coverage gate (scripts/coverage_gate.py) on a repository made for the test: the
touched lines are counted from the diff base, printed per package, and engine_core's
under the bar fails the run, as does a diff base the clone does not have."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GATE = Path(__file__).resolve().parents[2] / "scripts" / "coverage_gate.py"

BEFORE = "def kept():\n    return 1\n"
AFTER = BEFORE + "\n\ndef run():\n    return 2\n\n\ndef never():\n    return 3\n"


# Without pytest-cov's variables: under ``--cov`` they would start its coverage in the
# subprocesses too, measuring them into the suite's data instead of the repository's.
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("COV_CORE")}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=repo,
        env=CLEAN_ENV,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose second commit adds two functions to engine_core, one of
    which the measured run calls, and to a module of the same name in tasks, which it
    never imports; returns it and its first commit (the diff base)."""
    for package in ("engine_core", "tasks"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "m.py").write_text(BEFORE)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.coverage.run]\nbranch = true\nsource = ["engine_core", "tasks"]\n'
    )
    (tmp_path / "run.py").write_text("from engine_core import m\n\nm.kept()\nm.run()\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "base")
    base = git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "engine_core" / "m.py").write_text(AFTER)
    (tmp_path / "tasks" / "m.py").write_text(AFTER)
    git(tmp_path, "commit", "-qam", "two functions")
    subprocess.run(
        [sys.executable, "-m", "coverage", "run", "run.py"], cwd=tmp_path, env=CLEAN_ENV, check=True
    )
    return tmp_path, base


def gate(repo: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GATE)],
        cwd=repo,
        env={**CLEAN_ENV, "DORMANT_COVERAGE_MIN_ENGINE_CORE": "0", **env},
        capture_output=True,
        text=True,
        check=False,
    )


def touched(output: str, package: str) -> list[str]:
    lines = output.split("diff coverage")[1].splitlines()
    return next(line for line in lines if line.startswith(package)).split()


def test_touched_lines_under_the_bar_fail(repo: tuple[Path, str]) -> None:
    path, base = repo
    done = gate(path, DORMANT_DIFF_BASE=base)
    # four touched lines measurable (two `def`s, two `return`s), never()'s return missed;
    # tasks/m.py, never imported, is told apart from engine_core/m.py and reported only
    assert touched(done.stdout, "engine_core") == [
        "engine_core",
        "4",
        "1",
        "75.0%",
        "UNDER",
        "95",
        "%",
    ]
    assert touched(done.stdout, "tasks") == ["tasks", "4", "4", "0.0%"]
    assert "not run: engine_core/m.py: 10" in done.stdout
    assert done.returncode == 1, done.stdout + done.stderr


def test_touched_lines_at_the_bar_pass(repo: tuple[Path, str]) -> None:
    path, base = repo
    (path / ".ci").mkdir()
    (path / ".ci" / "diff-coverage-base").write_text(base + "\n")
    done = gate(path, DORMANT_DIFF_COVERAGE_MIN_ENGINE_CORE="75")
    assert touched(done.stdout, "engine_core")[-1] == "ok"
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_base_the_clone_lacks_fails(repo: tuple[Path, str]) -> None:
    path, _ = repo
    done = gate(path, DORMANT_DIFF_BASE="0" * 40)
    assert "is not a commit of this clone" in done.stdout
    assert done.returncode == 1

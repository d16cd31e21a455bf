"""dormant is imported by one name: every module of the project, its tests, benches,
scripts and examples import ``dormant.<package>``, never a folder's bare name. A bare
``engine_core`` resolves only from a checkout's working directory (a wheel installs no
such name) and would load a second copy of every module beside ``dormant.engine_core``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BARE = {"engine_core", "persistence", "scheduler", "tasks"}
SKIPPED = {".venv", ".git", "node_modules", "dormant", "build"}


def bare_imports(path: Path, root: Path = ROOT) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [
            f"{path.relative_to(root)}:{node.lineno} {n}" for n in names if n.split(".")[0] in BARE
        ]
    return found


def test_nothing_imports_a_bare_folder_name() -> None:
    offenders = [
        use
        for path in sorted(ROOT.rglob("*.py"))
        if not SKIPPED & set(path.relative_to(ROOT).parts)
        for use in bare_imports(path)
    ]
    assert offenders == []


def test_the_check_sees_a_bare_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import tasks.app\nfrom engine_core import x\nfrom dormant.tasks import y\n")
    assert bare_imports(sample, tmp_path) == ["sample.py:1 tasks.app", "sample.py:2 engine_core"]

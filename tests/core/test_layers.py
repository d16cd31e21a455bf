"""The layering is a rule, so a test keeps it: imports point downward only, and the
pure core touches no I/O library, clock or environment."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ["engine_core", "persistence", "scheduler", "tasks"]  # bottom to top
IO_LIBRARIES = {
    "sqlalchemy",
    "celery",
    "kombu",
    "redis",
    "psycopg",
    "alembic",
    "requests",
    "httpx",
    "socket",
    "subprocess",
    "flower",
    "uuid",
    "random",
    "time",
}
IMPURE_CALLS = re.compile(
    r"os\.environ|datetime\.now\(|datetime\.utcnow\(|date\.today\(|time\.time\("
)


def imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_point_downward(layer: str) -> None:
    above = set(LAYERS[LAYERS.index(layer) + 1 :])
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_top_levels(path) & above)
        for path in (ROOT / layer).rglob("*.py")
        if imported_top_levels(path) & above
    }
    assert offenders == {}, f"{layer} imports from layers above it"


def test_engine_core_does_no_io() -> None:
    offenders: dict[str, list[str]] = {}
    for path in (ROOT / "engine_core").rglob("*.py"):
        bad = sorted(imported_top_levels(path) & IO_LIBRARIES)
        calls = IMPURE_CALLS.findall(path.read_text())
        if bad or calls:
            offenders[str(path.relative_to(ROOT))] = bad + calls
    assert offenders == {}

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


# -- inside engine_core: the module graph ---------------------------------------------

# Tiers of engine_core, bottom to top: an import may point to its own tier or below,
# never up, and the whole graph has no cycle. Function-local and TYPE_CHECKING imports
# count like any other: a circle hidden in a function body is still a circle.
CORE_TIERS: list[set[str]] = [
    # documents and pure helpers: what a step reads and writes
    {
        "errors",
        "model",
        "checkpoint",
        "triggers",
        "effects",
        "expressions",
        "timers",
        "feel",
        "dmn",
        "services",
        "transitions",
        "wake",
        "correlation",
        "views",
        "job_types",
        "inputs",
        "xml_input",
        "task_attributes",
    },
    # readers: BPMN XML and code-first models into definitions
    {"bpmn", "bpmn_extensions", "builder", "validate", "expression_check"},
    # bookkeeping of one step
    {"runtime"},
    # the step machine, one module per BPMN concept
    {
        "moving",
        "arming",
        "boundaries",
        "event_subs",
        "incidents",
        "throwing",
        "jobs",
        "user_tasks",
        "calls",
        "joins",
        "compensation",
        "multi_instance",
        "nodes",
        "wakes",
        # operator actions (suspend/resume, set variables, modify) and migration
        "migration",
        "operations",
    },
    # the entry point and the package's public names
    {"engine", ""},
]


def core_module_name(path: Path) -> str:
    """A module's name inside engine_core; a sub-package (``feel``) is one node, its
    inner structure its own business."""
    parts = list(path.relative_to(ROOT / "engine_core").with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return parts[0] if parts else ""


def core_import_graph() -> dict[str, set[str]]:
    modules = {core_module_name(p) for p in (ROOT / "engine_core").rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for path in (ROOT / "engine_core").rglob("*.py"):
        here = core_module_name(path)
        package = path.relative_to(ROOT).with_suffix("").parts[:-1]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    kept = package[: len(package) - (node.level - 1)]
                    base = ".".join([*kept, *([node.module] if node.module else [])])
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                parts = target.split(".")
                if parts[0] != "engine_core":
                    continue
                name = parts[1] if len(parts) > 1 and parts[1] in modules else ""
                if name != here:
                    graph[here].add(name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as a path (first == last), or [] when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[module] = 2
        return []

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return []


def test_engine_core_import_graph_has_no_cycle() -> None:
    cycle = find_cycle(core_import_graph())
    assert cycle == [], "engine_core modules import each other in a circle: " + " -> ".join(cycle)


def test_engine_core_imports_point_down_its_tiers() -> None:
    graph = core_import_graph()
    tier_of = {module: level for level, tier in enumerate(CORE_TIERS) for module in tier}
    unplaced = sorted(m for m in graph if m not in tier_of)
    assert unplaced == [], "place every engine_core module in a tier of CORE_TIERS"
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if tier_of[target] > tier_of[module]
    )
    assert upward == []


def test_engine_core_has_no_function_local_imports() -> None:
    """Imports at the top of the module only, so the graph above is the real one; a
    circle is broken by moving code to its concept's module, not by a late import."""
    offenders: list[str] = []
    for path in (ROOT / "engine_core").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                offenders += [
                    f"{path.name}:{inner.lineno}"
                    for inner in ast.walk(node)
                    if isinstance(inner, ast.Import | ast.ImportFrom)
                ]
    assert offenders == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []

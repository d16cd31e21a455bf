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
    # dormant's own packages are imported as dormant.<package>: count the package
    if "dormant" in names:
        names.discard("dormant")
        for node in ast.walk(tree):
            module = node.module if isinstance(node, ast.ImportFrom) else None
            dotted = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in [module or "", *dotted]:
                parts = name.split(".")
                if parts[0] == "dormant" and len(parts) > 1:
                    names.add(parts[1])
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
        "bindings",
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
        "ad_hoc",
        "listeners",
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
    """A module's dotted name inside engine_core: ``engine``, ``feel.compiler``, ``feel``
    for ``feel/__init__.py`` and ``""`` for the package itself. A sub-package's modules
    are nodes of their own, so a circle inside ``feel/`` is caught like any other."""
    parts = list(path.relative_to(ROOT / "engine_core").with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def core_tier(module: str) -> str:
    """The CORE_TIERS entry a module is placed by: a sub-package's modules share the
    sub-package's tier (its inner order is kept by the cycle test alone)."""
    return module.split(".")[0]


def imported_names(path: Path) -> list[str]:
    """Every dotted name ``path`` imports, relative imports resolved, at any depth.

    ``from a.b import c`` counts as importing ``a.b.c`` (a module or a name of ``a.b``),
    not ``a.b``'s parent packages: Python runs those first, but a package's
    ``__init__`` re-exporting its own modules is no circle."""
    package = ("dormant", *path.relative_to(ROOT).with_suffix("").parts[:-1])
    targets: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                kept = package[: len(package) - (node.level - 1)]
                base = ".".join([*kept, *([node.module] if node.module else [])])
            targets += [f"{base}.{alias.name}" for alias in node.names]
    return targets


def core_import_graph() -> dict[str, set[str]]:
    """engine_core's modules and what each imports of engine_core: a name resolves to the
    longest module it starts with (``engine_core.feel.builtins.builtin`` is
    ``feel.builtins``; ``engine_core.feel.evaluate`` is ``feel``)."""
    paths = sorted((ROOT / "engine_core").rglob("*.py"))
    modules = {core_module_name(p) for p in paths}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for path in paths:
        here = core_module_name(path)
        for target in imported_names(path):
            parts = target.split(".")
            if parts[:2] != ["dormant", "engine_core"]:
                continue
            inner = parts[2:]
            while inner and ".".join(inner) not in modules:
                inner.pop()
            name = ".".join(inner)
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
    unplaced = sorted(m for m in graph if core_tier(m) not in tier_of)
    assert unplaced == [], "place every engine_core module in a tier of CORE_TIERS"
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if tier_of[core_tier(target)] > tier_of[core_tier(module)]
    )
    assert upward == []


def test_engine_core_has_no_function_local_imports() -> None:
    """Imports at the top of the module only, so the graph above is the real one; a
    circle is broken by moving code to its concept's module, not by a late import."""
    offenders: list[str] = []
    for path in (ROOT / "engine_core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                offenders += [
                    f"{path.relative_to(ROOT)}:{inner.lineno}"
                    for inner in ast.walk(node)
                    if isinstance(inner, ast.Import | ast.ImportFrom)
                ]
    assert offenders == []


def test_the_graph_sees_inside_sub_packages() -> None:
    """feel/ is not one node: its modules and their edges are in the graph, so the
    cycle test above covers them."""
    graph = core_import_graph()
    assert {"feel", "feel.compiler", "feel.builtins", "feel.fn_range"} <= graph.keys()
    assert "feel.compiler" in graph["feel.fn_range"]
    assert "feel.builtins" in graph["feel.compiler"]
    assert "feel" in graph["expressions"]
    assert "feel.fn_range" not in graph["feel.builtins"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


# -- the Store's transactions ---------------------------------------------------------

STORE = ROOT / "persistence" / "store.py"
PRIVATE_TRANSACTIONS = {"_tx", "_read"}


def store_class() -> ast.ClassDef:
    for node in ast.walk(ast.parse(STORE.read_text(), filename=str(STORE))):
        if isinstance(node, ast.ClassDef) and node.name == "Store":
            return node
    raise AssertionError("persistence/store.py defines no class Store")


def store_parts() -> dict[str, str]:
    """The Store's parts, attribute -> class, as its ``__init__`` builds them: every
    ``self.NAME = Class(self, ...)`` (a part given the Store's transactions)."""
    init = next(
        n for n in store_class().body if isinstance(n, ast.FunctionDef) and n.name == "__init__"
    )
    parts: dict[str, str] = {}
    for node in ast.walk(init):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(target := node.targets[0], ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and isinstance(call := node.value, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.args
            and isinstance(first := call.args[0], ast.Name)
            and first.id == "self"
        ):
            parts[target.attr] = call.func.id
    return parts


def test_the_store_is_composed_not_mixed() -> None:
    """The Store inherits nothing: what is not the transaction is a part reached by
    name (``store.queries.instance``), so its public surface is the transaction alone
    and each part can be read, and replaced, on its own (persistence/store.py)."""
    assert store_class().bases == []
    assert store_parts() == {
        "queries": "Queries",
        "deployments": "Deployments",
        "failed": "FailedTriggers",
        "outbox": "OutboxQueue",
    }


def private_transaction_uses(path: Path, parts: set[str]) -> list[str]:
    """Where ``path`` reaches for the Store's private ``_tx`` / ``_read``: on anything
    but ``self``, or anywhere inside one of the Store's parts. A class's own ``_read``
    (the console's autocommit reads, a metrics collector) is its business."""
    found: list[str] = []
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    tree = ast.parse(path.read_text(), filename=str(path))
    in_part = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name in parts
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_TRANSACTIONS:
            on_self = isinstance(node.value, ast.Name) and node.value.id == "self"
            if not on_self or id(node) in in_part:
                found.append(f"{where}:{node.lineno} {node.attr}")
        elif isinstance(node, ast.FunctionDef) and node.name in PRIVATE_TRANSACTIONS:
            if id(node) in in_part:
                found.append(f"{where}:{node.lineno} {node.name}")
    return found


def test_only_the_store_uses_its_private_transactions() -> None:
    """The Store owns the transaction: every other module, its own parts included,
    opens one through the public ``store.transaction()`` / ``store.read()``, so the
    Store can change how it opens them in one place."""
    parts = set(store_parts().values())
    assert {"Deployments", "Queries"} <= parts
    offenders = [
        use
        for folder in ("engine_core", "persistence", "scheduler", "tasks", "tests", "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != STORE
        for use in private_transaction_uses(path, parts)
    ]
    assert offenders == []


def test_the_private_transaction_check_sees_a_use(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "class Queries:\n"
        "    def look(self):\n"
        "        return self._read()\n"
        "    def _tx(self):\n"
        "        raise NotImplementedError\n"
        "class Console:\n"
        "    def look(self):\n"
        "        return self._read()\n"
        "def batch(store):\n"
        "    return store._tx()\n"
    )
    found = private_transaction_uses(sample, {"Queries"})
    assert sorted(found) == ["sample.py:10 _tx", "sample.py:3 _read", "sample.py:4 _tx"]

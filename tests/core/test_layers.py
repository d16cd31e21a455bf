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
        "states",
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
        "history",
        "job_types",
        "job_flow",
        "inputs",
        "xml_input",
        "task_attributes",
        "lazy",
        "tenants",
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


def module_name(path: Path, root: Path = ROOT) -> str:
    """A module's dotted name under ``dormant``: ``tasks.console.app``, ``engine_core.feel``
    for ``engine_core/feel/__init__.py``, ``tasks`` for the package itself. A
    sub-package's modules are nodes of their own, so a circle inside ``feel/`` or
    ``tasks/console/`` is caught like any other."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def core_tier(module: str) -> str:
    """The CORE_TIERS entry a module is placed by: a sub-package's modules share the
    sub-package's tier (its inner order is kept by the cycle test alone)."""
    return module.split(".")[0]


def imported_names(path: Path, root: Path = ROOT) -> list[str]:
    """Every dotted name ``path`` imports, relative imports resolved, at any depth.

    ``from a.b import c`` counts as importing ``a.b.c`` (a module or a name of ``a.b``),
    not ``a.b``'s parent packages: Python runs those first, but a package's
    ``__init__`` re-exporting its own modules is no circle."""
    package = ("dormant", *path.relative_to(root).with_suffix("").parts[:-1])
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
    return {
        module.removeprefix("engine_core").lstrip("."): {
            target.removeprefix("engine_core").lstrip(".")
            for target in targets
            if target.split(".")[0] == "engine_core"
        }
        for module, targets in import_graph().items()
        if module.split(".")[0] == "engine_core"
    }


def package_paths(root: Path = ROOT) -> list[Path]:
    return sorted(path for layer in LAYERS for path in (root / layer).rglob("*.py"))


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Every module of the four packages and what each imports of them, at any depth (a
    function body, an ``if TYPE_CHECKING:`` block): a name resolves to the longest module
    it starts with (``dormant.tasks.app.app`` is ``tasks.app``; ``dormant.persistence.Store``
    is ``persistence``, the package's ``__init__``)."""
    paths = package_paths(root)
    names = {path: module_name(path, root) for path in paths}
    modules = set(names.values())
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for path in paths:
        here = names[path]
        for target in imported_names(path, root):
            parts = target.split(".")
            if parts[0] != "dormant" or len(parts) < 2:
                continue
            inner = parts[1:]
            while inner and ".".join(inner) not in modules:
                inner.pop()
            name = ".".join(inner)
            if name and name != here:
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


@pytest.mark.parametrize("package", LAYERS)
def test_no_package_imports_itself_in_a_circle(package: str) -> None:
    """Imports between packages point downward (above), so a circle can only lie inside
    one package: each package's module graph, sub-packages included, has none."""
    inside = {
        module: {t for t in targets if t.split(".")[0] == package}
        for module, targets in import_graph().items()
        if module.split(".")[0] == package
    }
    cycle = find_cycle(inside)
    assert cycle == [], f"{package} modules import each other in a circle: " + " -> ".join(cycle)


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


# Deliberate laziness, the only function-local imports allowed: (module, what it imports
# late) -> why. Anything else goes at the top of its module, so the graph above is the
# real one and a circle is broken by moving code to its concept's module, not hidden.
_CLI_FAST = "so `dormant --help` and the read-only lists start at once (bench/bench_cli.py)"
_CLIENT_CHEAP = "the Client imports Celery when it first publishes: `from dormant import Client`"
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    # the CLI: each command imports what it runs
    ("tasks.cli", "dormant.tasks.app"): f"Celery and kombu, for what sends: {_CLI_FAST}",
    ("tasks.cli", "dormant.tasks.metrics"): f"prometheus and the worker's metrics: {_CLI_FAST}",
    ("tasks.cli", "dormant.persistence.audit"): f"SQLAlchemy, for the audit filter: {_CLI_FAST}",
    ("tasks.cli", "dormant.tasks.console.serve"): f"Starlette and uvicorn: {_CLI_FAST}",
    ("tasks.cli", "dormant.tasks.console.authorization"): (
        f"the console package's Starlette app, for hash-password: {_CLI_FAST}"
    ),
    ("tasks.cli", "dormant.tasks.api.serve"): f"Starlette and uvicorn: {_CLI_FAST}",
    ("tasks.cli", "dormant.tasks.demo"): f"the demo's worker: {_CLI_FAST}",
    ("tasks.cli", "dormant.persistence"): f"alembic, for `db upgrade`: {_CLI_FAST}",
    ("tasks.cli", "dormant.tasks"): f"tasks/wire.py, which brings the Router: {_CLI_FAST}",
    ("tasks.cli", "dormant.persistence.settings"): f"pydantic: {_CLI_FAST}",
    ("tasks.cli", "dormant.persistence.console_queries"): f"SQLAlchemy: {_CLI_FAST}",
    ("tasks.cli", "dormant.engine_core.views"): f"the checkpoint documents: {_CLI_FAST}",
    ("tasks.cli", "dormant.engine_core.history"): f"the checkpoint documents: {_CLI_FAST}",
    ("tasks.cli", "dormant.tasks.tasklist_query"): f"the checkpoint documents: {_CLI_FAST}",
    ("tasks.cli", "dormant.tasks.tenant_queues"): f"kombu, for `worker --tenants`: {_CLI_FAST}",
    ("tasks.cli", "celery.bin.base"): f"Celery's command line, for worker and beat: {_CLI_FAST}",
    ("tasks.cli", "celery.bin.worker"): f"Celery's worker command: {_CLI_FAST}",
    ("tasks.cli", "celery.bin.beat"): f"Celery's beat command: {_CLI_FAST}",
    ("tasks.cli_common", "dormant.tasks.client"): f"the Client and the Store: {_CLI_FAST}",
    ("tasks.cli_common", "dormant.persistence.db"): f"SQLAlchemy: {_CLI_FAST}",
    ("tasks.cli_common", "sqlalchemy.exc"): f"SQLAlchemy: {_CLI_FAST}",
    ("tasks.cli_common", "dormant.persistence.migrate"): f"alembic, when a read fails: {_CLI_FAST}",
    ("tasks.cli_common", "dormant.persistence.queries"): f"SQLAlchemy: {_CLI_FAST}",
    ("tasks.cli_common", "dormant.persistence.settings"): f"pydantic: {_CLI_FAST}",
    ("tasks.cli_deployments", "dormant.tasks.client"): f"the Client and the Store: {_CLI_FAST}",
    ("tasks.cli_operations", "dormant.persistence.selection"): f"SQLAlchemy: {_CLI_FAST}",
    ("tasks.cli_process_tests", "dormant.tasks.process_tests"): f"the engine: {_CLI_FAST}",
    # the settings read the flow limits; only a job's key evaluates FEEL
    ("engine_core.job_flow", "dormant.engine_core.expressions"): (
        "the FEEL grammar, for a job's flow key only: the settings (and so the CLI) "
        "read engine_core/job_flow.py"
    ),
    # the Client sends through the Celery app, and imports it only then
    ("tasks.client", "dormant.tasks.app"): _CLIENT_CHEAP,
    ("tasks.client", "dormant.tasks.failed"): _CLIENT_CHEAP,
    ("tasks.client_operations", "dormant.tasks.app"): _CLIENT_CHEAP,
    ("tasks.client_operations", "dormant.tasks.operations"): _CLIENT_CHEAP,
    # a worker imports the metrics; only the console's /metrics route needs Starlette
    ("tasks.metrics", "starlette.concurrency"): "Starlette, for the console's route only",
    ("tasks.metrics", "starlette.requests"): "Starlette, for the console's route only",
    ("tasks.metrics", "starlette.responses"): "Starlette, for the console's route only",
    ("tasks.metrics", "starlette.routing"): "Starlette, for the console's route only",
    # the schema check reads the revisions without alembic; only an upgrade needs it
    ("persistence.migrate", "alembic"): (
        "alembic and every migration module, for an upgrade: each process that checks "
        "its schema at start (the CLI, beat, workers)"
    ),
    ("persistence.migrate", "alembic.config"): "alembic, for an upgrade, as above",
    # alembic imports every revision to find the head: a data migration's imports (the
    # BPMN reader, the FEEL grammar) run only when it does
    ("persistence.migrations.versions.0003_incidents", "dormant.engine_core.checkpoint"): "",
    ("persistence.migrations.versions.0003_incidents", "dormant.persistence.incident_rows"): "",
    ("persistence.migrations.versions.0010_deployments", "dormant.engine_core.bpmn"): "",
    ("persistence.migrations.versions.0010_deployments", "dormant.engine_core.dmn"): "",
}


def function_local_imports(root: Path = ROOT) -> list[tuple[str, str, int]]:
    """(module, imported name, line) of every import inside a function body."""
    found: list[tuple[str, str, int]] = []
    for path in package_paths(root):
        tree = ast.parse(path.read_text(), filename=str(path))
        package = ("dormant", *path.relative_to(root).with_suffix("").parts[:-1])
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    targets = [alias.name for alias in inner.names]
                elif isinstance(inner, ast.ImportFrom):
                    base = inner.module or ""
                    if inner.level:
                        kept = package[: len(package) - (inner.level - 1)]
                        base = ".".join([*kept, *([inner.module] if inner.module else [])])
                    targets = [base]
                else:
                    continue
                found += [(module_name(path, root), t, inner.lineno) for t in targets]
    return sorted(set(found))


def unlisted_function_local_imports(root: Path = ROOT) -> list[str]:
    return [
        f"{module}:{line} {target}"
        for module, target, line in function_local_imports(root)
        if (module, target) not in LAZY_IMPORTS
    ]


def test_no_function_local_imports_but_the_listed_laziness() -> None:
    assert unlisted_function_local_imports() == []


def test_every_listed_laziness_is_still_there() -> None:
    """A stale entry would let a new late import of the same name in unseen."""
    seen = {(module, target) for module, target, _ in function_local_imports()}
    assert sorted(set(LAZY_IMPORTS) - seen) == []


def test_the_checks_see_a_circle_and_a_late_import(tmp_path: Path) -> None:
    """The two rules above on a tree of their own: a circle kept alive by a late import
    in ``tasks/`` is found by both."""
    for layer in LAYERS:
        (tmp_path / layer).mkdir()
        (tmp_path / layer / "__init__.py").write_text("")
    (tmp_path / "tasks" / "a.py").write_text("from dormant.tasks.b import g\n")
    (tmp_path / "tasks" / "b.py").write_text(
        "def g():\n    from dormant.tasks.a import f\n    return f\n"
    )
    (tmp_path / "persistence" / "c.py").write_text("from dormant.persistence import d\n")
    (tmp_path / "persistence" / "d.py").write_text("x = 1\n")
    graph = import_graph(tmp_path)
    assert find_cycle(graph) == ["tasks.a", "tasks.b", "tasks.a"]
    assert graph["persistence.c"] == {"persistence.d"}
    assert unlisted_function_local_imports(tmp_path) == ["tasks.b:2 dormant.tasks.a"]


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

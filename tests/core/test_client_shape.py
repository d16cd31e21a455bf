"""The Client composes its operations on running instances; it inherits nothing.

Read from the source (the Client's module imports Celery, which the pure tests do
not load): docs/operations.md documents every operation as a method of the Client,
so each public method of the composed ``Operations`` must have its Client method, and
the Client must not get them by inheriting (tasks/client.py's module docstring).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def public_methods(path: Path, name: str) -> tuple[list[ast.expr], set[str]]:
    """The bases and the public method names of class ``name`` in ``path``."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ClassDef) and node.name == name:
            methods = {
                n.name
                for n in node.body
                if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
            }
            return node.bases, methods
    raise AssertionError(f"{path.name} defines no class {name}")


def test_the_client_composes_its_operations() -> None:
    client_bases, client = public_methods(ROOT / "tasks" / "client.py", "Client")
    _, operations = public_methods(ROOT / "tasks" / "client_operations.py", "Operations")
    assert client_bases == []
    assert operations, "Operations has no public method"
    assert sorted(operations - client) == []


def test_the_documented_operations_are_client_methods() -> None:
    """The Client column of docs/operations.md's table, as its users call it."""
    _, client = public_methods(ROOT / "tasks" / "client.py", "Client")
    documented = {
        "suspend",
        "resume",
        "set_variables",
        "migrate",
        "migration_problems",
        "modify",
        "cancel",
        "retry_incident",
        "bulk",
        "batches",
        "batch",
        "batch_items",
        "wait_batch",
        "pause_job_type",
        "resume_job_type",
        "paused_job_types",
    }
    assert sorted(documented - client) == []

"""Each package's ``__all__`` is its public surface and says exactly what the package
offers (the way httpx keeps its own honest): every listed name exists, and every
public name the package holds is listed. Every module's ``__all__`` names only what
the module has."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

PACKAGES = ["dormant.engine_core", "dormant.persistence", "dormant.scheduler", "dormant.tasks"]


def _public_members(module: ModuleType) -> set[str]:
    """What the module offers, names it loads on first use (PEP 562) included."""
    return {
        name
        for name in dir(module)
        if not name.startswith("_")
        and not inspect.ismodule(getattr(module, name))
        and name != "annotations"
    }


@pytest.mark.parametrize("package", PACKAGES)
def test_exported_members(package: str) -> None:
    module = importlib.import_module(package)
    exported = set(module.__all__)
    assert len(exported) == len(module.__all__), "a name listed twice"
    assert exported == _public_members(module)


def _modules(package: str) -> list[str]:
    root = importlib.import_module(package)
    return sorted(info.name for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."))


@pytest.mark.parametrize(
    "package", ["dormant.engine_core", "dormant.persistence", "dormant.scheduler"]
)
def test_every_modules_all_names_what_it_has(package: str) -> None:
    missing: dict[str, list[str]] = {}
    for name in _modules(package):
        if ".migrations" in name:
            continue
        module = importlib.import_module(name)
        gone = [n for n in getattr(module, "__all__", []) if not hasattr(module, n)]
        if gone:
            missing[name] = gone
    assert missing == {}


def test_engine_core_exports_the_step_and_its_documents() -> None:
    import dormant.engine_core

    for name in ("apply", "new_checkpoint", "Checkpoint", "Trigger", "Step", "read_bpmn"):
        assert name in dormant.engine_core.__all__

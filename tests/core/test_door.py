"""``import dormant`` is the one door to the user surface (dormant/__init__.py): its
``__all__`` says exactly what the lazy table loads, every name resolves to the object of
its home module, nothing a user raises, catches or reads is missing, and the door itself
stays cheap — the way httpx keeps its own ``__all__`` honest."""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
import sys

import dormant
import dormant.engine_core.errors
import dormant.engine_core.views

# The job author's helpers and the producer's two entry points: not derivable from a
# module's ``__all__``, so listed here; a door that loses one fails below.
USER_NAMES = {"Client", "app", "idempotency_key", "task_headers", "heartbeat"}


def _view_types() -> set[str]:
    views = dormant.engine_core.views
    return {name for name in views.__all__ if inspect.isclass(getattr(views, name))}


def test_all_is_exactly_the_lazy_table_and_sorted() -> None:
    assert dormant.__all__ == sorted(dormant.__all__)
    assert len(set(dormant.__all__)) == len(dormant.__all__), "a name listed twice"
    assert set(dormant.__all__) == set(dormant._HOMES)


def test_the_door_is_complete() -> None:
    wanted = USER_NAMES | set(dormant.engine_core.errors.__all__) | _view_types()
    assert wanted - set(dormant.__all__) == set()


def test_every_name_resolves_to_its_home() -> None:
    for name, home in dormant._HOMES.items():
        module = importlib.import_module(home)
        assert getattr(dormant, name) is getattr(module, name), name
    assert "Client" in dir(dormant)


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        dormant.NoSuchThing  # noqa: B018 - the lookup is the test
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("dormant.NoSuchThing resolved")


def test_import_dormant_alone_imports_no_heavy_library() -> None:
    heavy = ["celery", "kombu", "sqlalchemy", "lark"]
    code = (
        f"import json, sys, dormant; print(json.dumps([m for m in {heavy!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert json.loads(out) == []
    # The probe can fail: touching a name loads its home and what that home needs.
    code = code.replace("dormant;", "dormant; dormant.Client;")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "sqlalchemy" in json.loads(out)

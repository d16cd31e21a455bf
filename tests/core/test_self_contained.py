"""A clone alone passes its tests: nothing under tests/, scripts/, bench/ or .ci/ reaches
outside the repository.

Data the tests need lives in the repository (tests/conformance/, with its sources and
licences); a path that climbs above the repository's root works only on a machine that
happens to hold the right folder beside the checkout, and fails on a fresh clone. Two
ways of climbing are caught: a relative path written out (``../x`` must name something
that exists in the repository, counted from the file that writes it), and a Python path
derived from ``__file__`` with more ``.parent`` / ``.parents[n]`` / ``os.path.dirname``
steps than the file is deep.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

SELF = Path(__file__).resolve()
ROOT = SELF.parents[2]
SCANNED = ["tests", "scripts", "bench", ".ci"]
RELATIVE = re.compile(r"(?<![\w.])((?:\.\./)+)([\w.-]*)")


def scanned_files() -> Iterator[Path]:
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            # this file writes escapes on purpose, as the cases its checks must catch
            if path.is_file() and "__pycache__" not in path.parts and path != SELF:
                yield path


def relative_escapes(text: str, where: Path) -> list[str]:
    """Every ``../`` path in ``text`` that leaves the repository or names nothing in it.

    ``where`` is the file's path from the repository's root; the path is read from the
    file's own folder, as a link in a Markdown file or an ``open`` beside it would be.
    """
    found = []
    for match in RELATIVE.finditer(text):
        target = Path(os.path.normpath(ROOT / where.parent / match.group(1) / match.group(2)))
        if not target.is_relative_to(ROOT) or not target.exists():
            found.append(match.group(0))
    return found


def _climb(node: ast.expr) -> int | None:
    """How many folders above ``__file__`` the expression names, or None if it is not one."""
    if isinstance(node, ast.Name) and node.id == "__file__":
        return 0
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in {"Path", "PurePath"} and node.args:
            return _climb(node.args[0])
        if isinstance(func, ast.Attribute):
            if func.attr in {"resolve", "absolute"}:
                return _climb(func.value)
            if func.attr == "dirname" and node.args:
                below = _climb(node.args[0])
                return None if below is None else below + 1
            if func.attr in {"abspath", "realpath"} and node.args:
                return _climb(node.args[0])
        return None
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        below = _climb(node.value)
        return None if below is None else below + 1
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "parents"
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, int)
    ):
        below = _climb(node.value.value)
        return None if below is None else below + node.slice.value + 1
    return None


def file_escapes(source: str, where: Path) -> list[str]:
    """Every expression of ``source`` that climbs from ``__file__`` above the root.

    A file at ``tests/core/x.py`` is three levels deep: ``parents[2]`` is the root,
    ``parents[2].parent`` is whatever happens to sit beside the checkout.
    """
    depth = len(where.parts)
    return [
        ast.unparse(node)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.expr) and (_climb(node) or 0) > depth
    ]


def _escapes(text: str, where: Path) -> list[str]:
    found = relative_escapes(text, where)
    return found + file_escapes(text, where) if where.suffix == ".py" else found


def test_every_path_stays_inside_the_repository() -> None:
    offenders: dict[str, list[str]] = {}
    for path in scanned_files():
        where = path.relative_to(ROOT)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary: holds no path a reader would follow
        found = _escapes(text, where)
        if found:
            offenders[str(where)] = found
    assert offenders == {}, "paths that leave the repository (or name nothing in it)"


def test_the_scan_reaches_every_folder_it_promises() -> None:
    scanned = {path.relative_to(ROOT).parts[0] for path in scanned_files()}
    assert scanned == set(SCANNED)


# The escapes this repository once had; spelled in pieces so this file holds none itself.
OUTSIDE = ".." + "/shared"


@pytest.mark.parametrize(
    ("text", "where", "outside"),
    [
        # climbs from __file__: the old corpus paths, and two other spellings
        (
            'CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "conformance"',
            "tests/core/test_conformance_models.py",
            True,
        ),
        ("ROOT = Path(__file__).parent.parent.parent", "bench/common.py", True),
        ("ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))", "x.py", True),
        ("REPO = Path(__file__).resolve().parents[2]", "tests/integration/conftest.py", False),
        ("REPO = Path(__file__).resolve().parents[1]", "bench/common.py", False),
        ('CASES = Path(__file__).resolve().parent / "cases.json"', "tests/core/x.py", False),
        # relative paths written out: the old docstring and README, a shell escape
        (f'"""The DMN TCK\'s FEEL cases ({OUTSIDE}/conformance/feel)."""', "tests/core/t.py", True),
        (f"How each test of `{OUTSIDE}/seeds/SRD-071.txt` shows here", "tests/README.md", True),
        ('cd "$(dirname "$0")/../../elsewhere"', "scripts/test.sh", True),
        ("the figures are in [bench/README.md](../bench/README.md)", "tests/README.md", False),
        ("see `../camunda8/manifest.json`", "tests/conformance/feel/MANIFEST.md", False),
        ('range("[1..2]")', "tests/core/test_feel.py", False),
    ],
)
def test_the_checks_tell_outside_from_inside(text: str, where: str, outside: bool) -> None:
    assert bool(_escapes(text, Path(where))) is outside

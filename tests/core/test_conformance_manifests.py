"""The conformance data in tests/conformance/ carries its sources and licences.

Third-party files may be redistributed only with their licence texts, and a reader can
trust a verbatim copy only if it can be checked: so every file in a data folder is named
in that folder's MANIFEST.md, every model matches the sha256 recorded for it, and each
licence the manifest names has its text beside the files.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conformance import CAMUNDA8, FEEL

NAMED = re.compile(r"`([^`\s]+)`")


def _entries() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads((CAMUNDA8 / "manifest.json").read_text())["files"]
    return entries


@pytest.mark.parametrize("folder", [CAMUNDA8, FEEL], ids=lambda f: f.name)
def test_the_manifest_names_every_file_in_its_folder(folder: Path) -> None:
    named = set(NAMED.findall((folder / "MANIFEST.md").read_text(encoding="utf-8")))
    present = {path.name for path in folder.iterdir() if path.is_file()}
    assert present - named == set(), f"{folder.name}/MANIFEST.md does not name these files"


def test_every_model_is_the_verbatim_copy_the_manifest_records() -> None:
    entries = {entry["file"]: entry for entry in _entries()}
    models = {path.name for path in CAMUNDA8.glob("*.bpmn")}
    assert models == set(entries), "manifest.json and the .bpmn files disagree"
    changed = [
        name
        for name, entry in entries.items()
        if hashlib.sha256((CAMUNDA8 / name).read_bytes()).hexdigest() != entry["sha256"]
    ]
    assert changed == [], "models differ from their source: add a new file instead of editing"


def test_each_licence_has_its_text_beside_the_files() -> None:
    needed = set()
    for entry in _entries():
        licence, repo = entry["licence"], entry["source"]["repo"]
        assert licence.startswith(("Apache-2.0", "MIT")), f"{entry['file']}: {licence}"
        if licence.startswith("MIT"):
            needed.add(f"LICENSE-MIT-{repo.split('/')[1]}.txt")
        else:
            needed.add("LICENSE-Apache-2.0.txt")
    assert {n for n in needed if not (CAMUNDA8 / n).is_file()} == set()
    assert (FEEL / "LICENSE-dmn-tck-Apache-2.0.txt").is_file()

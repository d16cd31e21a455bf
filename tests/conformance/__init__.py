"""Third-party conformance data, kept in the repository so a clone alone passes its tests.

Each folder's MANIFEST.md names every file, where it came from and under which licence;
tests/conformance/README.md says how to refresh them.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
CAMUNDA8 = HERE / "camunda8"
FEEL = HERE / "feel"

__all__ = ["CAMUNDA8", "FEEL"]

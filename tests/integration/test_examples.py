"""The examples run as a user runs them, and assert their own outcome (exit status 0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_incident_retry_example_completes_after_the_fix_and_a_retry(tmp_path: Path) -> None:
    """docs/incidents.md: failure → incident visible → flag set → dormant.incident.retry →
    completed, on the embedded default (the script's own asserts decide its exit)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DORMANT_")}
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "incident_retry" / "run.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "instance status: active_incidents" in done.stdout
    assert '"cause_class": "GatewayNotConfigured"' in done.stdout
    assert "incident history: raised, retried, retry-succeeded" in done.stdout
    assert done.stdout.rstrip().endswith("OK")

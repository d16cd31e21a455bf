"""Deploying a file with several processes through the Client."""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_incident_projection import MODEL


def test_deploy_returns_the_first_and_deploy_all_every_process(
    sqlite_url: str, tmp_path: Path
) -> None:
    from dormant.tasks.client import Client

    client = Client(sqlite_url, f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}")
    path = tmp_path / "two.bpmn"
    path.write_text(MODEL)
    assert [(d.key, d.version) for d in client.deploy_all(path)] == [("charge", 1), ("gate", 1)]
    first = client.deploy(path)
    assert (first.key, first.version, first.created) == ("charge", 1, False)

"""An operator's refused action fails its Celery task, so Flower shows why."""

from __future__ import annotations

from pathlib import Path

from dormant.engine_core.errors import UnknownIncident
from dormant.persistence.settings import Settings


def test_a_refused_incident_action_fails_the_task_with_the_reason(
    sqlite_url: str, tmp_path: Path
) -> None:
    from dormant.tasks import app as app_module
    from dormant.tasks.triggers import incident_drop, incident_retry

    broker = f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}"
    app_module.configure(Settings.from_env(database_url=sqlite_url, broker_url=broker))
    try:
        for task in (incident_retry, incident_drop):
            result = task.apply(args=["no-such-incident"])
            assert result.state == "FAILURE"
            assert isinstance(result.result, UnknownIncident)
            assert "no incident 'no-such-incident'" in str(result.result)
    finally:
        app_module.configure(Settings.from_env())

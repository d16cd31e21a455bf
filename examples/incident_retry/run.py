"""An incident, read and retried: ``python examples/incident_retry/run.py``.

On a fresh embedded default (SQLite + the server-less broker in a temporary directory)
with one ``dormant dev`` child process (worker + beat):

1. deploy ``payment.bpmn`` and start an order; the ``example-charge-card`` job fails
   (the gateway is not configured), the engine retries it once, then opens an incident;
2. show the incident as an operator sees it (``dormant incidents show``);
3. fix the cause outside the instance: create the gateway's configuration file;
4. send the management task ``dormant.incident.retry`` by name, exactly as Flower's
   ``POST /api/task/async-apply/dormant.incident.retry`` does (``apply_async``);
5. wait for the instance to complete. Exit status 0 only if it did.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def say(text: str) -> None:
    print(text, flush=True)


def wait_until(what: str, condition: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise SystemExit(f"FAILED: timed out after {timeout:.0f}s waiting for {what}")


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="dormant-incident-example-"))
    flag = tmp / "gateway.configured"
    # The embedded default, in this directory; set before anything imports the app.
    os.environ["DORMANT_DATABASE_URL"] = f"sqlite:///{tmp / 'dormant.sqlite3'}"
    os.environ["DORMANT_BROKER_URL"] = f"sqla+sqlite:///{tmp / 'broker.sqlite3'}"
    sys.path[:0] = [str(REPO)]
    env = dict(os.environ, EXAMPLE_GATEWAY_FLAG=str(flag))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), str(HERE), os.environ.get("PYTHONPATH")) if p
    )

    from dormant import Client
    from dormant.engine_core.views import to_dict

    client = Client()
    deployment = client.deploy(HERE / "payment.bpmn")
    say(f"deployed {deployment.key} v{deployment.version}; embedded default in {tmp}")
    log = open(tmp / "worker.log", "wb")
    worker = subprocess.Popen(
        [sys.executable, "-m", "dormant.tasks.cli", "dev", "--include", "incident_retry_jobs"],
        env=env,
        cwd=tmp,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        instance_id = client.start(deployment.key, {"orderId": "o-42", "amount": 99.5})
        say(f"started instance {instance_id}; the gateway is not configured yet")

        incident = wait_until(
            "the incident", lambda: next(iter(client.incidents(instance_id, "open")), None)
        )
        view = client.instance(instance_id)
        say(f"instance status: {view.status}")
        say("incident, as `dormant incidents show` prints it:")
        shown = to_dict(incident)
        say(json.dumps({k: shown[k] for k in sorted(shown)}, indent=2))
        assert view.status == "active_incidents", view.status
        assert [(t.node_id, t.state) for t in view.tokens] == [("charge", "incident")]
        assert incident.cause_class == "GatewayNotConfigured"
        assert "failed after 2 attempt(s)" in incident.cause
        assert incident.data == {"orderId": "o-42", "amount": 99.5}

        flag.touch()
        say(f"configured the gateway ({flag.name}); retrying {incident.id} via the task API")
        import dormant.tasks.triggers  # noqa: F401 - registers the dormant.* tasks
        from dormant import app

        app.tasks["dormant.incident.retry"].apply_async(args=[incident.id])

        done = wait_until(
            "the instance to complete",
            lambda: (v := client.instance(instance_id)).status == "completed" and v,
        )
        closed = client.incident(incident.id)
        say(f"instance {done.status}: receipt {done.variables['receipt']}")
        say(f"incident {closed.id}: {closed.state} after {closed.attempts} raise(s)")
        actions = [f.details["action"] for f in client.history(instance_id) if f.kind == "Incident"]
        say(f"incident history: {', '.join(str(a) for a in actions)}")
        assert closed.state == "retried", closed.state
        assert actions == ["raised", "retried", "retry-succeeded"], actions
        say("OK")
        return 0
    finally:
        try:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
        log.close()
        client._store.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Operators' tools: a producer with only Celery installed, and Flower (issue 8 item 10).

The docs promise that ``Celery(broker=...).send_task("dormant.incident.retry",
args=[id])`` works from a process that has nothing of dormant. Such an app publishes to
Celery's default queue ``celery``; these tests send exactly that call from a separate
Python process (only ``celery`` imported, no dormant configuration, not even on
``sys.path``) through the real broker, and watch a real worker apply it.

Flower: the Procfile's line never starts it open (no credentials → it does not start)
and binds it to loopback unless told otherwise.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import REPO, Stack, wait_for
from tests.integration.waitkit import end, message_catch, model, start, user_task
from tests.security.shellkit import job_model, sec_stack

__all__ = ["sec_stack"]

BARE_PRODUCER = """
import sys
from celery import Celery

name, broker, args, kwargs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
import json
Celery(broker=broker).send_task(name, args=json.loads(args), kwargs=json.loads(kwargs))
ours = sorted(m for m in sys.modules if m.split(".")[0] == "dormant")
assert not ours, ours
print("sent")
"""


def bare_send_task(
    stack: Stack,
    name: str,
    args: list[object] | None = None,
    kwargs: dict[str, object] | None = None,
) -> None:
    """``send_task`` from a process with nothing of dormant: no env, no path, no config."""
    import json

    env = {k: v for k, v in os.environ.items() if not k.startswith("DORMANT_")}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            BARE_PRODUCER,
            name,
            stack.broker_url,
            json.dumps(args or []),
            json.dumps(kwargs or {}),
        ],
        env=env,
        cwd=stack.tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "sent" in done.stdout, done.stderr


def test_a_bare_celery_app_resolves_an_incident(sec_stack: Stack) -> None:
    sec_stack.client.deploy(job_model("plain-resolve", "test-fail", retries=1))
    instance = sec_stack.client.start("plain-resolve")
    (incident,) = sec_stack.wait_status(instance, "active_incidents").incidents
    bare_send_task(sec_stack, "dormant.incident.resolve", [incident.id])
    view = sec_stack.wait_status(instance, "completed")
    assert [i.state for i in view.incidents] == ["resolved"]


def test_a_bare_celery_app_sends_a_message_and_cancels(sec_stack: Stack) -> None:
    waiting = model(
        "plain-wait",
        start() + message_catch("catch", "plain-go") + end(),
        [("start", "catch"), ("catch", "end")],
        messages={"plain-go": "=orderId"},
    )
    sec_stack.client.deploy(waiting)
    sec_stack.client.deploy(
        model(
            "plain-task", start() + user_task("wait") + end(), [("start", "wait"), ("wait", "end")]
        )
    )
    woken = sec_stack.client.start("plain-wait", {"orderId": "o-1"})
    doomed = sec_stack.client.start("plain-task")
    wait_for(lambda: sec_stack.client.user_tasks(doomed), what="the user task")
    wait_for(
        lambda: any(w.kind == "message" for w in sec_stack.client.instance(woken).waits),
        what="the message wait",
    )
    bare_send_task(
        sec_stack,
        "dormant.message",
        kwargs={"name": "plain-go", "correlation_key": "o-1", "variables": {"paid": True}},
    )
    bare_send_task(sec_stack, "dormant.cancel", [doomed])
    assert sec_stack.wait_status(woken, "completed").variables["paid"] is True
    sec_stack.wait_status(doomed, "terminated")


# -- Flower ---------------------------------------------------------------------------


def _procfile_flower() -> str:
    text = (REPO / "Procfile").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("flower:")]
    return line.split(":", 1)[1].strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _flower_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWER_", "DORMANT_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)
    env["DORMANT_DATABASE_URL"] = f"sqlite:///{tmp / 'flower.sqlite3'}"
    env["DORMANT_BROKER_URL"] = f"sqla+sqlite:///{tmp / 'flower-broker.sqlite3'}"
    return {**env, **extra}


def test_the_procfile_never_starts_flower_without_credentials(tmp_path: Path) -> None:
    done = subprocess.run(
        ["sh", "-c", _procfile_flower()],
        env=_flower_env(tmp_path, PORT=str(_free_port())),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "FLOWER_BASIC_AUTH" in done.stderr, done.stderr


def test_the_procfile_binds_flower_to_loopback_with_basic_auth(tmp_path: Path) -> None:
    port = _free_port()
    env = _flower_env(tmp_path, PORT=str(port), FLOWER_BASIC_AUTH="ops:s3cret")
    log = tmp_path / "flower.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["sh", "-c", "exec " + _procfile_flower()],
            env=env,
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def listening() -> list[str]:
            assert proc.poll() is None, log.read_text()
            ss = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
            return [ln.split()[3] for ln in ss.splitlines() if re.search(rf":{port}\b", ln)]

        addresses = wait_for(listening, 30, what="flower listening")
        assert addresses == [f"127.0.0.1:{port}"]
        import urllib.error
        import urllib.request

        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/workers", timeout=10)
        assert err.value.code == 401
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)

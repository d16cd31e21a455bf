"""``dormant demo``: the order example, end to end, on a fresh embedded default.

Runs anywhere: a temporary directory holds the SQLite database and the ``sqla+sqlite``
broker, and one child process runs ``dormant dev`` (worker + embedded beat). The demo
is the *producer*: it deploys ``order.bpmn``, starts a few orders through the Client,
completes the review task a person would complete, and sends the ``payment-received``
message a payment provider would send, printing what each order waits for and what
woke it. Exit status 0 only when every order completed; otherwise the reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

from dormant.engine_core.checkpoint import InstanceStatus
from dormant.engine_core.errors import UnknownInstance
from dormant.tasks.client import Client

__all__ = ["ORDER_BPMN", "run"]

ORDER_BPMN = resources.files("dormant.tasks.examples").joinpath("order.bpmn")
ORDERS = (("order-1", 40), ("order-2", 250), ("order-3", 75))
# Facts about the machinery rather than the order: not worth a line in the demo.
_QUIET_FACTS = {"Hydrated", "Dehydrated", "hydrated", "dehydrated"}


def _say(text: str) -> None:
    print(text, flush=True)


_WOKEN_BY = {
    "job": "the charge-card job's result",
    "timer": "its timer (via the deadline table and beat)",
    "user_task": "the reviewer completing the task",
    "message": "the payment-received message",
}


def _wait_text(wait: Any) -> str:
    if wait.kind == "timer" and wait.due_at is not None:
        left = max(0.0, wait.due_at.timestamp() - time.time())
        return f"timer at {wait.node_id} (due in {left:.1f}s)"
    if wait.kind == "message":
        return f"message {wait.message_name}[{wait.correlation_key}] at {wait.node_id}"
    return f"{wait.kind.replace('_', ' ')} {wait.node_id}"


def _waiting(view: Any) -> tuple[str, str]:
    """What an instance waits for, in words, and the kind of its first wait."""
    if view.status != InstanceStatus.ACTIVE:
        return view.status, ""
    if view.waits:
        return "waiting for " + ", ".join(_wait_text(w) for w in view.waits), view.waits[0].kind
    return "running", ""


def _fact_line(fact: Any) -> str:
    details = fact.details or {}
    where = details.get("node_id") or details.get("node") or ""
    extra = f" at {where}" if where else ""
    return f"{fact.kind}{extra}"


def run(count: int = 3, timeout: float = 60.0) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="dormant-demo-"))
    db_url = f"sqlite:///{tmp / 'dormant.sqlite3'}"
    broker_url = f"sqla+sqlite:///{tmp / 'broker.sqlite3'}"
    env = dict(os.environ, DORMANT_DATABASE_URL=db_url, DORMANT_BROKER_URL=broker_url)
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    log_path = tmp / "worker.log"
    _say(f"dormant demo: embedded database and broker in {tmp}")

    client = Client(db_url, broker_url)
    deployment = client.deploy(ORDER_BPMN.read_bytes())
    _say(f"deployed {deployment.key} v{deployment.version}")

    with open(log_path, "wb") as log_file:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dormant.tasks.cli",
                "dev",
                "--include",
                "dormant.tasks.examples.order_jobs",
                "--loglevel",
                "WARNING",
            ],
            env=env,
            cwd=tmp,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        orders: dict[str, str] = {}
        for n in range(count):
            order_id, amount = ORDERS[n % len(ORDERS)]
            order_id = f"{order_id}-{n // len(ORDERS)}" if n >= len(ORDERS) else order_id
            instance_id = client.start(
                deployment.key, {"orderId": order_id, "amount": amount}, business_key=order_id
            )
            orders[instance_id] = order_id
            _say(f"{order_id}: started (amount {amount}) as instance {instance_id[:8]}")
        return _follow(client, orders, worker, log_path, timeout, UnknownInstance)
    finally:
        _stop(worker)
        shutil.rmtree(tmp, ignore_errors=True)


def _follow(
    client: Any,
    orders: dict[str, str],
    worker: subprocess.Popen[bytes],
    log_path: Path,
    timeout: float,
    unknown: type[Exception],
) -> int:
    started = time.monotonic()
    last: dict[str, str] = {}
    last_kind: dict[str, str] = {}
    described: dict[str, str] = {}
    seen_facts: dict[str, int] = {}
    answered: set[tuple[str, str]] = set()
    while True:
        done = 0
        for instance_id, order_id in orders.items():
            try:
                view = client.instance(instance_id)
            except unknown:
                continue  # the worker has not run the start yet
            facts = client.history(instance_id)
            for fact in facts[seen_facts.get(instance_id, 0) :]:
                if fact.kind not in _QUIET_FACTS:
                    _say(f"{order_id}:   · {_fact_line(fact)}")
            seen_facts[instance_id] = len(facts)
            state, kind = _waiting(view)
            described[instance_id] = state
            identity = view.status + ":" + ",".join(w.id for w in view.waits)
            if last.get(instance_id) != identity:
                woken = _WOKEN_BY.get(last_kind.get(instance_id, ""))
                _say(f"{order_id}: " + (f"woken by {woken}; now " if woken else "") + state)
                last[instance_id] = identity
                last_kind[instance_id] = kind
            if view.status == InstanceStatus.COMPLETED:
                done += 1
                continue
            if InstanceStatus(view.status).ended or view.incidents:
                _say(
                    f"{order_id}: cannot complete ({view.status}); incidents: "
                    + "; ".join(f"{i.node_id}: {i.cause}" for i in view.incidents)
                )
                return 1
            _act(client, instance_id, order_id, view, answered)
        if done == len(orders):
            _say(f"all {done} orders completed in {time.monotonic() - started:.1f}s")
            return 0
        if worker.poll() is not None:
            _say(f"the worker exited with {worker.returncode}; its log:\n{_tail(log_path)}")
            return 1
        if time.monotonic() - started > timeout:
            _say(f"timed out after {timeout:.0f}s with {done}/{len(orders)} completed:")
            for instance_id, order_id in orders.items():
                _say(f"  {order_id}: {described.get(instance_id, 'not started')}")
            _say(f"worker log:\n{_tail(log_path)}")
            return 1
        time.sleep(0.25)


def _act(
    client: Any, instance_id: str, order_id: str, view: Any, answered: set[tuple[str, str]]
) -> None:
    """Play the people and systems outside the process: the reviewer, the payment provider."""
    for task in client.user_tasks(instance_id):
        if (instance_id, task.id) not in answered:
            answered.add((instance_id, task.id))
            _say(f"{order_id}: reviewer approves {task.name or task.node_id!r}")
            client.complete_task(task.id, {"approved": True})
    for wait in view.waits:
        if wait.kind == "message" and (instance_id, wait.id) not in answered:
            answered.add((instance_id, wait.id))
            _say(f"{order_id}: payment provider sends {wait.message_name}[{wait.correlation_key}]")
            client.send_message(wait.message_name, wait.correlation_key, {"paid": True})


def _stop(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is not None:
        return
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=10)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"

"""The DBOS Transact application that bench_dbos.py runs beside dormant (its own processes).

DBOS is a process-wide singleton, so each role is a process of its own, started by
bench_dbos.py as ``python -m bench.dbos_app ROLE DATABASE_URL [N]``:

- ``direct N``: launch, start N one-step workflows with ``DBOS.start_workflow`` and wait
  for every result; prints ``{"secs": ...}`` (first start to last result).
- ``enqueue N W P``: register the queue ``bench`` (``worker_concurrency=W``,
  ``polling_interval_sec=P``) and enqueue N one-step workflows on it; runs none.
- ``worker NAME``: launch with its own ``executor_id`` listening to ``bench``; runs until
  SIGTERM.
- ``recv N``: launch, start N workflows that each wait in ``DBOS.recv("go")``, wait for
  every result (the messages are sent by bench_dbos.py with ``DBOSClient.send``).
- ``launch``: launch and stop (the cost of a start-up, subtracted from the figures).

Needs the ``bench`` extra: ``.venv/bin/pip install -e '.[bench]'``.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

QUEUE = "bench"


@DBOS.step()
def noop_step(i: int) -> int:
    return i


@DBOS.workflow()
def one_step(i: int) -> int:
    """The DBOS counterpart of dormant's start → one service task (a no-op job) → end."""
    return noop_step(i)


@DBOS.workflow()
def wait_message(i: int) -> Any:
    """The counterpart of an instance parked on a message catch: woken by ``DBOS.send``."""
    return DBOS.recv("go", timeout_seconds=600)


def launch(url: str, executor_id: str, listen: list[str] | None = None) -> None:
    config: DBOSConfig = {
        "name": "dormant-bench",
        "system_database_url": url,
        "application_version": "bench",
        "executor_id": executor_id,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    if listen is not None:
        DBOS.listen_queues(listen)
    DBOS.launch()


def main(argv: list[str]) -> int:
    role, url = argv[0], argv[1]
    if role == "launch":
        launch(url, "bench-launch", listen=[])
    elif role == "direct":
        n = int(argv[2])
        launch(url, "bench-direct", listen=[])
        t0 = time.perf_counter()
        handles = []
        for i in range(n):
            with SetWorkflowID(f"d-{i}"):
                handles.append(DBOS.start_workflow(one_step, i))
        for h in handles:
            h.get_result()
        print(json.dumps({"secs": time.perf_counter() - t0}), flush=True)
    elif role == "enqueue":
        n, concurrency, polling = int(argv[2]), int(argv[3]), float(argv[4])
        launch(url, "bench-enqueue", listen=[])
        DBOS.register_queue(
            QUEUE,
            worker_concurrency=concurrency,
            polling_interval_sec=polling,
            on_conflict="always_update",
        )
        for i in range(n):
            with SetWorkflowID(f"q-{i}"):
                DBOS.enqueue_workflow(QUEUE, one_step, i)
    elif role == "worker":
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        launch(url, argv[2], listen=[QUEUE])
        print("ready", flush=True)
        stop.wait()
    elif role == "recv":
        n = int(argv[2])
        launch(url, "bench-recv", listen=[])
        handles = []
        for i in range(n):
            with SetWorkflowID(f"r-{i}"):
                handles.append(DBOS.start_workflow(wait_message, i))
        print("started", flush=True)
        for h in handles:
            h.get_result()
    else:
        raise SystemExit(f"dbos_app: unknown role {role!r}")
    DBOS.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

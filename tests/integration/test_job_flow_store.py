"""Flow control inside the Store's transactions, on both backends (SQLite file, real
PostgreSQL), with the real core and no worker: which step writes a job's outbox row,
which writes a waiting row, and which grant a finished job's transaction makes.

* over the limit, a job waits (no outbox row) and its instance still waits at the task;
* a job's result frees its slot and, in the same transaction, grants the next waiting
  job, the key granted longest ago first (round-robin), so key b's job goes before a's
  backlog;
* a cancelled instance's waiting job leaves the queue; the counts end at zero.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dormant.engine_core.triggers import Cancel, JobCompleted
from dormant.persistence.settings import Settings
from dormant.persistence.store import NewInstance, Store
from tests.integration.test_job_flow import one_job


def _jobs(applied: Any) -> list[str]:
    return [str(row.payload["instance_id"]) for row in applied.outbox if row.kind == "DispatchJob"]


def _complete(store: Store, iid: str, now: datetime) -> Any:
    [wait] = [w for w in store.queries.checkpoint(iid).waits.values() if w.job_type]
    return store.apply(iid, JobCompleted(wait_id=wait.id, attempt=wait.attempt, variables={}), now)


def test_waiting_jobs_are_granted_round_robin_in_the_result_transaction(
    db_url: str, now: datetime
) -> None:
    job_types = {"svc": {"concurrency": 1, "key": "=c"}}
    store = Store(settings=Settings(database_url=db_url, job_types=job_types))
    try:
        store.deployments.deploy(one_job("flowp", "svc"), now)
        started = {
            iid: store.start(NewInstance("flowp", iid, {"c": iid[0]}), now=now)
            for iid in ("a1", "a2", "a3", "b1")
        }
        assert {iid: _jobs(a) for iid, a in started.items()} == {
            "a1": ["a1"],
            "a2": [],
            "a3": [],
            "b1": [],
        }
        assert store.queries.checkpoint("a2").waits  # waiting at its task all the same
        assert _jobs(_complete(store, "a1", now)) == ["b1"]  # b's turn before a's backlog
        store.apply("a2", Cancel(), now)  # its waiting job leaves the queue
        assert _jobs(_complete(store, "b1", now)) == ["a3"]
        assert _jobs(_complete(store, "a3", now)) == []
        [head] = [r for r in store.flow.rows(now) if r.key is None]
        assert (head.running, head.waiting, head.limit) == (0, 0, 1)
    finally:
        store.close()

"""A start whose first job runs before the instance is written (``Store.start``'s
``job_first``), against real PostgreSQL and SQLite: whatever the job's outcome, the
instance ends where the ordinary path (start, commit, job, result) leaves it, and it
costs one write transaction where the ordinary path costs two.

And the shell's gate (tasks/triggers.py ``_JobBeforeStart.for_task``): only a start its
broker marks when it delivers it again, and not a redelivered one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import func, select

from bench import sqlcount
from bench.models import SERVICE
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.triggers import JobCompleted, JobErrorThrown, JobFailed
from dormant.persistence.store import JobRun, NewInstance, Store
from dormant.persistence.tables import deadlines, outbox

Outcome = JobCompleted | JobErrorThrown | JobFailed


class Runner:
    """A ``job_first`` that may run every job type and answers with ``answer(job)``."""

    def __init__(self, answer: Callable[[DispatchJob], JobRun | None]) -> None:
        self.answer = answer
        self.asked: list[DispatchJob] = []

    def may_run(self, job_type: str) -> bool:
        return True

    def __call__(self, job: DispatchJob) -> JobRun | None:
        self.asked.append(job)
        return self.answer(job)


def _deployed(store: Store, now: datetime) -> None:
    """SERVICE deployed, and its latest version looked up once, as a worker's first
    start of a key does (``Store.may_run_a_job_first`` guesses from it)."""
    store.deployments.deploy(SERVICE, now)
    store.deployments.definition("bench_service")


def _outcome(kind: str, job: DispatchJob) -> Outcome:
    wait, attempt = job.wait_id, job.attempt
    if kind == "completed":
        return JobCompleted(wait_id=wait, attempt=attempt, variables={"charged": 42})
    if kind == "bpmn_error":
        return JobErrorThrown(wait_id=wait, attempt=attempt, code="nope", message="no")
    return JobFailed(wait_id=wait, attempt=attempt, error="declined", error_class="ValueError")


def _rows(store: Store, table: Any, instance_id: str) -> int:
    column = table.c.instance_id if "instance_id" in table.c else None
    with store.read() as conn:
        if column is None:  # the outbox: its rows name the instance in their payload
            return sum(
                1
                for (payload,) in conn.execute(select(table.c.payload))
                if payload.get("instance_id") == instance_id
            )
        return int(conn.execute(select(func.count()).where(column == instance_id)).scalar_one())


def _ordinary(store: Store, instance_id: str, kind: str, now: datetime) -> Any:
    """Start, then the job's outcome in a transaction of its own (the broker's way)."""
    started = store.start(
        NewInstance("bench_service", instance_id, {"n": 1}, trigger_id=instance_id), now=now
    )
    [row] = [r for r in started.outbox_rows if r.kind == "DispatchJob"]
    job = DispatchJob(**{k: v for k, v in row.payload.items() if k != "trigger_id"})
    store.apply(instance_id, _outcome(kind, job), now + timedelta(seconds=1), trigger_id="done")
    return store.queries.instance(instance_id)


@pytest.mark.parametrize("kind", ["completed", "bpmn_error", "failed"])
def test_a_job_run_before_its_start_ends_where_the_ordinary_path_does(
    store: Store, now: datetime, kind: str
) -> None:
    _deployed(store, now)
    run = Runner(lambda job: JobRun(_outcome(kind, job), now + timedelta(seconds=1)))
    counter = sqlcount.TxCounter(store.engine)
    try:
        applied = store.start(
            NewInstance("bench_service", "first", {"n": 1}), now=now, job_first=run
        )
        counts = counter.snapshot()
    finally:
        counter.close()
    [job] = run.asked
    assert job.job_type == "bench-noop-job" and job.instance_id == "first"
    assert counts.write_transactions == 1  # the ordinary path: two, and two more rows each
    assert not [r for r in applied.outbox_rows if r.kind == "DispatchJob"]

    view = store.queries.instance("first")
    other = _ordinary(store, "other", kind, now)
    assert (view.status, view.variables, view.revision) == (
        other.status,
        other.variables,
        other.revision,
    )
    assert [(i.cause_class, i.node_id) for i in view.incidents] == [
        (i.cause_class, i.node_id) for i in other.incidents
    ]
    assert _rows(store, deadlines, "first") == _rows(store, deadlines, "other")
    assert _rows(store, outbox, "first") == 0
    # Both steps' facts, each at its own revision and time, as the ordinary path
    # records them; created at the start, updated when the job ended.
    history = [
        sorted((f.revision, f.kind, f.at.replace(tzinfo=None)) for f in store.queries.history(i))
        for i in ("first", "other")
    ]
    assert history[0] == history[1]
    assert {r for _, _, r in history[0]} == {
        t.replace(tzinfo=None) for t in (now, now + timedelta(seconds=1))
    }
    assert (view.created_at, view.updated_at) == (other.created_at, other.updated_at)


def test_a_job_that_sent_itself_to_the_broker_leaves_its_wait_and_no_dispatch(
    store: Store, now: datetime
) -> None:
    _deployed(store, now)
    applied = store.start(
        NewInstance("bench_service", "retried", {}),
        now=now,
        job_first=Runner(lambda job: JobRun(None, now)),
    )
    assert store.queries.instance("retried").status == "active"
    assert [w.kind for w in store.queries.instance("retried").waits] == ["job"]
    assert _rows(store, deadlines, "retried") == 1  # its timeout still guards it
    assert _rows(store, outbox, "retried") == 0  # its Celery retry is the dispatch
    assert not applied.outbox_rows


def test_a_job_not_run_is_dispatched_as_usual(store: Store, now: datetime) -> None:
    _deployed(store, now)
    run = Runner(lambda job: None)
    applied = store.start(NewInstance("bench_service", "later", {}), now=now, job_first=run)
    assert len(run.asked) == 1
    assert [r.kind for r in applied.outbox_rows] == ["DispatchJob"]
    assert _rows(store, outbox, "later") == 1


def test_a_second_delivery_of_a_start_is_a_duplicate(store: Store, now: datetime) -> None:
    _deployed(store, now)
    run = Runner(lambda job: JobRun(_outcome("completed", job), now))
    store.start(NewInstance("bench_service", "twice", {}, trigger_id="t"), now=now, job_first=run)
    again = store.start(
        NewInstance("bench_service", "twice", {}, trigger_id="t"), now=now, job_first=run
    )
    assert again.duplicate and not again.changed
    assert store.queries.instance("twice").status == "completed"


def test_a_model_naming_no_job_it_may_run_is_started_in_its_own_transaction(
    store: Store, now: datetime
) -> None:
    """The guess: no second statement outside the start's transaction, and the runner
    is not asked, for a model whose job types it may not run — or one this process has
    not looked up yet (its first start loads it)."""

    class Never(Runner):
        def may_run(self, job_type: str) -> bool:
            return job_type != "bench-noop-job"

    store.deployments.deploy(SERVICE, now)
    run = Runner(lambda job: None)
    store.start(NewInstance("bench_service", "unseen", {}), now=now, job_first=run)
    never = Never(lambda job: None)
    counter = sqlcount.TxCounter(store.engine)
    try:
        applied = store.start(
            NewInstance("bench_service", "no-eager", {}), now=now, job_first=never
        )
        counts = counter.snapshot()
    finally:
        counter.close()
    assert run.asked == [] and never.asked == []
    assert [r.kind for r in applied.outbox_rows] == ["DispatchJob"]
    assert (counts.write_transactions, counts.read_transactions) == (1, 0)


def _task(redelivered: bool | None, retries: int = 0) -> Any:
    info = {} if redelivered is None else {"redelivered": redelivered}
    request = SimpleNamespace(
        is_eager=False, called_directly=False, delivery_info=info, hostname="w@h", retries=retries
    )
    return SimpleNamespace(request=request)


@pytest.fixture
def eager_noop(monkeypatch: pytest.MonkeyPatch) -> Any:
    """This process's settings mark a job type eager, on a broker URL of the test's."""
    from dormant.persistence.settings import JobTypeSetting
    from dormant.tasks import app as app_module

    def on(broker_url: str) -> None:
        settings = app_module.settings.model_copy(
            update={
                "job_types": {"bench-noop-job": JobTypeSetting(eager=True)},
                "broker_url": broker_url,
            }
        )
        monkeypatch.setattr(app_module, "settings", settings)

    return on


def test_only_a_first_try_on_a_broker_that_marks_redeliveries_runs_a_job_first(
    eager_noop: Any,
) -> None:
    from dormant.tasks.triggers import _JobBeforeStart

    eager_noop("redis://127.0.0.1:6379/0")
    assert _JobBeforeStart.for_task(_task(False)) is not None
    assert _JobBeforeStart.for_task(_task(None)) is not None
    assert _JobBeforeStart.for_task(_task(True)) is None  # its job's wait goes first
    assert _JobBeforeStart.for_task(_task(False, retries=1)) is None  # after a DB error
    eager_noop("amqp://guest:guest@127.0.0.1:5672//")
    assert _JobBeforeStart.for_task(_task(False)) is not None
    eager_noop("sqla+sqlite:///broker.sqlite3")  # the embedded broker flags no redelivery
    assert _JobBeforeStart.for_task(_task(False)) is None


def test_no_eager_type_no_job_first(monkeypatch: pytest.MonkeyPatch) -> None:
    from dormant.tasks import app as app_module
    from dormant.tasks.triggers import _JobBeforeStart

    settings = app_module.settings.model_copy(
        update={"job_types": {}, "broker_url": "redis://127.0.0.1:6379/0"}
    )
    monkeypatch.setattr(app_module, "settings", settings)
    assert _JobBeforeStart.for_task(_task(False)) is None

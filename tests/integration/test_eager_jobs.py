"""Eager jobs on the real services: a job type marked ``eager`` (``DORMANT_JOB_TYPES``)
runs in the worker whose trigger dispatched it, and everything a job does still works:
its result, its headers, its failure, a Celery retry; parallel jobs stay parallel, and
a type not marked goes through the broker as before (tasks/jobs.py, "Eager jobs")."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.integration.conftest import Stack, running_stack, wait_for
from tests.integration.test_tasks import HEAD, job, linear

pytestmark = pytest.mark.integration

EAGER = ("test-double", "test-fail", "test-retry-once")

TWO_JOBS = (
    f'{HEAD}<bpmn:process id="eager_fork" isExecutable="true"><bpmn:startEvent id="start"/>'
    '<bpmn:parallelGateway id="split"/><bpmn:parallelGateway id="join"/>'
    + job("test-double").replace("{id}", "left")
    + job("test-double").replace("{id}", "right")
    + '<bpmn:endEvent id="end"/>'
    '<bpmn:sequenceFlow id="a" sourceRef="start" targetRef="split"/>'
    '<bpmn:sequenceFlow id="b" sourceRef="split" targetRef="left"/>'
    '<bpmn:sequenceFlow id="c" sourceRef="split" targetRef="right"/>'
    '<bpmn:sequenceFlow id="g" sourceRef="left" targetRef="join"/>'
    '<bpmn:sequenceFlow id="e" sourceRef="right" targetRef="join"/>'
    '<bpmn:sequenceFlow id="f" sourceRef="join" targetRef="end"/>'
    "</bpmn:process></bpmn:definitions>"
)


@pytest.fixture(scope="module", params=["pg_redis", "embedded"])
def eager_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    eager = json.dumps({t: {"eager": True} for t in EAGER})
    with running_stack(
        request.param, "eager", request, tmp_path_factory, DORMANT_JOB_TYPES=eager
    ) as s:
        yield s


def _worker_log(s: Stack) -> str:
    return "\n".join(p.text() for p in s.procs if p.name.startswith("worker"))


def _jobs_logged(s: Stack, iid: str) -> tuple[int, int]:
    """How many of ``iid``'s jobs ran in place, and how many went through the broker."""
    log = _worker_log(s)
    return (
        log.count(f"job run in place instance={iid}"),
        log.count(f"job dispatched instance={iid}"),
    )


def _two_jobs_logged(s: Stack, iid: str) -> tuple[int, int]:
    """``_jobs_logged`` once both of ``iid``'s two jobs are in the log."""

    def counts() -> tuple[int, int] | None:
        seen = _jobs_logged(s, iid)
        return seen if sum(seen) == 2 else None

    found: tuple[int, int] = wait_for(counts, 10, what="both jobs logged")
    return found


def test_an_eager_job_runs_in_the_worker_that_dispatched_it(eager_stack: Stack) -> None:
    s = eager_stack
    s.client.deploy(linear("eager_one", job("test-double")))
    iid = s.client.start("eager_one", {"n": 21})
    view = s.wait_status(iid, "completed")
    assert view.variables["doubled"] == 42
    assert view.variables["job_key"].startswith(f"{iid}:")  # its headers came with it
    assert _jobs_logged(s, iid) == (1, 0)


def test_a_type_not_marked_eager_goes_through_the_broker(eager_stack: Stack) -> None:
    s = eager_stack
    s.client.deploy(linear("eager_not", job("test-undo")))
    iid = s.client.start("eager_not", {"doubled": 4})
    assert s.wait_status(iid, "completed").variables["undone"] == 4
    assert _jobs_logged(s, iid) == (0, 1)


def test_an_eager_job_that_fails_opens_its_incident(eager_stack: Stack) -> None:
    s = eager_stack
    s.client.deploy(linear("eager_fail", job("test-fail")))
    iid = s.client.start("eager_fail")
    view = s.wait_status(iid, "active_incidents")
    assert "declined" in view.incidents[0].cause
    assert view.incidents[0].cause_class == "ValueError"
    assert _jobs_logged(s, iid)[0] >= 1


def test_a_celery_retry_of_an_eager_job_is_published_with_its_headers(
    eager_stack: Stack,
) -> None:
    s = eager_stack
    s.client.deploy(linear("eager_retry", job("test-retry-once")))
    iid = s.client.start("eager_retry")
    view = s.wait_status(iid, "completed")
    assert view.variables["retried"] == 1  # the second run came from the broker...
    assert view.variables["job_key"].startswith(f"{iid}:")  # ...still tied to its wait


def test_of_two_parallel_jobs_one_runs_in_place_and_one_is_published(
    eager_stack: Stack,
) -> None:
    s = eager_stack
    s.client.deploy(TWO_JOBS)
    iid = s.client.start("eager_fork", {"n": 1})
    s.wait_status(iid, "completed")
    assert _two_jobs_logged(s, iid) == (1, 1)


@pytest.fixture
def eager_double(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's settings mark ``test-double`` eager (the job module is loaded)."""
    import tests.integration.test_tasks_jobs  # noqa: F401  (registers the job types)
    from dormant.persistence.settings import JobTypeSetting
    from dormant.tasks import app as app_module

    settings = app_module.settings.model_copy(
        update={"job_types": {"test-double": JobTypeSetting(eager=True)}}
    )
    monkeypatch.setattr(app_module, "settings", settings)


@pytest.mark.usefixtures("eager_double")
def test_only_a_marked_registered_type_on_a_queue_this_worker_reads_runs_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dormant.tasks.app import QUEUE, TIMER_QUEUE, app
    from dormant.tasks.job_dispatch import runs_here

    queues = app.amqp.queues
    monkeypatch.setattr(queues, "_consume_from", {QUEUE.name: QUEUE})
    assert runs_here("test-double")
    assert not runs_here("test-undo")  # registered, not marked
    monkeypatch.setattr(queues, "_consume_from", {TIMER_QUEUE.name: TIMER_QUEUE})
    assert not runs_here("test-double")  # this worker does not read the job's queue


def test_a_marked_type_this_process_has_not_registered_is_published(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dormant.persistence.settings import JobTypeSetting
    from dormant.tasks import app as app_module
    from dormant.tasks.job_dispatch import runs_here

    settings = app_module.settings.model_copy(
        update={"job_types": {"nobody-has-this": JobTypeSetting(eager=True)}}
    )
    monkeypatch.setattr(app_module, "settings", settings)
    assert not runs_here("nobody-has-this")


def test_the_job_after_an_eager_jobs_result_goes_through_the_broker(eager_stack: Stack) -> None:
    """No chain of jobs inside one task: the result applied in place publishes the next."""
    s = eager_stack
    s.client.deploy(linear("eager_chain", job("test-double"), job("test-double")))
    iid = s.client.start("eager_chain", {"n": 2})
    s.wait_status(iid, "completed")
    assert _two_jobs_logged(s, iid) == (1, 1)

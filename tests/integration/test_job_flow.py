"""Flow control of job types on real workers (docs/flow-control.md): PostgreSQL, Redis,
two ``dormant worker`` processes (prefork x3 each) and a beat, one stack for the module.

The jobs count for themselves (tests/integration/flow_jobs.py, in the stack's Redis db):

* a per-key limit of 2, and a type-wide limit of 2 without a key, hold across both
  workers: the peak of concurrently running jobs, counted by the jobs, is 2 (6 pool
  processes could run 6);
* fairness: 400 jobs of one key, then 2 of another, behind a type-wide limit of 1 —
  the 2 finish before the first 40 of the burst (the issue's 10,000 and 10 before the
  first 1,000: the same 200:1 ratio and 10 % bound, cut for the suite's time budget);
* ``RateLimited(retry_after)``: the job runs again after the pause, with the same
  attempt (same idempotency key: no retry consumed), and the pause is visible;
* a rate of 4 per second: 12 jobs cannot all start within the first second.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from dormant.engine_core.errors import InvalidOperation
from tests.integration.conftest import Stack, _urls, wait_for
from tests.integration.waitkit import end, model, start

pytestmark = pytest.mark.integration

JOB_TYPES = {
    "flow-peak": {"key": "=customerId", "key_concurrency": 2},
    "flow-peak-all": {"concurrency": 2},
    "flow-fair": {"concurrency": 1, "key": "=customerId"},
    "flow-rate": {"rate": 4, "rate_period_seconds": 1},
}


def service(job_type: str, retries: int = 3) -> str:
    return (
        f'<bpmn:serviceTask id="job"><bpmn:extensionElements><zeebe:taskDefinition '
        f'type="{job_type}" retries="{retries}"/></bpmn:extensionElements></bpmn:serviceTask>'
    )


def one_job(key: str, job_type: str, retries: int = 3) -> str:
    return model(
        key, start() + service(job_type, retries) + end(), [("start", "job"), ("job", "end")]
    )


@pytest.fixture(scope="module")
def flow(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Stack, redis.Redis]]:
    import tests.integration.conftest as conftest

    tmp = tmp_path_factory.mktemp("flow")
    with _urls("pg_redis", tmp, request) as urls:
        s = Stack(*urls, tmp)
        s.env["DORMANT_JOB_TYPES"] = json.dumps(JOB_TYPES)
        saved = conftest.JOBS_MODULE
        conftest.JOBS_MODULE = saved + ",tests.integration.flow_jobs"  # read by the argv
        try:
            first = s._worker("worker", 3, None).launch()
            second = s._worker("worker", 3, None).launch()
            beat = s._beat().launch()
            first.wait_ready(conftest.WORKER_READY, 60)
            second.wait_ready(conftest.WORKER_READY, 60)
            beat.wait_ready(conftest.BEAT_READY, 60)
            yield s, redis.Redis.from_url(s.broker_url)
        finally:
            conftest.JOBS_MODULE = saved
            s.close()


def _completed(s: Stack, ids: list[str], timeout: float) -> None:
    for iid in ids:
        s.wait_status(iid, "completed", timeout)


def test_a_key_never_runs_more_than_its_limit_across_two_workers(
    flow: tuple[Stack, redis.Redis],
) -> None:
    s, r = flow
    tag = uuid.uuid4().hex[:8]
    key = f"peak_{tag}"
    s.client.deploy(one_job(key, "flow-peak"))
    s.client.deploy(one_job(f"{key}_all", "flow-peak-all"))
    ids = s.client.start_many(
        key, [{"customerId": "a", "tag": tag}] * 12 + [{"customerId": "b", "tag": tag}] * 4
    )
    # a type-wide limit without a key (PostgreSQL's one-statement path)
    ids += s.client.start_many(f"{key}_all", [{"tag": tag}] * 8)
    _completed(s, ids, 90)
    peaks = {c: int(r.get(f"flowtest:{tag}:peak:{c}") or 0) for c in ("a", "b", "all")}
    runs = [x.decode() for x in r.lrange(f"flowtest:{tag}:runs", 0, -1)]
    # each job ran once (a job delivered twice would run beside itself, over any limit)
    assert len(runs) == len(ids) and len(set(runs)) == len(ids), (peaks, sorted(runs))
    # never above the limit; and the limit is reached (the jobs did run side by side:
    # without flow control the peak was 6, every pool process of both workers)
    assert all(0 < p <= 2 for p in peaks.values()) and max(peaks.values()) == 2, peaks
    # every slot was given back with its job's result
    rows = {(row.job_type, row.key): row for row in s.client.job_types()}
    assert rows[("flow-peak", None)].running == 0
    assert rows[("flow-peak", None)].waiting == 0
    assert (rows[("flow-peak-all", None)].running, rows[("flow-peak-all", None)].waiting) == (0, 0)


def test_a_burst_of_one_key_does_not_starve_another(flow: tuple[Stack, redis.Redis]) -> None:
    s, r = flow
    tag = uuid.uuid4().hex[:8]
    key = f"fair_{tag}"
    s.client.deploy(one_job(key, "flow-fair"))
    burst, few = 400, 2
    ids = s.client.start_many(key, [{"customerId": "big", "tag": tag}] * burst)
    ids += s.client.start_many(key, [{"customerId": "small", "tag": tag}] * few)

    def all_waiting() -> bool:
        rows = {(row.job_type, row.key): row for row in s.client.job_types()}
        head = rows.get(("flow-fair", None))
        return head is not None and head.running + head.waiting == burst + few

    wait_for(all_waiting, 120, 0.5, "every job running or waiting")
    r.set(f"flowtest:{tag}:gate", 1)
    order_key = f"flowtest:{tag}:order"
    wait_for(
        lambda: [x.decode() for x in r.lrange(order_key, 0, -1)].count("small") == few,
        90,
        0.2,
        "the small key's jobs done",
    )
    order = [x.decode() for x in r.lrange(order_key, 0, -1)]
    big_before = order[: max(i for i, c in enumerate(order) if c == "small")].count("big")
    assert big_before < burst // 10, order[:50]


def test_rate_limited_job_resumes_after_the_pause_without_a_retry(
    flow: tuple[Stack, redis.Redis],
) -> None:
    s, r = flow
    tag = uuid.uuid4().hex[:8]
    key = f"r429_{tag}"
    s.client.deploy(one_job(key, "flow-429", retries=1))
    (iid,) = s.client.start_many(key, [{"tag": tag, "pause": 1.0}])

    def paused() -> Any:
        rows = {(row.job_type, row.key): row for row in s.client.job_types()}
        head = rows.get(("flow-429", None))
        return head if head is not None and head.paused_until is not None else None

    try:
        head = wait_for(paused, 30, 0.1, "the type paused")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{s.diagnostics(iid)}") from None
    assert head.waiting == 1
    view = s.wait_status(iid, "completed", 30)
    assert view.variables["calls"] == 2
    runs = [x.decode().split("|") for x in r.lrange(f"flowtest:{tag}:runs", 0, -1)]
    assert [k for k, _ in runs] == [runs[0][0]] * 2  # the same attempt ran again
    assert float(runs[1][1]) >= head.paused_until.timestamp() - 0.05  # never early
    assert view.incidents == []


def test_a_rate_limit_spreads_the_starts(flow: tuple[Stack, redis.Redis]) -> None:
    s, r = flow
    tag = uuid.uuid4().hex[:8]
    key = f"rate_{tag}"
    s.client.deploy(one_job(key, "flow-rate"))
    ids = s.client.start_many(key, [{"tag": tag}] * 12)
    _completed(s, ids, 60)
    at = sorted(float(x) for x in r.lrange(f"flowtest:{tag}:at", 0, -1))
    assert len(at) == 12
    # a bucket of 4 refilled at 4/s: the 12th start is >= 2 s after the first grant;
    # 1 s of it is left for dispatch jitter (a lower bound: never faster than the rate)
    assert at[-1] - at[0] >= 1.0, at


def test_limits_change_at_run_time_audited_and_shown(flow: tuple[Stack, redis.Redis]) -> None:
    """``job-types set-limit`` changes a type's limits (each change once in the audit
    trail, with its actor), refuses a contradiction with the reason, and the Client's
    list (``job-types list``), the console's page and ``/metrics`` show the type."""
    s, _ = flow
    job_type = f"flow-cli-{uuid.uuid4().hex[:6]}"
    done = s.run_cli("--as", "olga", "job-types", "set-limit", job_type, "--concurrency", "5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{job_type}: concurrency=5, rate_period_seconds=1.0"
    with pytest.raises(InvalidOperation, match="per-key limit needs a key expression"):
        s.client.set_job_type_limits(job_type, key_concurrency=2)
    [row] = [r for r in s.client.job_types() if r.job_type == job_type]
    assert (row.key, row.limit, row.running, row.waiting) == (None, 5, 0, 0)
    entries = [e for e in s.client.audit_log(actor="olga") if e.target == job_type]
    assert [(e.action, e.source, e.outcome) for e in entries] == [
        ("job_type_set_limits", "cli", "done")
    ]
    assert entries[0].params == {"concurrency": 5}

    from starlette.testclient import TestClient

    from dormant.tasks.console import create_app
    from dormant.tasks.console.config import ConsoleConfig
    from dormant.tasks.metrics import registry

    app = create_app(ConsoleConfig(secret="s" * 32, read_only=True), client=s.client)
    page = TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)).get("/jobs")
    assert page.status_code == 200
    assert 'id="job-flow"' in page.text and f'data-job-type="{job_type}"' in page.text
    exported = {
        (m.name, tuple(sorted(sample.labels.items())))
        for m in registry(s.database_url).collect()
        for sample in m.samples
    }
    assert ("dormant_job_flow_running", (("job_type", job_type), ("key", ""))) in exported

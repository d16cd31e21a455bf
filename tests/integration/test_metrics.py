"""Every metric family moves when its event happens: scrape, act, scrape.

A real ``dormant worker --metrics-port`` (prefork, two children: the multiprocess
mode is what is shown) and ``dormant beat`` on PostgreSQL + Redis.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dormant.persistence.store import NewInstance
from tests.integration.conftest import JOBS_MODULE, Proc, Stack, _urls, wait_for
from tests.integration.test_tasks import MESSAGE_DEF, TIMER, job, linear

pytestmark = pytest.mark.integration

Sample = tuple[str, frozenset[tuple[str, str]]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Metered:
    def __init__(self, stack: Stack, port: int) -> None:
        self.stack, self.port = stack, port

    def scrape(self) -> dict[Sample, float]:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        out: dict[Sample, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, frozenset(s.labels.items()))] = s.value
        return out

    def value(self, name: str, **labels: str) -> float:
        return self.scrape().get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="module")
def metered(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Metered]:
    tmp = tmp_path_factory.mktemp("metrics")
    with _urls("pg_redis", tmp, request) as urls:
        stack = Stack(*urls, tmp)
        stack.env["DORMANT_JOB_TIMEOUT_SECONDS"] = "2"
        stack.env["DORMANT_OUTBOX_SWEEP_AFTER_SECONDS"] = "1"
        stack.env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        port = _free_port()
        worker = Proc(
            "worker-metrics",
            stack.dormant(
                "worker",
                "--include",
                f"{JOBS_MODULE},tests.integration.obs_jobs",
                "--concurrency",
                "2",
                "--metrics-port",
                str(port),
                "--metrics-host",
                "127.0.0.1",
            ),
            stack.env,
            tmp,
        )
        stack.procs.append(worker)
        try:
            worker.start()
            stack.beat()
            yield Metered(stack, port)
        finally:
            stack.close()


def test_triggers_apply_time_lock_waits_and_dispatched_jobs(metered: Metered) -> None:
    c = metered.stack.client
    c.deploy(linear("m-ok", job("obs-charge")))
    before = metered.scrape()
    iid = c.start("m-ok")
    metered.stack.wait_status(iid, "completed")

    def grew(name: str, **labels: str) -> bool:
        key = (name, frozenset(labels.items()))
        return wait_for(lambda: metered.scrape().get(key, 0.0) > before.get(key, 0.0), what=name)

    assert grew("dormant_triggers_applied_total", kind="start", outcome="applied")
    assert grew("dormant_triggers_applied_total", kind="job_completed", outcome="applied")
    assert grew("dormant_trigger_apply_duration_seconds_count", kind="start")
    assert grew("dormant_trigger_apply_duration_seconds_count", kind="job_completed")
    assert grew("dormant_row_lock_wait_seconds_count")  # the job's result locks the row
    assert grew("dormant_jobs_dispatched_total", job_type="obs-charge")
    # a duplicate start (the same instance id again) is counted as such
    from dormant.tasks.app import publish

    with __import__("dormant.tasks.app", fromlist=["app"]).app.connection_for_write(
        metered.stack.broker_url
    ) as conn:
        publish(
            "dormant.start",
            "trigger.start",
            {"key": "m-ok", "instance_id": iid, "trigger_id": "again"},
            connection=conn,
        )
    assert grew("dormant_triggers_applied_total", kind="start", outcome="duplicate")


def test_incidents_raised_open_and_failed_jobs(metered: Metered) -> None:
    c = metered.stack.client
    c.deploy(linear("m-fail", job("test-fail")))
    before = metered.scrape()
    assert (
        before.get(
            ("dormant_incidents_open", frozenset({"process": "m-fail", "node": "n1"}.items()))
        )
        is None
    )
    iid = c.start("m-fail")
    metered.stack.wait_status(iid, "active_incidents")
    labels = {"process": "m-fail", "node": "n1"}
    assert wait_for(lambda: metered.value("dormant_incidents_raised_total", **labels) == 1)
    assert metered.value("dormant_incidents_open", **labels) == 1
    assert metered.value("dormant_jobs_failed_total", job_type="test-fail") >= 1 + before.get(
        ("dormant_jobs_failed_total", frozenset({"job_type": "test-fail"}.items())), 0.0
    )
    assert (
        metered.value("dormant_triggers_applied_total", kind="job_failed", outcome="incident") >= 1
    )
    (incident,) = c.incidents(iid)
    c.resolve_incident(incident.id)
    metered.stack.wait_status(iid, "completed")
    assert wait_for(lambda: metered.value("dormant_incidents_open", **labels) == 0)
    assert metered.value("dormant_incidents_raised_total", **labels) == 1


def test_a_job_without_a_result_in_time_counts_as_timed_out(metered: Metered) -> None:
    c = metered.stack.client
    c.deploy(linear("m-slow", job("obs-slow")))
    assert metered.value("dormant_jobs_timed_out_total", job_type="obs-slow") == 0
    iid = c.start("m-slow")
    metered.stack.wait_status(iid, "completed", timeout=40)
    assert metered.value("dormant_jobs_timed_out_total", job_type="obs-slow") == 1
    assert metered.value("dormant_jobs_dispatched_total", job_type="obs-slow") == 2
    assert metered.value("dormant_timer_lateness_seconds_count") >= 1  # the timeout fired


SIGNAL_THROW = (
    '<bpmn:intermediateThrowEvent id="{id}"><bpmn:signalEventDefinition signalRef="s1"/>'
    "</bpmn:intermediateThrowEvent>"
)
SIGNAL_DEF = '<bpmn:signal id="s1" name="m-nobody"/>'


def test_deadline_inbox_and_outbox_backlogs_rise_while_beat_is_away_then_drain(
    metered: Metered, tmp_path: Path
) -> None:
    from dormant.persistence import clock, inbox

    stack, c = metered.stack, metered.stack.client
    c.deploy(linear("m-timer", TIMER))
    c.deploy(linear("m-throw", SIGNAL_THROW, extra=SIGNAL_DEF + MESSAGE_DEF))
    (beat,) = [p for p in stack.procs if p.name.startswith("beat")]
    lateness_before = metered.value("dormant_timer_lateness_seconds_count")
    assert metered.value("dormant_database_up") == 1
    assert metered.value("dormant_deadlines_due") == 0
    assert metered.value("dormant_inbox_backlog") == 0
    assert metered.value("dormant_outbox_backlog", state="unpublished") == 0
    beat.stop()
    try:
        timed = c.start("m-timer")
        wait_for(lambda: c.instance(timed).waits, what="the timer armed")
        assert metered.value("dormant_deadlines_waiting") == 1
        # a producer that died between its inbox write and its publish
        inbox.record(c._store.engine, "dormant.signal", "signal.m-nobody", {"name": "m-nobody"})
        # a committed step whose publisher died before publishing its outbox row
        c._store.start(NewInstance("m-throw", "m-throw-1", {}), now=clock.now())
        wait_for(lambda: metered.value("dormant_deadlines_due") == 1, what="the timer due")
        scraped = metered.scrape()
        assert scraped[("dormant_inbox_backlog", frozenset())] == 1
        assert scraped[("dormant_inbox_oldest_age_seconds", frozenset())] > 0
        assert scraped[("dormant_outbox_backlog", frozenset({("state", "unpublished")}))] == 1
        assert scraped[("dormant_outbox_oldest_age_seconds", frozenset())] > 0
    finally:
        beat.start(ready="beat: Starting")
    stack.wait_status(timed, "completed")
    wait_for(lambda: metered.value("dormant_deadlines_due") == 0, what="deadlines drained")
    wait_for(lambda: metered.value("dormant_inbox_backlog") == 0, what="inbox drained")
    wait_for(
        lambda: (
            metered.value("dormant_outbox_backlog", state="unpublished") == 0
            and metered.value("dormant_outbox_backlog", state="unconsumed") == 0
        ),
        what="outbox drained",
    )
    assert metered.value("dormant_timer_lateness_seconds_count") > lateness_before
    # the timer fired late by the time beat was away: at least a second
    assert metered.value("dormant_timer_lateness_seconds_bucket", le="0.5") <= lateness_before


def test_the_console_serves_the_same_families(metered: Metered, tmp_path: Path) -> None:
    from tests.integration.console.kit import console_proc

    c = metered.stack.client
    c.deploy(linear("m-console", job("test-fail")))
    console = console_proc(metered.stack, auth=False)
    with console.http() as http:

        def scrape() -> dict[Sample, float]:
            response = http.get("/metrics")
            assert response.status_code == 200, response.text
            return {
                (s.name, frozenset(s.labels.items())): s.value
                for f in text_string_to_metric_families(response.text)
                for s in f.samples
            }

        key = ("dormant_incidents_open", frozenset({"process": "m-console", "node": "n1"}.items()))
        assert scrape()[("dormant_database_up", frozenset())] == 1
        assert scrape().get(key, 0) == 0
        iid = c.start("m-console")
        metered.stack.wait_status(iid, "active_incidents")
        assert scrape()[key] == 1
        families = {name for name, _ in scrape()}
        assert {
            "dormant_deadlines_due",
            "dormant_inbox_backlog",
            "dormant_outbox_backlog",
        } <= families

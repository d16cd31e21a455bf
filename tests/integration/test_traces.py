"""One order's life is one trace: producer → trigger → job → result spans share one
trace id, read from the OpenTelemetry SDK's in-memory exporter.

The worker runs in this process (Celery's own test worker, a real consumer on Redis,
PostgreSQL behind it) so its spans land in the exporter the test reads; everything
between the Client's publish and the job's result crosses the broker for real, so the
context can only arrive through the messages' headers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.integration.conftest import Stack, _urls, wait_for
from tests.integration.test_tasks import job, linear

pytestmark = pytest.mark.integration

EXPORTER = InMemorySpanExporter()


@pytest.fixture
def traced_stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stack]:
    from celery.contrib.testing.worker import start_worker

    import tests.integration.obs_jobs  # noqa: F401  (registers the job task)
    from dormant.persistence.settings import Settings
    from dormant.tasks import app as app_module

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)
    saved = {k: os.environ.get(k) for k in ("DORMANT_DATABASE_URL", "DORMANT_BROKER_URL")}
    with _urls("pg_redis", tmp_path, request) as urls:
        stack = Stack(*urls, tmp_path)
        app_module.configure(
            Settings.from_env(database_url=stack.database_url, broker_url=stack.broker_url)
        )
        try:
            with start_worker(
                app_module.app, pool="solo", perform_ping_check=False, shutdown_timeout=20
            ):
                yield stack
        finally:
            stack.close()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            app_module.configure(Settings.from_env())


def test_producer_trigger_job_and_result_share_one_trace(traced_stack: Stack) -> None:
    c = traced_stack.client
    c.deploy(linear("tr-order", job("obs-charge")))
    EXPORTER.clear()
    iid = c.start("tr-order", business_key="order-1")
    traced_stack.wait_status(iid, "completed")

    def spans() -> dict[str, Any] | None:
        by_name = {s.name: s for s in EXPORTER.get_finished_spans()}
        wanted = (
            "dormant publish dormant.start",
            "dormant trigger start",
            "dormant publish obs-charge",
            "dormant job obs-charge",
            "dormant trigger job_completed",
        )
        return by_name if all(w in by_name for w in wanted) else None

    by_name = wait_for(spans, what="the order's spans")
    producer = by_name["dormant publish dormant.start"]
    started = by_name["dormant trigger start"]
    dispatch = by_name["dormant publish obs-charge"]
    job_span = by_name["dormant job obs-charge"]
    result = by_name["dormant trigger job_completed"]
    trace_ids = {s.context.trace_id for s in (producer, started, dispatch, job_span, result)}
    assert trace_ids == {producer.context.trace_id}, "one order, one trace"
    # the chain: each span's parent is the one before it, across the broker twice
    assert started.parent.span_id == producer.context.span_id
    assert dispatch.parent.span_id == started.context.span_id
    assert job_span.parent.span_id == dispatch.context.span_id
    assert result.parent.span_id == job_span.context.span_id
    assert producer.kind is trace.SpanKind.PRODUCER and started.kind is trace.SpanKind.CONSUMER
    for span, kind in ((started, "start"), (result, "job_completed")):
        attrs = dict(span.attributes or {})
        assert attrs["dormant.instance_id"] == iid
        assert attrs["dormant.process_key"] == "tr-order"
        assert attrs["dormant.trigger.kind"] == kind
        assert attrs["dormant.trigger.outcome"] == "applied"
    assert dict(job_span.attributes or {})["dormant.job_type"] == "obs-charge"

# mypy: disable-error-code="no-untyped-call,untyped-decorator"
"""OpenTelemetry traces: one order's life is one trace (the optional ``dormant[otel]``).

dormant is a library here: it uses only the OpenTelemetry *API* and the global tracer
provider; the application configures the SDK and its exporter (``opentelemetry-
instrument dormant worker``, or an ``--include`` module that sets a provider). With the
API absent, or no provider configured, every function below costs next to nothing.

The context travels in Celery message headers (W3C ``traceparent``/``tracestate``,
the global propagator), through the one publishing function ``tasks.app.publish``:

* every publish opens a PRODUCER span ``dormant publish <task>`` and injects it, so the
  Client's start, a follow-up from the outbox and a job dispatch all carry it;
* every trigger task opens a CONSUMER span ``dormant trigger <kind>`` from the headers
  it was sent with, around its whole shell (what it publishes after the commit is its
  child), with the instance id, process key, trigger kind and outcome as attributes;
* a job (a user's task with dormant's headers) runs inside ``dormant job <type>``, and
  its result, applied in the same worker, is ``dormant trigger job_completed`` (or
  ``job_failed``) inside that.

A trigger re-published by a sweep (the inbox or the outbox) starts a new trace: the
sweep has no context to give it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery.signals import task_postrun, task_prerun

from dormant.tasks.job_headers import HEADER_ATTEMPT, HEADER_INSTANCE, read_header

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace

    _TRACER: Any = trace.get_tracer("dormant")
except ImportError:  # the optional extra is not installed
    trace = None  # type: ignore[assignment]

__all__ = ["annotate", "job_span", "publish_headers", "report_span", "trigger_span"]

# attribute names
INSTANCE = "dormant.instance_id"
PROCESS = "dormant.process_key"
KIND = "dormant.trigger.kind"
OUTCOME = "dormant.trigger.outcome"
JOB_TYPE = "dormant.job_type"
ATTEMPT = "dormant.job.attempt"


def _carrier(request: Any) -> dict[str, str]:
    """The propagation headers of a Celery request (top-level or under ``headers``)."""
    out: dict[str, str] = {}
    if request is None or trace is None:
        return out
    nested = getattr(request, "headers", None) or {}
    for name in propagate.get_global_textmap().fields:
        value = getattr(request, name, None) or nested.get(name)
        if isinstance(value, str):
            out[name] = value
    return out


@contextmanager
def publish_headers(task_name: str, headers: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """Headers for one publish, with this span's context injected into them."""
    merged = dict(headers or {})
    if trace is None:
        yield merged
        return
    with _TRACER.start_as_current_span(
        f"dormant publish {task_name}",
        kind=trace.SpanKind.PRODUCER,
        attributes={"messaging.system": "celery", "messaging.destination.name": task_name},
    ):
        propagate.inject(merged)
        yield merged


@contextmanager
def trigger_span(kind: str, request: Any) -> Iterator[None]:
    """The span of one trigger task, child of the context its message carried."""
    if trace is None:
        yield
        return
    parent = propagate.extract(_carrier(request)) if request is not None else None
    with _TRACER.start_as_current_span(
        f"dormant trigger {kind}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={KIND: kind},
    ):
        yield


def annotate(outcome: str, applied: list[Any]) -> None:
    """Name the outcome, instance and process on the current trigger span."""
    if trace is None:
        return
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attribute(OUTCOME, outcome)
    ids = [a.instance_id for a in applied]
    keys = sorted({a.key for a in applied if a.key})
    if len(ids) == 1:
        span.set_attribute(INSTANCE, ids[0])
    elif ids:
        span.set_attribute(INSTANCE, ids[:50])
    if len(keys) == 1:
        span.set_attribute(PROCESS, keys[0])
    elif keys:
        span.set_attribute(PROCESS, keys)


def report_span(report: Callable[..., None]) -> Callable[..., None]:
    """Wrap ``tasks.job_results.report``: a job's result is a trigger span of its own."""

    @functools.wraps(report)
    def wrapper(instance_id: str, trigger: Any, *args: Any, **kwargs: Any) -> None:
        with trigger_span(str(trigger.kind), None):
            if trace is not None:
                trace.get_current_span().set_attribute(INSTANCE, instance_id)
            report(instance_id, trigger, *args, **kwargs)

    return wrapper


# A job's span lives from task_prerun to task_postrun; both run in the thread that runs it.
_JOB_SPANS: dict[str, tuple[Any, Any]] = {}


def job_span(task: Any) -> None:
    """Open the job's span if ``task`` is running as a dormant job (its headers say so)."""
    request = getattr(task, "request", None)
    if trace is None or request is None or not read_header(request, HEADER_INSTANCE):
        return
    span = _TRACER.start_span(
        f"dormant job {task.name}",
        context=propagate.extract(_carrier(request)),
        kind=trace.SpanKind.CONSUMER,
        attributes={
            INSTANCE: str(read_header(request, HEADER_INSTANCE)),
            JOB_TYPE: str(task.name),
            ATTEMPT: int(read_header(request, HEADER_ATTEMPT) or 1),
        },
    )
    token = otel_context.attach(trace.set_span_in_context(span))
    _JOB_SPANS[str(request.id)] = (span, token)


@task_prerun.connect(weak=False)
def _job_prerun(task: Any = None, **_: Any) -> None:
    job_span(task)


@task_postrun.connect(weak=False)
def _job_postrun(task_id: str | None = None, state: str | None = None, **_: Any) -> None:
    held = _JOB_SPANS.pop(str(task_id), None)
    if held is None:
        return
    span, token = held
    if state:
        span.set_attribute("celery.state", state)
    otel_context.detach(token)
    span.end()

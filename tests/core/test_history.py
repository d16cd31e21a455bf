"""The history for people (engine_core/history.py): every fact kind dormant records is
either translated into a business event or listed as bookkeeping, and a real run reads
as what happened."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path

from dormant.engine_core.history import BOOKKEEPING, TRANSLATED, business_history
from dormant.engine_core.views import FactView

ROOT = Path(__file__).resolve().parents[2]
AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def recorded_kinds() -> set[str]:
    """Every fact kind written anywhere: ``rt.fact("K", ...)``, ``Fact("K", ...)`` and
    a facts row inserted with ``kind="K"`` (the shell's own facts)."""
    kinds: set[str] = set()
    for package in ("engine_core", "persistence", "scheduler", "tasks"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                first = node.args[0] if node.args else None
                if (
                    name in ("fact", "Fact")
                    and isinstance(first, ast.Constant)
                    and isinstance(first.value, str)
                ):
                    kinds.add(first.value)
                if name == "values":
                    for kw in node.keywords:
                        if kw.arg == "kind" and isinstance(kw.value, ast.Constant):
                            kinds.add(str(kw.value.value))
    return kinds


def test_every_fact_kind_is_translated_or_bookkeeping() -> None:
    kinds = recorded_kinds()
    assert {"Hydrated", "Incident", "TriggerDropped", "WakeFailed"} <= kinds  # the walk's reach
    assert set(TRANSLATED) & BOOKKEEPING == set()
    assert sorted(kinds - set(TRANSLATED) - BOOKKEEPING) == []
    # and nothing listed that dormant no longer records
    assert sorted((set(TRANSLATED) | BOOKKEEPING) - kinds) == []


def fact(kind: str, revision: int = 1, **details: object) -> FactView:
    return FactView(at=AT, kind=kind, details=dict(details), revision=revision)


def test_a_run_reads_as_business_events() -> None:
    facts = [
        fact("Started", start="start"),
        fact("Hydrated", trigger="start", token=None, outcome="continued"),
        fact("JobDispatched", node="charge", job_type="charge-card", attempt=1),
        fact("Dehydrated", waits=1, jobs=1),
        fact("Hydrated", 2, trigger="job_failed", token="t2", outcome="continued"),
        fact(
            "JobRetryScheduled",
            2,
            node="charge",
            job_type="charge-card",
            attempt=1,
            error_class="ConnectionError",
        ),
        fact(
            "Incident",
            3,
            action="raised",
            incident="i.i1",
            node="charge",
            cause_class="ConnectionError",
            attempts=1,
        ),
        fact(
            "Incident",
            4,
            action="retried",
            incident="i.i1",
            node="charge",
            cause_class="ConnectionError",
            attempts=1,
        ),
        fact("Hydrated", 5, trigger="message", token="t3", outcome="continued"),
        fact("EndEventReached", 5, node="paid"),
        fact("Completed", 5),
        fact("Suspended", 6),
    ]
    events = business_history(facts)
    assert [e.text for e in events] == [
        "instance started at start",
        "charge entered: job charge-card sent (attempt 1)",
        "job charge-card attempt 1 failed (ConnectionError); retrying",
        "incident i.i1 raised (ConnectionError)",
        "incident i.i1 retried",
        "a message was received",
        "end event paid reached",
        "instance completed",
        "instance suspended",
    ]
    assert [e.category for e in events][-4:] == ["message", "element", "instance", "operator"]
    assert events[6].node == "paid" and events[6].fact == "EndEventReached"


def test_an_unknown_kind_is_shown_not_dropped() -> None:
    [event] = business_history([fact("SomethingNew", detail=1)])
    assert (event.category, event.text) == ("other", "SomethingNew")


def test_an_operators_action_names_its_actor() -> None:
    """The operator trigger's ``actor`` reaches its step's facts (engine_core/engine.py)
    and the history says who did it; the engine's own lines of that step do not."""
    from dormant.engine_core.builder import ProcessBuilder, message
    from dormant.engine_core.triggers import Cancel, Resume, SetVariables, Suspend
    from tests.core.enginekit import Run

    b = ProcessBuilder("order")
    b.start_event("s").intermediate_catch_event("wait", message("paid", "=orderId"))
    b.end_event("done")
    b.sequence("s", "wait", "done")
    run = Run(b.build())
    run.start({"orderId": "o1"})
    run.send(Suspend(actor="ann"))
    run.send(Resume())
    run.send(SetVariables(variables={"secret": "s3cr3t"}, actor="bob"))
    run.send(Cancel(actor="ann"))
    facts = [
        FactView(at=AT, kind=f.kind, details=dict(f.details), revision=i)
        for i, step in enumerate(run.steps)
        for f in step.facts
    ]
    texts = [e.text for e in business_history(facts)]
    assert "instance suspended by ann" in texts
    assert "instance resumed" in texts  # no actor given: none claimed
    assert "variables changed in scope s0: set secret by bob" in texts
    assert "instance cancelled by ann" in texts
    assert "s3cr3t" not in repr(facts)

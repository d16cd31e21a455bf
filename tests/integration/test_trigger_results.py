"""The one result protocol (persistence/results.py): every operation a trigger task
calls answers its steps and one outcome word, so the metrics and Flower's summary read
the same word whichever operation ran."""

from __future__ import annotations

from dormant.engine_core.effects import Fact
from dormant.persistence.results import TriggerResult, outcome_word
from dormant.persistence.routing import MessageOutcome, SignalOutcome
from dormant.persistence.store import Applied
from dormant.scheduler.deadlines import FireOutcome, FireStatus
from dormant.tasks.metrics import outcome_of, summary


def step(changed: bool = True, **kw: object) -> Applied:
    return Applied("i-1", 2, "active", changed, **kw)  # type: ignore[arg-type]


def test_each_operation_answers_its_steps_and_one_word() -> None:
    applied, stale = step(), step(changed=False)
    raised = step(facts=[Fact("Incident", {"action": "raised", "incident": "x", "node": "n"})])
    results: list[tuple[TriggerResult, str, int]] = [
        (applied, "applied", 1),
        (stale, "stale", 1),
        (raised, "incident", 1),
        (step(changed=False, duplicate=True), "duplicate", 1),
        (step(changed=False, skipped=True), "skipped", 1),
        (MessageOutcome("m-1", duplicate=True), "duplicate", 0),
        (MessageOutcome("m-2", applied=[stale, applied]), "applied", 2),
        (MessageOutcome("m-3"), "none", 0),
        (MessageOutcome("m-4", dropped=True), "dropped", 0),
        (SignalOutcome("s-1", applied=[raised]), "incident", 1),
        (FireOutcome("i-1", "w", FireStatus.FIRED, applied), "applied", 1),
        (FireOutcome("i-1", "w", FireStatus.SKIPPED), "skipped", 0),
        (FireOutcome("i-1", "w", FireStatus.FAILED, error="boom"), "failed", 0),
    ]
    for result, word, steps in results:
        assert (result.outcome, len(result.steps)) == (word, steps), result
        assert outcome_of(result) == word
        assert word in summary(result)
    assert outcome_of(None) == "none"
    assert summary(raised).startswith("INCIDENT x at n")
    assert outcome_word([]) == "none"

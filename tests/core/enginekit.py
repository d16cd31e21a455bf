"""Drive one instance through the pure core, trigger by trigger, with a fake clock.

Every step is checked the way the shell relies on it:

* ``apply`` does not mutate the checkpoint it was given;
* a changed step bumps ``revision`` by exactly one; a stale one returns the very
  checkpoint it got, ``changed`` False;
* the new checkpoint survives ``decode(encode(cp))`` unchanged, and the run goes on
  from the DECODED copy, so anything the JSON form loses shows up as a failing test;
* the trigger travels as JSON too (``parse_trigger(trigger.model_dump_json())``), as
  it does in a Celery message or the inbox, and the core applies the parsed copy.

    run = Run(definition)
    run.start(amount=10)
    run.complete_job("charge", paid=True)
    assert run.status == "completed"
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from dormant.engine_core.checkpoint import Checkpoint, Token, Wait, decode, encode
from dormant.engine_core.effects import Effect, Fact, Step
from dormant.engine_core.engine import Services, apply, new_checkpoint
from dormant.engine_core.model import ProcessDefinition
from dormant.engine_core.triggers import (
    Cancel,
    ChildCompleted,
    ChildFailed,
    IncidentDrop,
    IncidentResolve,
    IncidentRetry,
    JobCompleted,
    JobErrorThrown,
    JobFailed,
    MessageReceived,
    SignalReceived,
    Start,
    TaskCompleted,
    TimerFired,
    Trigger,
    parse_trigger,
)

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

__all__ = ["T0", "Run"]


class Run:
    """One instance and its fake clock. ``steps`` holds every step applied so far."""

    def __init__(
        self,
        definition: ProcessDefinition,
        *,
        instance_id: str = "i1",
        now: datetime = T0,
        services: Services | None = None,
        parent: dict[str, str] | None = None,
    ) -> None:
        self.defn = definition
        self.now = now
        self.services = services
        self.parent = parent
        self.cp: Checkpoint = new_checkpoint(definition, instance_id, 1, now)
        self.steps: list[Step] = []

    # -- the clock and the one way to apply a trigger --------------------------------

    def advance(self, **delta: float) -> Run:
        self.now += timedelta(**delta)
        return self

    def send(self, trigger: Trigger, *, at: datetime | None = None) -> Step:
        if at is not None:
            self.now = at
        wire = parse_trigger(trigger.model_dump_json())
        assert wire == trigger, "the trigger lost data in JSON"
        before = encode(self.cp)
        step = apply(self.defn, self.cp, wire, now=self.now, services=self.services)
        assert encode(self.cp) == before, "apply mutated the checkpoint it was given"
        if step.changed:
            assert step.checkpoint.revision == self.cp.revision + 1
            doc = json.loads(json.dumps(encode(step.checkpoint)))
            restored = decode(doc)
            assert encode(restored) == encode(step.checkpoint), "checkpoint lost data in JSON"
            assert restored == step.checkpoint
            self.cp = restored
        else:
            assert step.checkpoint is self.cp or encode(step.checkpoint) == before
        for fact in step.facts:
            for value in fact.details.values():
                assert value is None or isinstance(value, str | int | float | bool), fact
        self.steps.append(step)
        return step

    # -- views ------------------------------------------------------------------------

    @property
    def last(self) -> Step:
        return self.steps[-1]

    @property
    def status(self) -> str:
        return self.cp.status.value

    @property
    def variables(self) -> dict[str, Any]:
        return dict(self.cp.scopes["s0"].variables) if "s0" in self.cp.scopes else {}

    @property
    def facts(self) -> list[Fact]:
        return [f for s in self.steps for f in s.facts]

    @property
    def effects(self) -> list[Effect]:
        return [e for s in self.steps for e in s.effects]

    def facts_of(self, kind: str, **match: Any) -> list[Fact]:
        return [
            f
            for f in self.facts
            if f.kind == kind and all(f.details.get(k) == v for k, v in match.items())
        ]

    def effects_of(self, cls: type, step: Step | None = None) -> list[Any]:
        source: Iterable[Effect] = step.effects if step is not None else self.effects
        return [e for e in source if isinstance(e, cls)]

    def tokens(self, node: str | None = None) -> list[Token]:
        return [t for t in self.cp.tokens.values() if node is None or t.node_id == node]

    def token_nodes(self) -> list[str]:
        """Where the live tokens are, sorted (with their state)."""
        return sorted(f"{t.node_id}:{t.state.value}" for t in self.cp.tokens.values())

    def waits(self, node: str | None = None, kind: str | None = None) -> list[Wait]:
        return [
            w
            for w in self.cp.waits.values()
            if (node is None or w.node_id == node) and (kind is None or w.kind.value == kind)
        ]

    def wait(self, node: str | None = None, kind: str | None = None) -> Wait:
        found = self.waits(node, kind)
        assert len(found) == 1, f"expected one wait at {node} ({kind}), got {found}"
        return found[0]

    def incident(self, node: str | None = None) -> Any:
        found = [i for i in self.cp.incidents.values() if node is None or i.node_id == node]
        assert len(found) == 1, f"expected one incident at {node}, got {found}"
        return found[0]

    # -- triggers, by the node that waits ---------------------------------------------

    def start(self, variables: dict[str, Any] | None = None, **kw: Any) -> Step:
        if self.parent is not None:
            kw.setdefault("parent", self.parent)
        return self.send(Start(variables=variables or {}, **kw))

    def fire(self, node: str, *, kind: str = "timer") -> Step:
        """Fire the (one) timer wait at ``node``, moving the clock to its due time if later."""
        wait = self.wait(node, kind)
        assert wait.due_at is not None
        self.now = max(self.now, wait.due_at)
        return self.send(TimerFired(wait_id=wait.id))

    def complete_task(self, node: str, **variables: Any) -> Step:
        return self.send(
            TaskCompleted(wait_id=self.wait(node, "user_task").id, variables=variables)
        )

    def complete_job(self, node: str, **variables: Any) -> Step:
        wait = self.wait(node, "job")
        return self.send(JobCompleted(wait_id=wait.id, attempt=wait.attempt, variables=variables))

    def fail_job(self, node: str, error: str = "boom", error_class: str = "RuntimeError") -> Step:
        wait = self.wait(node, "job")
        return self.send(
            JobFailed(wait_id=wait.id, attempt=wait.attempt, error=error, error_class=error_class)
        )

    def throw_from_job(self, node: str, code: str, **variables: Any) -> Step:
        wait = self.wait(node, "job")
        return self.send(
            JobErrorThrown(wait_id=wait.id, attempt=wait.attempt, code=code, variables=variables)
        )

    def message(self, node: str, name: str, key: str | None = None, **variables: Any) -> Step:
        wait = self.wait(node, "message")
        return self.send(
            MessageReceived(wait_id=wait.id, name=name, correlation_key=key, variables=variables)
        )

    def signal(self, node: str, name: str, **variables: Any) -> Step:
        wait = self.wait(node, "signal")
        return self.send(SignalReceived(wait_id=wait.id, name=name, variables=variables))

    def child_completed(self, node: str, **variables: Any) -> Step:
        return self.send(ChildCompleted(wait_id=self.wait(node, "call").id, variables=variables))

    def child_failed(self, node: str, error: str = "child broke", code: str | None = None) -> Step:
        return self.send(
            ChildFailed(wait_id=self.wait(node, "call").id, error=error, error_code=code)
        )

    def cancel(self) -> Step:
        return self.send(Cancel())

    def retry(self, incident_id: str) -> Step:
        return self.send(IncidentRetry(incident_id=incident_id))

    def resolve(self, incident_id: str) -> Step:
        return self.send(IncidentResolve(incident_id=incident_id))

    def drop(self, incident_id: str) -> Step:
        return self.send(IncidentDrop(incident_id=incident_id))

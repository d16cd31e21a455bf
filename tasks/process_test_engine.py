"""The engine a process test case runs on (``dormant test``, tasks/process_tests.py).

Each case gets a fresh, in-memory engine: the deployed models, no database, no broker,
and a clock that moves only when the case says so (``INCREASE_TIME``, ``SET_TIME``).
A trigger is ``engine_core.apply`` with that clock's ``now``, exactly the step a worker
applies in its transaction (docs/internals.md); what a worker's shell does after the
commit — publish a message to its holders, broadcast a signal, start a called child,
tell a parent its child ended, fire a timer that fell due — is done here by the same
rules (``engine_core/correlation.py`` for messages, ``engine_core/calls.py`` for
children) before the next instruction runs. So every instruction sees the engine
settled: an assertion is checked once, never polled (Camunda's assertions wait up to
ten seconds for an asynchronous engine; this one has nothing in flight).

Jobs are not run: a job waits for ``COMPLETE_JOB`` / ``THROW_BPMN_ERROR_FROM_JOB`` or
a mock worker (``MOCK_JOB_WORKER_*``, which answers every job of its type at once), and
never times out however far the clock moves, as a job no worker activated never does
in Zeebe. Element states are read from the instance's facts as the console's diagram
reads them (tasks/console/presenters.py): a live token is *active*, an element named by
a fact with no live token is *completed* (a gateway or script task between two reached
elements too), an element whose token was withdrawn is *terminated*.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dormant.engine_core import engine as core
from dormant.engine_core.bpmn import read_bpmn
from dormant.engine_core.calls import missing_child, parent_trigger
from dormant.engine_core.checkpoint import Checkpoint, Wait, WaitKind
from dormant.engine_core.correlation import Holder, buffer_it, waits_to_wake
from dormant.engine_core.dmn import Decision, is_dmn, read_dmn
from dormant.engine_core.effects import (
    CancelChild,
    ContinueInstance,
    DeliverBuffered,
    DispatchJob,
    Effect,
    NotifyParent,
    StartChild,
    ThrowMessage,
    ThrowSignal,
)
from dormant.engine_core.errors import DormantError, InvalidModel, InvalidTestCases
from dormant.engine_core.model import EventKind, NodeKind, ProcessDefinition
from dormant.engine_core.states import TokenState
from dormant.engine_core.triggers import (
    Cancel,
    ChildCompleted,
    Continue,
    MessageReceived,
    SignalReceived,
    Start,
    TaskCompleted,
    TimerFired,
    Trigger,
)
from dormant.engine_core.views import FactView
from dormant.persistence.settings import Settings
from dormant.tasks.client import _read_source
from dormant.tasks.process_test_elements import ElementLog

__all__ = [
    "EPOCH",
    "LIVE",
    "MAX_TRIGGERS_PER_INSTRUCTION",
    "CaseFailed",
    "Engine",
    "Instance",
    "Models",
    "load_models",
]

# The clock every case starts at, unless it sets its own: fixed, so a case's dates
# (a timer's due date, a task's due date) are the same on every run.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
# Triggers one instruction may cause (a mock worker answering a job in a loop forever
# would otherwise never return).
MAX_TRIGGERS_PER_INSTRUCTION = 10_000
LIVE = frozenset({TokenState.ACTIVE, TokenState.WAITING, TokenState.INCIDENT})


class CaseFailed(Exception):
    """An assertion that does not hold, or an action that found nothing to act on."""


@dataclass(frozen=True, slots=True)
class Models:
    """What the case runs against: each process id's versions, oldest first, and the
    decisions (a business rule task evaluates the latest of its id)."""

    processes: dict[str, list[ProcessDefinition]]
    decisions: dict[str, Decision]


@dataclass(slots=True)
class _Task:
    instance_id: str
    wait: Wait
    state: str = "IS_CREATED"


@dataclass(slots=True)
class Instance:
    id: str
    definition: ProcessDefinition
    checkpoint: Checkpoint
    elements: ElementLog
    facts: list[FactView] = field(default_factory=list)
    received: list[tuple[str, str | None]] = field(default_factory=list)

    def live_tokens(self) -> dict[str, str]:
        """Each live token and the element it is at."""
        return {t.id: t.node_id for t in self.checkpoint.tokens.values() if t.state in LIVE}


@dataclass(slots=True)
class _Buffered:
    name: str
    key: str | None
    variables: dict[str, Any]
    message_id: str | None
    expires: datetime
    served: set[str]


def load_models(paths: list[Path]) -> Models:
    """Every process and decision of ``paths`` (BPMN and DMN files), as a deployment
    reads them; a process id given twice gets a second version."""
    limit = Settings.from_env().max_model_bytes
    processes: dict[str, list[ProcessDefinition]] = {}
    decisions: dict[str, Decision] = {}
    for path in paths:
        source = _read_source(path, limit)
        try:
            if is_dmn(source):
                decisions.update({d.id: d for d in read_dmn(source)})
                continue
            defs = read_bpmn(source)
        except DormantError as exc:  # which file, then what the deploy would have said
            raise InvalidModel(f"{path}: {type(exc).__name__}: {exc}") from exc
        for definition in defs:
            processes.setdefault(definition.key, []).append(definition)
    if not processes:
        raise InvalidTestCases(
            "no process to test: give the BPMN files after the test-case file, or put "
            "them beside it"
        )
    return Models(processes, decisions)


class Engine:
    """One case's engine: instances in memory, the clock, the mocks, the buffer."""

    def __init__(self, models: Models) -> None:
        settings = Settings.from_env()
        self.models = models
        self.services = core.Services(
            job_retry_backoff_seconds=settings.job_retry_backoff_seconds,
            job_timeout_seconds=settings.job_timeout_seconds,
            limits=settings.limits,
            step_budget=settings.step_budget,
            max_loop_items=settings.max_loop_items,
            decisions=dict(models.decisions),
        )
        self.now = EPOCH
        self.instances: dict[str, Instance] = {}
        self.tasks: dict[tuple[str, str], _Task] = {}
        self.job_mocks: dict[str, Callable[[DispatchJob | Wait], Trigger]] = {}
        self.child_mocks: dict[str, dict[str, Any]] = {}
        self.buffer: list[_Buffered] = []
        self.queue: deque[tuple[str, Trigger]] = deque()
        self.applied = 0

    # -- applying triggers and their effects ------------------------------------------

    def latest(self, key: str) -> tuple[ProcessDefinition, int]:
        versions = self.models.processes.get(key)
        if not versions:
            raise CaseFailed(
                f"no process {key!r} is deployed; deployed: "
                + ", ".join(sorted(self.models.processes))
            )
        return versions[-1], len(versions)

    def start(self, key: str, start: Start, instance_id: str | None = None) -> str:
        definition, version = self.latest(key)
        iid = instance_id or f"{key}-{len(self.instances) + 1}"
        checkpoint = core.new_checkpoint(definition, iid, version, self.now)
        self.instances[iid] = Instance(iid, definition, checkpoint, ElementLog(definition))
        self.queue.append((iid, start))
        return iid

    def settle(self) -> None:
        """Apply what is queued, and every timer that fell due, until nothing is left."""
        while True:
            while self.queue:
                iid, trigger = self.queue.popleft()
                self._apply(iid, trigger)
            due = self._next_due(self.now)
            if due is None:
                return
            self.queue.append((due[0], TimerFired(wait_id=due[1].id)))

    def advance(self, to: datetime) -> None:
        """Move the clock to ``to``, firing each timer at its own due time on the way."""
        self.settle()
        while (due := self._next_due(to)) is not None:
            assert due[1].due_at is not None
            self.now = max(self.now, due[1].due_at)
            self.queue.append((due[0], TimerFired(wait_id=due[1].id)))
            self.settle()
        self.now = max(self.now, to)

    def _next_due(self, until: datetime) -> tuple[str, Wait] | None:
        found: tuple[str, Wait] | None = None
        for inst in self.instances.values():
            for wait in inst.checkpoint.waits.values():
                if wait.due_at is None or wait.due_at > until:
                    continue
                if wait.kind is WaitKind.JOB and wait.job_running:
                    continue  # no worker holds it: it cannot time out (module docstring)
                if found is None or wait.due_at < (found[1].due_at or wait.due_at):
                    found = (inst.id, wait)
        return found

    def _apply(self, iid: str, trigger: Trigger) -> None:
        inst = self.instances.get(iid)
        if inst is None:
            return
        self.applied += 1
        if self.applied > MAX_TRIGGERS_PER_INSTRUCTION:
            raise CaseFailed(
                f"more than {MAX_TRIGGERS_PER_INSTRUCTION:,} triggers in one instruction: "
                "a mock worker or a loop that never ends?"
            )
        step = core.apply(
            inst.definition, inst.checkpoint, trigger, now=self.now, services=self.services
        )
        if not step.changed:
            return
        before = set(inst.checkpoint.waits)
        tokens = inst.live_tokens()
        inst.checkpoint = step.checkpoint
        inst.elements.step(tokens, inst.live_tokens(), step.facts)
        inst.facts.extend(
            FactView(self.now, fact.kind, dict(fact.details), step.checkpoint.revision)
            for fact in step.facts
        )
        if isinstance(trigger, MessageReceived):
            inst.received.append((trigger.name, trigger.correlation_key))
        self._track_tasks(inst, trigger)
        for effect in step.effects:
            self._effect(iid, effect)
        for wait_id in set(inst.checkpoint.waits) - before:
            wait = inst.checkpoint.waits[wait_id]
            if wait.kind is WaitKind.MESSAGE:
                self._from_buffer(inst, wait)

    def _track_tasks(self, inst: Instance, trigger: Trigger) -> None:
        open_now = {w.id: w for w in inst.checkpoint.waits.values() if w.kind is WaitKind.USER_TASK}
        for (iid, wait_id), task in self.tasks.items():
            if iid != inst.id or task.state != "IS_CREATED":
                continue
            if wait_id in open_now:
                task.wait = open_now[wait_id]
            elif isinstance(trigger, TaskCompleted) and trigger.wait_id == wait_id:
                task.state = "IS_COMPLETED"
            else:
                task.state = "IS_CANCELED"
        for wait_id, wait in open_now.items():
            self.tasks.setdefault((inst.id, wait_id), _Task(inst.id, wait))

    def _effect(self, iid: str, effect: Effect) -> None:
        if isinstance(effect, DispatchJob):
            mock = self.job_mocks.get(effect.job_type)
            if mock is not None:
                self.queue.append((effect.instance_id, mock(effect)))
        elif isinstance(effect, ThrowMessage):
            self.publish(
                effect.name,
                effect.correlation_key,
                effect.variables,
                effect.ttl_seconds,
                effect.message_id,
            )
        elif isinstance(effect, ThrowSignal):
            self.broadcast(effect.name, effect.variables)
        elif isinstance(effect, StartChild):
            self._start_child(effect)
        elif isinstance(effect, CancelChild):
            self.queue.append((effect.child_instance_id, Cancel(notify_parent=False)))
        elif isinstance(effect, NotifyParent):
            self.queue.append((effect.parent_instance_id, parent_trigger(effect)))
        elif isinstance(effect, DeliverBuffered):
            self.queue.append((effect.instance_id, effect.trigger))
        elif isinstance(effect, ContinueInstance):
            self.queue.append((effect.instance_id, Continue()))

    def _start_child(self, c: StartChild) -> None:
        mocked = self.child_mocks.get(c.process_key)
        if mocked is not None:
            done = ChildCompleted(wait_id=c.parent_wait_id, variables=dict(mocked))
            self.queue.append((c.parent_instance_id, done))
            return
        if c.process_key not in self.models.processes:
            error = f"no process {c.process_key!r} is deployed for the call activity"
            self.queue.append((c.parent_instance_id, missing_child(c.parent_wait_id, error)))
            return
        parent = {
            "instance_id": c.parent_instance_id,
            "wait_id": c.parent_wait_id,
            "root_instance_id": c.root_instance_id,
        }
        self.start(c.process_key, Start(variables=c.variables, parent=parent), c.child_instance_id)

    def publish(
        self,
        name: str,
        key: str | None,
        variables: dict[str, Any],
        ttl_seconds: float | None,
        message_id: str | None,
    ) -> int:
        """Correlate as the shell does (engine_core/correlation.py): once per process
        id, to its first holder; a message start of a process nobody served starts it;
        with a TTL the message is kept for subscriptions opened later."""
        holders = [
            Holder(inst.definition.key, inst.id, w.id)
            for inst in self.instances.values()
            for w in inst.checkpoint.waits.values()
            if w.kind is WaitKind.MESSAGE and w.message_name == name and w.correlation_key == key
        ]
        served: set[str] = set()
        for group in waits_to_wake(holders):
            first = group[0]
            served.add(first.process_key)
            received = MessageReceived(
                wait_id=first.wait_id,
                name=name,
                correlation_key=key,
                variables=variables,
                message_id=message_id,
            )
            self.queue.append((first.instance_id, received))
        for process_key, node_id in self._starts(EventKind.MESSAGE, name):
            if process_key not in served:
                served.add(process_key)
                start = Start(variables=variables, start_node_id=node_id, start_key=key)
                self.start(process_key, start)
        if buffer_it(ttl_seconds):
            assert ttl_seconds is not None
            expires = self.now + timedelta(seconds=ttl_seconds)
            self.buffer.append(_Buffered(name, key, variables, message_id, expires, served))
        return len(served)

    def _from_buffer(self, inst: Instance, wait: Wait) -> None:
        for kept in self.buffer:
            if (
                kept.expires > self.now
                and kept.name == wait.message_name
                and kept.key == wait.correlation_key
                and inst.definition.key not in kept.served
            ):
                kept.served.add(inst.definition.key)
                received = MessageReceived(
                    wait_id=wait.id,
                    name=kept.name,
                    correlation_key=kept.key,
                    variables=kept.variables,
                    message_id=kept.message_id,
                )
                self.queue.append((inst.id, received))
                return

    def broadcast(self, name: str, variables: dict[str, Any]) -> None:
        for inst in self.instances.values():
            for w in inst.checkpoint.waits.values():
                if w.kind is WaitKind.SIGNAL and w.signal_name == name:
                    signal = SignalReceived(wait_id=w.id, name=name, variables=variables)
                    self.queue.append((inst.id, signal))
        for process_key, node_id in self._starts(EventKind.SIGNAL, name):
            self.start(process_key, Start(variables=variables, start_node_id=node_id))

    def _starts(self, kind: EventKind, name: str) -> Iterator[tuple[str, str]]:
        """(process id, start event) of each latest version with a start of that name."""
        for key, versions in self.models.processes.items():
            for node in versions[-1].nodes.values():
                if node.kind is not NodeKind.START_EVENT or node.parent is not None:
                    continue
                for event in node.events:
                    named = event.message_name if kind is EventKind.MESSAGE else event.signal_name
                    if event.kind is kind and named == name:
                        yield key, node.id
                        break
                else:
                    continue
                break

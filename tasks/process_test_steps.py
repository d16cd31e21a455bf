"""What each instruction of a process test case does on the case's engine
(tasks/process_test_engine.py): one handler per instruction type, in a table, so an
instruction the file format knows and no handler runs cannot slip through
(tests/core/test_process_tests.py holds the table to ``process_test_cases.SUPPORTED``).

A selector that finds nothing, or an assertion that does not hold, raises
``CaseFailed`` with what was expected and what the engine holds instead.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from dormant.engine_core.checkpoint import ROOT_SCOPE, Wait, WaitKind
from dormant.engine_core.effects import DispatchJob
from dormant.engine_core.states import InstanceStatus
from dormant.engine_core.triggers import (
    IncidentRetry,
    JobCompleted,
    JobErrorThrown,
    SetVariables,
    Start,
    TaskCompleted,
    Trigger,
)
from dormant.tasks import process_test_cases as f
from dormant.tasks.process_test_engine import CaseFailed, Engine, Instance

__all__ = ["HANDLERS", "run_instruction"]


def run_instruction(engine: Engine, instruction: Any) -> None:
    HANDLERS[type(instruction)](engine, instruction)


# -- selectors ------------------------------------------------------------------------


def _instance(engine: Engine, selector: f.ProcessInstanceSelector | None) -> Instance:
    """The first instance of the selected process (of the case's first, without a
    selector), in the order they were created."""
    for inst in engine.instances.values():
        if selector is None or inst.definition.key == selector.processDefinitionId:
            return inst
    if selector is None:
        raise CaseFailed("no process instance was created yet (CREATE_PROCESS_INSTANCE first)")
    raise CaseFailed(f"no instance of process {selector.processDefinitionId!r} was created")


def _elements(inst: Instance, selector: f.ElementSelector) -> str:
    if selector.elementId is not None:
        if selector.elementId not in inst.definition.nodes:
            raise CaseFailed(
                f"process {inst.definition.key!r} has no element {selector.elementId!r}"
            )
        return selector.elementId
    named = [n.id for n in inst.definition.nodes.values() if n.name == selector.elementName]
    if not named:
        raise CaseFailed(
            f"process {inst.definition.key!r} has no element named {selector.elementName!r}"
        )
    return named[0]


def _describe(selector: Any) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in selector.model_dump(exclude_none=True).items())


def _job(engine: Engine, selector: f.JobSelector) -> tuple[str, Wait]:
    seen: list[str] = []
    for inst in engine.instances.values():
        for wait in inst.checkpoint.waits.values():
            if wait.kind is not WaitKind.JOB:
                continue
            seen.append(f"{wait.job_type} at {wait.node_id}")
            if (
                (selector.jobType is None or wait.job_type == selector.jobType)
                and (selector.elementId is None or wait.node_id == selector.elementId)
                and (
                    selector.processDefinitionId is None
                    or inst.definition.key == selector.processDefinitionId
                )
            ):
                return inst.id, wait
    raise CaseFailed(
        f"no open job matches {_describe(selector)}; open jobs: {', '.join(seen) or 'none'}"
    )


def _user_tasks(engine: Engine, selector: f.UserTaskSelector) -> list[Any]:
    found = []
    for task in engine.tasks.values():
        wait = task.wait
        inst = engine.instances[task.instance_id]
        if (
            (selector.elementId is None or wait.node_id == selector.elementId)
            and (selector.taskName is None or wait.task_name == selector.taskName)
            and (
                selector.processDefinitionId is None
                or inst.definition.key == selector.processDefinitionId
            )
        ):
            found.append(task)
    if not found:
        raise CaseFailed(f"no user task matches {_describe(selector)}")
    return found


def _scope(inst: Instance, selector: f.ElementSelector | None) -> str:
    if selector is None:
        return ROOT_SCOPE
    node = _elements(inst, selector)
    for scope in inst.checkpoint.scopes.values():
        if scope.node_id == node:
            return scope.id
    raise CaseFailed(f"element {node!r} has no variable scope of its own now")


# -- actions --------------------------------------------------------------------------


def _create(engine: Engine, i: f.CreateProcessInstance) -> None:
    engine.start(i.processDefinitionSelector.processDefinitionId, Start(variables=i.variables))


def _complete_job(engine: Engine, i: f.CompleteJob) -> None:
    iid, wait = _job(engine, i.jobSelector)
    completed = JobCompleted(wait_id=wait.id, attempt=wait.attempt, variables=i.variables)
    engine.queue.append((iid, completed))


def _throw_from_job(engine: Engine, i: f.ThrowBpmnErrorFromJob) -> None:
    iid, wait = _job(engine, i.jobSelector)
    thrown = JobErrorThrown(
        wait_id=wait.id,
        attempt=wait.attempt,
        code=i.errorCode,
        message=i.errorMessage,
        variables=i.variables,
    )
    engine.queue.append((iid, thrown))


def _complete_task(engine: Engine, i: f.CompleteUserTask) -> None:
    open_tasks = [t for t in _user_tasks(engine, i.userTaskSelector) if t.state == "IS_CREATED"]
    if not open_tasks:
        raise CaseFailed(f"no open user task matches {_describe(i.userTaskSelector)}")
    task = open_tasks[0]
    completed = TaskCompleted(wait_id=task.wait.id, variables=i.variables)
    engine.queue.append((task.instance_id, completed))


def _publish(engine: Engine, i: f.PublishMessage) -> None:
    ttl = None if i.timeToLive is None else i.timeToLive / 1000
    reached = engine.publish(i.name, i.correlationKey, i.variables, ttl, i.messageId)
    if i.type == "CORRELATE_MESSAGE" and not reached:
        key = "" if i.correlationKey is None else f" with key {i.correlationKey!r}"
        raise CaseFailed(f"message {i.name!r}{key} correlated to no instance")


def _signal(engine: Engine, i: f.BroadcastSignal) -> None:
    engine.broadcast(i.signalName, i.variables)


def _increase(engine: Engine, i: f.IncreaseTime) -> None:
    engine.advance(engine.now + f.iso_duration(i.duration))


def _set_time(engine: Engine, i: f.SetTime) -> None:
    to = f.aware(i.time)
    if to < engine.now:
        raise CaseFailed(
            f"SET_TIME {to.isoformat()} is before the case's clock {engine.now.isoformat()}: "
            "the clock only moves forward"
        )
    engine.advance(to)


def _update(engine: Engine, i: f.UpdateVariables) -> None:
    inst = _instance(engine, i.processInstanceSelector)
    scope = _scope(inst, i.elementSelector)
    engine.queue.append((inst.id, SetVariables(scope=scope, variables=i.variables)))


def _resolve(engine: Engine, i: f.ResolveIncident) -> None:
    sel = i.incidentSelector
    for inst in engine.instances.values():
        if sel.processDefinitionId not in (None, inst.definition.key):
            continue
        for incident in inst.checkpoint.incidents.values():
            if not incident.state.closed and sel.elementId in (None, incident.node_id):
                engine.queue.append((inst.id, IncidentRetry(incident_id=incident.id)))
                return
    raise CaseFailed(f"no open incident matches {_describe(sel)}")


def _mock_complete(engine: Engine, i: f.MockJobWorkerCompleteJob) -> None:
    def answer(job: DispatchJob | Wait) -> Trigger:
        wait_id = job.wait_id if isinstance(job, DispatchJob) else job.id
        return JobCompleted(wait_id=wait_id, attempt=job.attempt, variables=i.variables)

    _mock(engine, i.jobType, answer)


def _mock_throw(engine: Engine, i: f.MockJobWorkerThrowBpmnError) -> None:
    def answer(job: DispatchJob | Wait) -> Trigger:
        wait_id = job.wait_id if isinstance(job, DispatchJob) else job.id
        return JobErrorThrown(
            wait_id=wait_id,
            attempt=job.attempt,
            code=i.errorCode,
            message=i.errorMessage,
            variables=i.variables,
        )

    _mock(engine, i.jobType, answer)


def _mock(engine: Engine, job_type: str, answer: Callable[[DispatchJob | Wait], Trigger]) -> None:
    """From now on every job of the type is answered at once; the ones already open too
    (a worker started late still finds the jobs that wait)."""
    engine.job_mocks[job_type] = answer
    for inst in engine.instances.values():
        for wait in inst.checkpoint.waits.values():
            if wait.kind is WaitKind.JOB and wait.job_type == job_type:
                engine.queue.append((inst.id, answer(wait)))


def _mock_child(engine: Engine, i: f.MockChildProcess) -> None:
    engine.child_mocks[i.processDefinitionId] = dict(i.variables)


# -- assertions -----------------------------------------------------------------------

_PROCESS_STATES = {
    "IS_ACTIVE": (InstanceStatus.ACTIVE, InstanceStatus.ACTIVE_INCIDENTS),
    "IS_COMPLETED": (InstanceStatus.COMPLETED,),
    "IS_TERMINATED": (InstanceStatus.TERMINATED,),
}


def _assert_process(engine: Engine, i: f.AssertProcessInstance) -> None:
    inst = _instance(engine, i.processInstanceSelector)
    status = inst.checkpoint.status
    if i.state in _PROCESS_STATES and status not in _PROCESS_STATES[i.state]:
        raise CaseFailed(
            f"instance of {inst.definition.key!r} expected {i.state}, but it is {status.value}"
        )
    if i.hasActiveIncidents is not None:
        open_ = [x.node_id for x in inst.checkpoint.incidents.values() if not x.state.closed]
        if bool(open_) != i.hasActiveIncidents:
            raise CaseFailed(
                f"instance of {inst.definition.key!r} expected "
                f"{'an' if i.hasActiveIncidents else 'no'} open incident, has "
                + (f"open incidents at {', '.join(open_)}" if open_ else "none")
            )


class _States:
    """Which elements of one instance are active now (live tokens, counted), and how
    often each completed or was terminated (tasks/process_test_elements.py)."""

    def __init__(self, inst: Instance) -> None:
        self.active: dict[str, int] = {}
        for node in inst.live_tokens().values():
            self.active[node] = self.active.get(node, 0) + 1
        self.completed = dict(inst.elements.completed)
        self.terminated = dict(inst.elements.terminated)
        self.reached = set(self.active) | set(self.completed) | set(self.terminated)

    def count(self, state: str, node: str) -> int:
        table = {"IS_ACTIVE": self.active, "IS_COMPLETED": self.completed}
        return table.get(state, self.terminated).get(node, 0)

    def state(self, node: str) -> str:
        parts = []
        if node in self.active:
            parts.append(f"active x{self.active[node]}")
        if node in self.completed:
            parts.append(f"completed x{self.completed[node]}")
        if node in self.terminated:
            parts.append(f"terminated x{self.terminated[node]}")
        return ", ".join(parts) or "not reached"


def _assert_element(engine: Engine, i: f.AssertElementInstance) -> None:
    inst = _instance(engine, i.processInstanceSelector)
    node = _elements(inst, i.elementSelector)
    states = _States(inst)
    if states.count(i.state, node) != i.amount:
        amount = f" x{i.amount}" if i.amount != 1 else ""
        raise CaseFailed(
            f"element {node!r} expected {i.state}{amount}, but it is {states.state(node)}"
        )


def _assert_elements(engine: Engine, i: f.AssertElementInstances) -> None:
    inst = _instance(engine, i.processInstanceSelector)
    nodes = [_elements(inst, s) for s in i.elementSelectors]
    states = _States(inst)
    checks: dict[str, Callable[[str], bool]] = {
        "IS_ACTIVE": lambda n: n in states.active,
        "IS_COMPLETED": lambda n: n in states.completed,
        "IS_TERMINATED": lambda n: n in states.terminated,
        "IS_NOT_ACTIVE": lambda n: n not in states.active,
        "IS_NOT_ACTIVATED": lambda n: n not in states.reached,
        "IS_ACTIVE_EXACTLY": lambda n: n in states.active,
        "IS_COMPLETED_IN_ORDER": lambda n: n in states.completed,
    }
    wrong = [n for n in nodes if not checks[i.state](n)]
    if wrong:
        raise CaseFailed(
            f"expected {i.state}: "
            + "; ".join(f"element {n!r} is {states.state(n)}" for n in wrong)
        )
    if i.state == "IS_COMPLETED_IN_ORDER" and not _in_order(nodes, inst.elements.order):
        done = ", ".join(n for n in inst.elements.order if n in nodes)
        raise CaseFailed(f"expected completed in the order {', '.join(nodes)}, completed {done}")
    if i.state == "IS_ACTIVE_EXACTLY":
        extra = sorted(set(states.active) - set(nodes))
        if extra:
            raise CaseFailed(
                f"expected only {', '.join(nodes)} active, also active: {', '.join(extra)}"
            )


def _in_order(nodes: list[str], completions: list[str]) -> bool:
    """``nodes`` is a subsequence of the completions (others may come between)."""
    rest = iter(completions)
    return all(node in rest for node in nodes)


def _assert_variables(engine: Engine, i: f.AssertVariables) -> None:
    inst = _instance(engine, i.processInstanceSelector)
    scope = inst.checkpoint.scopes.get(_scope(inst, i.elementSelector))
    held = dict(scope.variables) if scope is not None else {}
    missing = [name for name in [*i.variableNames, *i.variables] if name not in held]
    if missing:
        raise CaseFailed(
            f"no variable {', '.join(repr(m) for m in missing)}; the instance has "
            + (", ".join(sorted(held)) or "none")
        )
    for name, expected in i.variables.items():
        if not _same(held[name], expected):
            raise CaseFailed(f"variable {name!r} expected {expected!r}, got {held[name]!r}")


def _same(got: Any, expected: Any) -> bool:
    """JSON equality: 1 and 1.0 are one number, true is not 1, objects ignore key order."""
    if isinstance(got, bool) or isinstance(expected, bool):
        return type(got) is type(expected) and got == expected
    if isinstance(got, int | float) and isinstance(expected, int | float):
        return float(got) == float(expected)
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(_same(got[k], expected[k]) for k in got)
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(map(_same, got, expected))
    return type(got) is type(expected) and bool(got == expected)


def _same_moment(a: datetime | None, b: datetime) -> bool:
    return a is not None and f.aware(a) == f.aware(b)


def _assert_task(engine: Engine, i: f.AssertUserTask) -> None:
    tasks = _user_tasks(engine, i.userTaskSelector)
    task = next((t for t in tasks if i.state in (None, t.state)), tasks[0])
    w = task.wait
    checks: list[tuple[str, Any, Any, bool]] = [
        ("state", i.state, task.state, i.state is None or task.state == i.state),
        ("assignee", i.assignee, w.assignee, i.assignee is None or w.assignee == i.assignee),
        (
            "candidateGroups",
            i.candidateGroups,
            w.candidate_groups,
            i.candidateGroups is None or sorted(w.candidate_groups) == sorted(i.candidateGroups),
        ),
        ("priority", i.priority, w.priority, i.priority is None or w.priority == i.priority),
        ("elementId", i.elementId, w.node_id, i.elementId is None or w.node_id == i.elementId),
        ("name", i.name, w.task_name, i.name is None or w.task_name == i.name),
        (
            "dueDate",
            i.dueDate,
            w.due_date,
            i.dueDate is None or _same_moment(w.due_date, i.dueDate),
        ),
        (
            "followUpDate",
            i.followUpDate,
            w.follow_up_date,
            i.followUpDate is None or _same_moment(w.follow_up_date, i.followUpDate),
        ),
    ]
    for what, expected, got, ok in checks:
        if not ok:
            raise CaseFailed(f"user task {w.node_id!r}: {what} expected {expected!r}, got {got!r}")


def _assert_subscription(engine: Engine, i: f.AssertMessageSubscription) -> None:
    inst = _instance(engine, i.processInstanceSelector)
    sel = i.messageSelector

    def matches(name: str | None, key: str | None) -> bool:
        return name == sel.messageName and sel.correlationKey in (None, key)

    waiting = any(
        w.kind is WaitKind.MESSAGE and matches(w.message_name, w.correlation_key)
        for w in inst.checkpoint.waits.values()
    )
    correlated = any(matches(name, key) for name, key in inst.received)
    ok = {"IS_WAITING": waiting, "IS_NOT_WAITING": not waiting, "IS_CORRELATED": correlated}
    if not ok[i.state]:
        now = "waiting" if waiting else "not waiting"
        if correlated:
            now += ", correlated before"
        raise CaseFailed(f"message {_describe(sel)} expected {i.state}, but it is {now}")


HANDLERS: dict[type, Callable[[Engine, Any], None]] = {
    f.CreateProcessInstance: _create,
    f.CompleteJob: _complete_job,
    f.ThrowBpmnErrorFromJob: _throw_from_job,
    f.CompleteUserTask: _complete_task,
    f.PublishMessage: _publish,
    f.BroadcastSignal: _signal,
    f.IncreaseTime: _increase,
    f.SetTime: _set_time,
    f.UpdateVariables: _update,
    f.ResolveIncident: _resolve,
    f.MockJobWorkerCompleteJob: _mock_complete,
    f.MockJobWorkerThrowBpmnError: _mock_throw,
    f.MockChildProcess: _mock_child,
    f.AssertProcessInstance: _assert_process,
    f.AssertElementInstance: _assert_element,
    f.AssertElementInstances: _assert_elements,
    f.AssertVariables: _assert_variables,
    f.AssertUserTask: _assert_task,
    f.AssertMessageSubscription: _assert_subscription,
}

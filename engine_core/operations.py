"""Operator actions on a running instance: suspend and resume, set variables, modify.

Each is a trigger like any other, applied in the instance's own locked transaction,
and each records a fact naming what it did (variable names, node ids, counts; never a
value). ``engine.apply`` calls two hooks here and nothing else:

* ``hold`` first: a suspended instance keeps every trigger that is not an operator's
  action in ``checkpoint.held``, in arrival order, and changes nothing else. Its
  timers do not fire either: ``projected_waits`` hides their deadlines from the hold
  tables, so the scheduler has nothing to claim, and the deadline rows come back on
  resume. Operator actions that would run the instance (an incident retry, a modify)
  are refused while it is suspended; those that only change data (set variables,
  migrate) or end it (cancel) go through.
* ``apply_operation`` for the operator triggers themselves. ``Resume`` applies the
  held triggers in arrival order, and before each one the timers that had come due by
  the time it arrived, so a timer due before a message fires before it, and a timer
  fires once however long the instance was suspended.

Migration lives in ``engine_core/migration.py``; it is dispatched from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime

from dormant.engine_core import incidents, migration
from dormant.engine_core.checkpoint import (
    ROOT_SCOPE,
    Checkpoint,
    HeldTrigger,
    HoldState,
    Scope,
    TokenState,
    Wait,
)
from dormant.engine_core.errors import DormantError, EngineInvariantError, InvalidOperation
from dormant.engine_core.model import NodeKind
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.triggers import (
    Cancel,
    IncidentDrop,
    IncidentResolve,
    IncidentRetry,
    JobHeartbeat,
    MigrateInstance,
    ModifyInstance,
    Resume,
    SetVariables,
    Suspend,
    Trigger,
    parse_trigger,
)
from dormant.engine_core.wake import INSTANCE, Wake
from dormant.engine_core.wakes import dispatch

__all__ = ["OPERATIONS", "apply_operation", "hold", "projected_waits"]

OPERATIONS = (Suspend, Resume, SetVariables, MigrateInstance, ModifyInstance)
# Applied to a suspended instance as they come: they change data, or end it.
_PASS_WHILE_SUSPENDED = (Resume, Cancel, SetVariables, MigrateInstance, JobHeartbeat)
# Refused while suspended: each would run the instance on.
_REFUSED_WHILE_SUSPENDED = (IncidentRetry, IncidentResolve, IncidentDrop, ModifyInstance, Suspend)


def _label(cp: Checkpoint) -> str:
    return f"instance {cp.instance_id} ({cp.process_key} v{cp.version})"


def hold(rt: Runtime, trigger: Trigger) -> bool:
    """Keep ``trigger`` for the resume when the instance is suspended; True if kept."""
    if not rt.cp.suspended or isinstance(trigger, _PASS_WHILE_SUSPENDED):
        return False
    if isinstance(trigger, Suspend):
        raise InvalidOperation(f"{_label(rt.cp)} is already suspended")
    if isinstance(trigger, _REFUSED_WHILE_SUSPENDED):
        raise InvalidOperation(
            f"{_label(rt.cp)} is suspended; no {trigger.kind} until it is resumed "
            "(`dormant instances resume`)"
        )
    rt.cp.held.append(HeldTrigger(at=rt.now, trigger=trigger.model_dump(mode="json")))
    rt.fact("TriggerHeld", trigger=trigger.kind, held=len(rt.cp.held))
    return True


def projected_waits(cp: Checkpoint | HoldState) -> Mapping[str, Wait]:
    """The waits the hold tables show: a suspended instance holds no deadline."""
    if not cp.suspended:
        return cp.waits
    return {
        wid: replace(w, due_at=None) if w.due_at is not None else w for wid, w in cp.waits.items()
    }


def apply_operation(
    rt: Runtime,
    trigger: Trigger,
    *,
    run: Callable[[], None],
    fire_due: Callable[[datetime], object],
) -> Wake:
    """Apply one operator trigger; ``run`` advances the instance to quiescence and
    ``fire_due(until)`` fires the timers due by ``until`` (both lent by ``engine``)."""
    if isinstance(trigger, Resume):
        return _resume(rt, run, fire_due)
    if not rt.cp.suspended:
        fire_due(rt.now)  # time is an input: what came due fires before the operation
        if rt.cp.status.ended:
            raise InvalidOperation(f"{_label(rt.cp)} ended before the {trigger.kind} applied")
    if isinstance(trigger, Suspend):
        rt.cp.suspended = True
        rt.fact("Suspended")
        return INSTANCE
    if isinstance(trigger, SetVariables):
        return _set_variables(rt, trigger)
    if isinstance(trigger, MigrateInstance):
        return migration.migrate(rt, trigger)
    if isinstance(trigger, ModifyInstance):
        return _modify(rt, trigger)
    raise EngineInvariantError(f"no operation handles trigger {trigger.kind!r}")


# -- suspend / resume -----------------------------------------------------------------


def _resume(rt: Runtime, run: Callable[[], None], fire_due: Callable[[datetime], object]) -> Wake:
    if not rt.cp.suspended:
        raise InvalidOperation(f"{_label(rt.cp)} is not suspended; nothing to resume")
    held = list(rt.cp.held)
    rt.cp.suspended = False
    rt.cp.held = []
    rt.fact("Resumed", held=len(held))
    for entry in held:
        fire_due(entry.at)
        trigger = parse_trigger(entry.trigger)
        if rt.cp.status.ended:
            rt.fact("HeldTriggerApplied", trigger=trigger.kind, outcome="instance ended")
            continue
        try:
            woken = dispatch(rt, trigger)
        except EngineInvariantError:
            raise
        except DormantError as exc:
            rt.fact("HeldTriggerApplied", trigger=trigger.kind, outcome=type(exc).__name__)
            continue
        rt.fact(
            "HeldTriggerApplied",
            trigger=trigger.kind,
            outcome="stale" if woken.stale else "applied",
        )
        run()
    fire_due(rt.now)
    return INSTANCE


# -- set variables --------------------------------------------------------------------


def find_scope(rt: Runtime, name: str) -> Scope:
    """A scope by its id, or by the (sub-process, multi-instance) node it runs."""
    cp = rt.cp
    if name in cp.scopes:
        return cp.scopes[name]
    running = [s for s in cp.scopes.values() if s.node_id == name]
    if len(running) == 1:
        return running[0]
    if running:
        listed = ", ".join(
            s.id + (f" (loop index {s.loop_index})" if s.loop_index is not None else "")
            for s in running
        )
        raise InvalidOperation(
            f"{_label(cp)} runs node {name!r} in {len(running)} scopes ({listed}); "
            "name one by its scope id"
        )
    raise InvalidOperation(
        f"{_label(cp)} has no scope {name!r}; scopes: {', '.join(sorted(cp.scopes)) or 'none'}"
    )


def _set_variables(rt: Runtime, trigger: SetVariables) -> Wake:
    if not trigger.variables and not trigger.unset and not trigger.retry_incidents:
        raise InvalidOperation("nothing to change: give variables to set or names to unset")
    scope = find_scope(rt, trigger.scope)
    both = sorted(set(trigger.unset) & set(trigger.variables))
    if both:
        raise InvalidOperation(f"variables both set and unset: {', '.join(both)}")
    missing = [n for n in trigger.unset if n not in scope.variables]
    if missing:
        raise InvalidOperation(
            f"{_label(rt.cp)} has no variable {', '.join(map(repr, missing))} in scope "
            f"{scope.id} to unset"
        )
    scope.variables.update(trigger.variables)
    for name in trigger.unset:
        del scope.variables[name]
    rt.fact(
        "VariablesSet",
        scope=scope.id,
        set=",".join(sorted(trigger.variables)) or None,
        unset=",".join(sorted(trigger.unset)) or None,
    )
    if trigger.retry_incidents:
        if rt.cp.suspended:
            raise InvalidOperation(
                f"{_label(rt.cp)} is suspended; resume it before retrying its incidents"
            )
        retried = [
            i.id
            for i in rt.cp.incidents.values()
            if not i.state.closed
            and (t := rt.cp.tokens.get(i.token_id)) is not None
            and t.state is TokenState.INCIDENT
        ]
        for incident_id in retried:
            incidents.retry(rt, incident_id)
        rt.fact("IncidentsRetried", count=len(retried))
    return INSTANCE


# -- modify ---------------------------------------------------------------------------

_NOT_STARTABLE = (NodeKind.BOUNDARY_EVENT, NodeKind.EVENT_SUB_PROCESS)


def _start_scope(rt: Runtime, node_id: str, problems: list[str]) -> str | None:
    node = rt.defn.nodes.get(node_id)
    if node is None:
        problems.append(f"v{rt.cp.version} has no node {node_id!r} to start before")
        return None
    if node.kind in _NOT_STARTABLE:
        problems.append(f"{node.label} is a {node.kind.value}; it cannot be started directly")
        return None
    if node.parent is None:
        if ROOT_SCOPE not in rt.cp.scopes:
            problems.append(f"{_label(rt.cp)} has no process scope to start {node.label} in")
            return None
        return ROOT_SCOPE
    container = rt.defn.nodes[node.parent]
    if container.kind is NodeKind.EVENT_SUB_PROCESS:
        problems.append(f"{node.label} is inside event sub-process {container.id!r}")
        return None
    running = [
        s
        for s in rt.cp.scopes.values()
        if s.node_id == container.id and s.token_id is not None and s.mi_items is None
    ]
    if len(running) != 1:
        problems.append(
            f"{node.label} is inside sub-process {container.id!r}, which runs in "
            f"{len(running)} scopes here; a token can be started only in exactly one"
        )
        return None
    return running[0].id


def _modify(rt: Runtime, trigger: ModifyInstance) -> Wake:
    """Cancel the tokens at some nodes, then start tokens before others, or refuse."""
    if not trigger.cancel_nodes and not trigger.start_before:
        raise InvalidOperation("nothing to modify: name nodes to cancel or to start before")
    problems: list[str] = []
    cancelled = 0
    emptied: dict[str, str] = {}
    for node_id in trigger.cancel_nodes:
        tokens = [t for t in rt.cp.tokens.values() if t.node_id == node_id]
        if not tokens:
            problems.append(f"no token is at node {node_id!r}")
        for token in tokens:
            rt.terminate_token(token)
            cancelled += 1
            emptied[token.scope_id] = node_id
    starts = [(n, _start_scope(rt, n, problems)) for n in trigger.start_before]
    targets = {scope for _, scope in starts if scope is not None}
    for scope_id, node_id in emptied.items():
        if scope_id in rt.cp.scopes and not rt.tokens_in(scope_id) and scope_id not in targets:
            where = "the instance" if scope_id == ROOT_SCOPE else f"scope {scope_id}"
            problems.append(
                f"cancelling at {node_id!r} leaves {where} with no token; start one there "
                "too, or cancel the instance"
            )
    if problems:
        raise InvalidOperation(f"{_label(rt.cp)} cannot be modified: " + "; ".join(problems))
    for start_id, start_scope in starts:
        assert start_scope is not None
        rt.spawn(start_id, start_scope, [])
    rt.fact(
        "Modified",
        cancelled=",".join(trigger.cancel_nodes) or None,
        tokens_cancelled=cancelled,
        started=",".join(trigger.start_before) or None,
    )
    return INSTANCE

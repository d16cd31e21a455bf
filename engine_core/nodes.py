"""What each kind of node does when a token enters it: the table ``HANDLERS``.

A handler either moves the token on (``moving.py``), parks it on a wait (state
WAITING plus a ``Wait`` in the checkpoint), or ends it; what a concept does beyond one
line lives in its own module (jobs, calls, boundaries, event sub-processes, throwing,
joins, compensation, multi-instance). A handler that hits a failure Camunda 8 would
turn into an incident raises ``TechnicalFailure``; ``enter`` turns it into an incident
at the node and the siblings keep running.
"""

from __future__ import annotations

from collections.abc import Callable

from dormant.engine_core import ad_hoc, boundaries, calls, event_subs, jobs, listeners, user_tasks
from dormant.engine_core.arming import WAITABLE, arm_event
from dormant.engine_core.bindings import Binding, bind_decision, deployment_of
from dormant.engine_core.checkpoint import ROOT_SCOPE, Token, TokenState, WaitRole
from dormant.engine_core.compensation import throw_compensation
from dormant.engine_core.dmn import evaluate_decision
from dormant.engine_core.errors import EngineInvariantError
from dormant.engine_core.expressions import TechnicalFailure, evaluate, json_value, non_empty_string
from dormant.engine_core.incidents import raise_failure
from dormant.engine_core.joins import parallel_join
from dormant.engine_core.model import EventKind, Node, NodeKind
from dormant.engine_core.moving import (
    AD_HOC_NEXT_JOB,
    arrive,
    chosen_flows,
    finish_event_sub,
    finish_process,
    leave_activity,
    link_target,
    take_flows,
    terminate_end,
)
from dormant.engine_core.multi_instance import start_body
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.throwing import throw_error, throw_escalation, throw_message_or_signal
from dormant.engine_core.transitions import move_token

__all__ = ["HANDLERS", "enter"]

Handler = Callable[[Runtime, Token, Node], None]


def enter(rt: Runtime, token: Token) -> None:
    node = rt.node(token.node_id)
    if token.listener_phase == AD_HOC_NEXT_JOB:
        token.listener_phase = None
        try:
            ad_hoc.next_job(rt, token, node)
        except TechnicalFailure as failure:
            raise_failure(rt, failure, token, node)
        return
    if token.listener_phase in listeners.AROUND:
        _around(rt, token, node)
        return
    # Boundaries belong to the activity (the multi-instance body), armed on first entry.
    arms = rt.is_activity(node) and token.loop_index is None and token.id not in rt.keep_boundaries
    try:
        if node.loop is not None and token.loop_index is None and rt.is_activity(node):
            if arms:
                boundaries.arm(rt, token, node)
            start_body(rt, token, node)
            return
        # A joining gateway runs them once joined (_parallel, joins.py), or resumes them.
        if listeners.pending(node, token, "start") and (
            not _joins(node) or token.listener_phase == "start"
        ):
            # Input mappings first, then the start listeners; only once they are all
            # done does the element subscribe to anything or run (listeners.py).
            if token.listener_phase is None and rt.is_activity(node):
                _open_local_scope(rt, token, node)
                if node.kind in _OWN_SCOPE:
                    _open_own_scope(rt, token, node)
            listeners.run(rt, token, node, "start")
            return
        if rt.is_activity(node):
            # A call activity binds its child's process first (Zeebe): a missing one is
            # an incident with no boundary armed beside it.
            child = (
                calls.bind_child(rt, token, node) if node.kind is NodeKind.CALL_ACTIVITY else None
            )
            if arms:
                boundaries.arm(rt, token, node)
            if token.listener_phase is None:  # "ran": applied before the listeners
                _open_local_scope(rt, token, node)
            if child is not None:
                calls.start_child(rt, token, node, child)
                return
        HANDLERS[node.kind](rt, token, node)
    except TechnicalFailure as failure:
        if arms and failure.token_id in (None, token.id):
            boundaries.unarm(rt, token)
        raise_failure(rt, failure, token, node, activated=not arms)


def _around(rt: Runtime, token: Token, node: Node) -> None:
    """A token outside its node's behaviour: running the process's start listeners
    before its start event, its node's end listeners, or the process's end listeners;
    or done with the end listeners and leaving (moving._leave skips the output
    mappings already applied), or done with the process's and completing it."""
    phase = token.listener_phase
    try:
        if phase == "ended":
            leave_activity(rt, token, {})
        elif phase == "process-ended":
            finish_process(rt, token)
        elif phase == "sub-ended":
            finish_event_sub(rt, token)
        else:
            listeners.run(rt, token, node, phase or "")
    except TechnicalFailure as failure:
        raise_failure(rt, failure, token, node)


def _open_own_scope(rt: Runtime, token: Token, node: Node) -> None:
    """A sub-process with start listeners opens its scope before them, with its input
    mappings, so the listeners see those and write beside them; its handler then
    finds the scope open (``token.listener_phase`` "ran") and applies nothing twice."""
    scope = listeners.local_scope(rt, token, node)
    if node.inputs:
        rt.write_scope(scope, rt.mapped_inputs(node, rt.token_vars(token)))


# Kinds that open their own scope (or a child instance) with the input mappings.
_OWN_INPUTS = (NodeKind.SUB_PROCESS, NodeKind.AD_HOC_SUB_PROCESS, NodeKind.CALL_ACTIVITY)
# Of those, the ones whose scope start listeners write into.
_OWN_SCOPE = (NodeKind.SUB_PROCESS, NodeKind.AD_HOC_SUB_PROCESS)


def _open_local_scope(rt: Runtime, token: Token, node: Node) -> None:
    """Input mappings become local variables of the activity (Camunda 8's local scope)."""
    if not node.inputs or node.kind in _OWN_INPUTS:
        return
    values = rt.mapped_inputs(node, rt.token_vars(token))
    existing = rt.cp.scopes.get(token.inner_scope) if token.inner_scope else None
    if existing is not None and existing.node_id == node.id:
        rt.write_scope(existing, values)  # a multi-instance instance scope, or a retry
        return
    scope = rt.new_scope(node.id, token.scope_id, token.id, values)
    token.inner_scope = scope.id


def _pass(rt: Runtime, token: Token, node: Node) -> None:
    leave_activity(rt, token, {})


def _wait(token: Token) -> None:
    move_token(token, TokenState.WAITING)


# -- events ---------------------------------------------------------------------------


def _start_event(rt: Runtime, token: Token, node: Node) -> None:
    if _opens_its_scope(rt, token, node):
        # The instance's start, or an event sub-process's: open the subscriptions of the
        # event sub-processes inside its scope. Here, not in the trigger that started
        # it, so that one that cannot open (a null correlation key, N3) is an incident
        # at this start event, as any node's failure is, and an incident retry opens
        # them again; Camunda 8 raises it on the process instance, which dormant's
        # incidents (on flow nodes) cannot name.
        event_subs.arm(rt, rt.cp.scopes[token.scope_id])
    leave_activity(rt, token, {})


def _opens_its_scope(rt: Runtime, token: Token, node: Node) -> bool:
    if node.parent is None:
        return token.scope_id == ROOT_SCOPE
    return rt.node(node.parent).kind is NodeKind.EVENT_SUB_PROCESS


def _end_event(rt: Runtime, token: Token, node: Node) -> None:
    # Once the token is gone nothing else says WHERE a path ended (an instance with
    # three end events completes the same way at each): the history keeps it.
    rt.fact("EndEventReached", node=node.id)
    event = node.event
    if event.kind is EventKind.TERMINATE:
        terminate_end(rt, token)
        return
    if event.kind is EventKind.ERROR:
        throw_error(
            rt, token, node, event.error_code, event.error_message or "", {}, from_end_event=True
        )
        return
    _throw(rt, token, node)


def _throw(rt: Runtime, token: Token, node: Node) -> None:
    """What end events and intermediate throw events share: after the throw the token
    leaves (an end event's along no flow, so it ends there)."""
    event = node.event

    def then() -> None:
        # An end event leaves too (along no flow, so its token ends): its end
        # listeners run first, as on any element.
        leave_activity(rt, token, {})

    if event.kind is EventKind.ESCALATION:
        if throw_escalation(rt, token, node, event.escalation_code, {}):
            then()
        return
    if event.kind is EventKind.COMPENSATE:
        throw_compensation(rt, token, node)
        return
    if node.job_type is not None:
        jobs.start(rt, token, node)
        return
    throw_message_or_signal(rt, token, node)
    then()


def _catch_event(rt: Runtime, token: Token, node: Node) -> None:
    event = node.event
    if event.kind is EventKind.LINK or event.kind is EventKind.NONE:
        leave_activity(rt, token, {})
        return
    arm_event(rt, node, event, WaitRole.NODE, rt.token_vars(token), token_id=token.id)
    _wait(token)


def _throw_event(rt: Runtime, token: Token, node: Node) -> None:
    event = node.event
    if event.kind is EventKind.LINK:
        if node.listeners("end"):
            leave_activity(rt, token, {})  # its end listeners, then to its catch event
            return
        arrive(rt, token, link_target(rt, node).id)
        return
    _throw(rt, token, node)


def _boundary_event(rt: Runtime, token: Token, node: Node) -> None:
    leave_activity(rt, token, {})


# -- tasks ----------------------------------------------------------------------------


def _service_task(rt: Runtime, token: Token, node: Node) -> None:
    jobs.start(rt, token, node)


def _business_rule_task(rt: Runtime, token: Token, node: Node) -> None:
    """A called decision is evaluated inline, against the decisions the shell lent
    (``Services.decisions``, the latest deployed versions; bound by ``deployment`` or
    ``versionTag``, the chosen version's own file from ``Services.decision_versions``),
    like a script task: no job, no wait. A decision that is not deployed, or that
    breaks its hit policy, is an incident here (Camunda 8, N5); its retry looks the
    decision up again."""
    if node.decision_id is None:
        jobs.start(rt, token, node)
        return
    context = rt.token_vars(token)
    decision_id = non_empty_string(node.decision_id, context, node.id, rt.now, "decision id")
    binding = Binding(node.decision_binding)
    decisions = rt.services.decisions
    if binding is not Binding.LATEST:
        decisions = bind_decision(
            rt.services.decision_versions,
            decision_id,
            binding,
            version_tag=node.decision_version_tag,
            deployment=deployment_of(rt.services.processes or {}, rt.cp.process_key, rt.cp.version),
            where=node.label,
        )
    try:
        result = evaluate_decision(decisions, decision_id, context, now=rt.now)
    except EngineInvariantError:
        raise
    except Exception as exc:
        # A decision that is missing or breaks its hit policy (DecisionError), one of
        # its expressions that fails (ExpressionError), or anything else evaluating
        # the model's table raised: the cause class names which.
        raise TechnicalFailure(f"{node.label}: {exc}", type(exc).__name__) from exc
    leave_activity(rt, token, {node.result_variable: result} if node.result_variable else {})


def _script_task(rt: Runtime, token: Token, node: Node) -> None:
    if node.job_type is not None:
        jobs.start(rt, token, node)
        return
    assert node.script is not None  # validate: a script task has a script or a job type
    value = json_value(evaluate(node.script, rt.token_vars(token), node.id, rt.now))
    result = {node.result_variable: value} if node.result_variable else {}
    leave_activity(rt, token, result)


def _receive_task(rt: Runtime, token: Token, node: Node) -> None:
    arm_event(rt, node, node.event, WaitRole.NODE, rt.token_vars(token), token_id=token.id)
    _wait(token)


def _sub_process(rt: Runtime, token: Token, node: Node) -> None:
    existing = rt.cp.scopes.get(token.inner_scope) if token.inner_scope else None
    ran = token.listener_phase == "ran"  # the scope opened with its inputs before them
    inputs = rt.mapped_inputs(node, rt.token_vars(token)) if node.inputs and not ran else {}
    if existing is not None and existing.node_id == node.id:
        scope = existing  # a multi-instance inner instance, or opened for start listeners
        rt.write_scope(scope, inputs)
    else:
        scope = rt.new_scope(node.id, token.scope_id, token.id, inputs)
        token.inner_scope = scope.id
    _wait(token)
    event_subs.arm(rt, scope)
    starts = rt.defn.none_starts(node.id)
    if not starts:
        raise EngineInvariantError(f"sub-process {node.label} has no none start event")
    rt.spawn(starts[0].id, scope.id, list(token.lineage))


# -- gateways -------------------------------------------------------------------------


def _exclusive(rt: Runtime, token: Token, node: Node) -> None:
    take_flows(rt, token, chosen_flows(rt, node, token, all_true=False))


def _parallel(rt: Runtime, token: Token, node: Node) -> None:
    if _joins(node) and token.listener_phase != "ran":
        joined = parallel_join(rt, token, node)
        if joined is None:
            return
        token = joined
        if node.listeners("start"):
            listeners.run(rt, token, node, "start")  # once, on the joined token
            return
    take_flows(rt, token, list(node.outgoing))


def _inclusive(rt: Runtime, token: Token, node: Node) -> None:
    if _joins(node) and token.listener_phase != "ran":
        # The join fires at quiescence (joins.py), its start listeners then.
        move_token(token, TokenState.WAITING)
        return
    take_flows(rt, token, chosen_flows(rt, node, token, all_true=True))


def _joins(node: Node) -> bool:
    """A joining gateway runs its start listeners once the join fired, not per token."""
    return node.kind in (NodeKind.PARALLEL_GATEWAY, NodeKind.INCLUSIVE_GATEWAY) and (
        len(node.incoming) > 1
    )


def _event_based(rt: Runtime, token: Token, node: Node) -> None:
    """Arm every arm; the first to fire wins and withdraws the others (docs/waits.md)."""
    context = rt.token_vars(token)
    for flow_id in node.outgoing:
        target = rt.node(rt.defn.flows[flow_id].target)
        for index, definition in enumerate(target.events):
            if definition.kind in WAITABLE:
                arm_event(
                    rt,
                    target,
                    definition,
                    WaitRole.ARM,
                    context,
                    def_index=index,
                    token_id=token.id,
                )
    _wait(token)


HANDLERS: dict[NodeKind, Handler] = {
    NodeKind.START_EVENT: _start_event,
    NodeKind.END_EVENT: _end_event,
    NodeKind.INTERMEDIATE_CATCH_EVENT: _catch_event,
    NodeKind.INTERMEDIATE_THROW_EVENT: _throw_event,
    NodeKind.BOUNDARY_EVENT: _boundary_event,
    NodeKind.TASK: _pass,
    NodeKind.MANUAL_TASK: _pass,
    NodeKind.USER_TASK: user_tasks.create,
    NodeKind.SERVICE_TASK: _service_task,
    NodeKind.SEND_TASK: _service_task,
    NodeKind.BUSINESS_RULE_TASK: _business_rule_task,
    NodeKind.SCRIPT_TASK: _script_task,
    NodeKind.RECEIVE_TASK: _receive_task,
    NodeKind.SUB_PROCESS: _sub_process,
    NodeKind.AD_HOC_SUB_PROCESS: ad_hoc.start,
    NodeKind.CALL_ACTIVITY: calls.start_child,
    NodeKind.EXCLUSIVE_GATEWAY: _exclusive,
    NodeKind.PARALLEL_GATEWAY: _parallel,
    NodeKind.INCLUSIVE_GATEWAY: _inclusive,
    NodeKind.EVENT_BASED_GATEWAY: _event_based,
}

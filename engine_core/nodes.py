"""What each kind of node does when a token enters it: the table ``HANDLERS``.

A handler either moves the token on (``leave_activity`` / ``take_flows``), parks it on
a wait (state WAITING plus a ``Wait`` in the checkpoint), or ends it. A handler that
hits a failure Camunda 8 would turn into an incident raises ``TechnicalFailure``;
``enter`` turns it into an incident at the node and the siblings keep running.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from engine_core.arming import arm_boundaries, arm_event, arm_event_sub_processes
from engine_core.checkpoint import Token, TokenState, WaitKind, WaitRole
from engine_core.effects import DispatchJob, StartChild, ThrowMessage, ThrowSignal
from engine_core.errors import EngineInvariantError
from engine_core.expressions import (
    TechnicalFailure,
    correlation_key,
    evaluate,
    json_value,
    non_empty_string,
)
from engine_core.model import EventKind, Node, NodeKind
from engine_core.runtime import ROOT_SCOPE
from engine_core.throwing import throw_error, throw_escalation

if TYPE_CHECKING:
    from engine_core.runtime import Runtime

__all__ = ["HANDLERS", "enter"]

Handler = Callable[["Runtime", Token, Node], None]


def enter(rt: Runtime, token: Token) -> None:
    from engine_core.incidents import raise_incident
    from engine_core.multi_instance import start_body

    node = rt.node(token.node_id)
    # Boundaries belong to the activity (the multi-instance body), armed on first entry.
    arms = rt.is_activity(node) and token.loop_index is None and token.id not in rt.keep_boundaries
    try:
        if node.loop is not None and token.loop_index is None and rt.is_activity(node):
            if arms:
                arm_boundaries(rt, token, node)
            start_body(rt, token, node)
            return
        if rt.is_activity(node):
            if arms:
                arm_boundaries(rt, token, node)
            _open_local_scope(rt, token, node)
        HANDLERS[node.kind](rt, token, node)
    except TechnicalFailure as failure:
        if arms:
            _unarm_boundaries(rt, token)
        raise_incident(rt, token, node, str(failure), failure.cause_class, activated=not arms)


def _unarm_boundaries(rt: Runtime, token: Token) -> None:
    """An activity whose ACTIVATION failed (a null correlation key, job type, input
    collection...) has opened no boundary subscription, as in Camunda 8, where all of
    an element's subscriptions are opened together after its expressions evaluated.
    Left armed, a boundary timer would later cancel the incident and carry the token
    past a failure the operator never saw. The retry arms them (incidents.retry)."""
    for wait in rt.waits_of(token.id):
        if wait.role is WaitRole.BOUNDARY:
            rt.withdraw(wait)


def _open_local_scope(rt: Runtime, token: Token, node: Node) -> None:
    """Input mappings become local variables of the activity (Camunda 8's local scope)."""
    if not node.inputs or node.kind in (NodeKind.SUB_PROCESS, NodeKind.CALL_ACTIVITY):
        return
    values = rt.mapped_inputs(node, rt.token_vars(token))
    existing = rt.cp.scopes.get(token.inner_scope) if token.inner_scope else None
    if existing is not None and existing.node_id == node.id:
        existing.variables.update(values)  # a multi-instance instance scope, or a retry
        return
    scope = rt.new_scope(node.id, token.scope_id, token.id, values)
    token.inner_scope = scope.id


def _pass(rt: Runtime, token: Token, node: Node) -> None:
    rt.activity_done(token, {})


def _wait(token: Token) -> None:
    token.state = TokenState.WAITING


# -- events ---------------------------------------------------------------------------


def _start_event(rt: Runtime, token: Token, node: Node) -> None:
    if _opens_its_scope(rt, token, node):
        # The instance's start, or an event sub-process's: open the subscriptions of the
        # event sub-processes inside its scope. Here, not in the trigger that started
        # it, so that one that cannot open (a null correlation key, N3) is an incident
        # at this start event, as any node's failure is, and an incident retry opens
        # them again; Camunda 8 raises it on the process instance, which dormant's
        # incidents (on flow nodes) cannot name.
        arm_event_sub_processes(rt, rt.cp.scopes[token.scope_id])
    rt.activity_done(token, {})


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
        _terminate(rt, token)
        return
    if event.kind is EventKind.ERROR:
        throw_error(
            rt, token, node, event.error_code, event.error_message or "", {}, from_end_event=True
        )
        return
    _throw(rt, token, node, ends=True)


def _throw(rt: Runtime, token: Token, node: Node, *, ends: bool) -> None:
    """What end events and intermediate throw events share; ``ends``: the token ends
    after the throw (an end event) instead of moving on."""
    event = node.event

    def then() -> None:
        if ends:
            rt.end_token(token)
        else:
            rt.activity_done(token, {})

    if event.kind is EventKind.ESCALATION:
        if throw_escalation(rt, token, node, event.escalation_code, {}):
            then()
        return
    if event.kind is EventKind.COMPENSATE:
        from engine_core.compensation import throw_compensation

        throw_compensation(rt, token, node, end_after=ends)
        return
    if node.job_type is not None:
        _job(rt, token, node)
        return
    _throw_side_effect(rt, token, node)
    then()


def _terminate(rt: Runtime, token: Token) -> None:
    """Terminate end: ends every token of its scope; the scope then completes (N8)."""
    scope_id = token.scope_id
    rt.remove_token(token, TokenState.COMPLETED)
    for other in rt.tokens_in(scope_id):
        rt.terminate_token(other)
    for child in rt.child_scopes(scope_id):
        if child.token_id is None:
            rt.terminate_scope(child.id)
            rt.drop_scope(child.id)
    rt.fact("Terminated", node=token.node_id)
    rt.check_scope(scope_id)


def _catch_event(rt: Runtime, token: Token, node: Node) -> None:
    event = node.event
    if event.kind is EventKind.LINK or event.kind is EventKind.NONE:
        rt.activity_done(token, {})
        return
    arm_event(rt, node, event, WaitRole.NODE, rt.token_vars(token), token_id=token.id)
    _wait(token)


def _throw_event(rt: Runtime, token: Token, node: Node) -> None:
    event = node.event
    if event.kind is EventKind.LINK:
        target = _link_target(rt, node)
        rt.arrive(token, target.id)
        return
    _throw(rt, token, node, ends=False)


def _throw_side_effect(rt: Runtime, token: Token, node: Node) -> None:
    """A message or signal thrown without a job: published after commit via the outbox."""
    event = node.event
    context = rt.token_vars(token)
    if event.kind is EventKind.MESSAGE:
        name = non_empty_string(event.message_name or "", context, node.id, rt.now, "message name")
        key = (
            correlation_key(event.correlation_key, context, node.id, rt.now)
            if event.correlation_key
            else None
        )
        payload = rt.mapped_inputs(node, context) if node.inputs else {}
        rt.effects.append(
            ThrowMessage(name, key, payload, message_id=f"{rt.cp.instance_id}.{rt.cp.next_id('m')}")
        )
    elif event.kind is EventKind.SIGNAL:
        name = non_empty_string(event.signal_name or "", context, node.id, rt.now, "signal name")
        payload = rt.mapped_inputs(node, context) if node.inputs else {}
        rt.effects.append(
            ThrowSignal(name, payload, signal_id=f"{rt.cp.instance_id}.{rt.cp.next_id('g')}")
        )


def _link_target(rt: Runtime, node: Node) -> Node:
    name = node.event.link_name
    for candidate in rt.defn.nodes_in(node.parent):
        if (
            candidate.kind is NodeKind.INTERMEDIATE_CATCH_EVENT
            and candidate.event.kind is EventKind.LINK
            and candidate.event.link_name == name
        ):
            return candidate
    raise EngineInvariantError(f"link {name!r} thrown at {node.label} has no catch event")


def _boundary_event(rt: Runtime, token: Token, node: Node) -> None:
    rt.activity_done(token, {})


# -- tasks ----------------------------------------------------------------------------


def _job(rt: Runtime, token: Token, node: Node) -> None:
    context = rt.token_vars(token)
    job_type = non_empty_string(node.job_type or "", context, node.id, rt.now, "job type")
    retries_raw = node.job_retries
    retries = rt.services.default_job_retries
    if retries_raw is not None:
        value = evaluate(retries_raw, context, node.id, rt.now)
        try:
            retries = int(str(value))
        except ValueError as exc:
            raise TechnicalFailure(
                f"job retries {retries_raw!r} of {node.label} is not a number"
            ) from exc
    retries = max(retries, 1)
    wait = rt.add_wait(
        WaitKind.JOB,
        WaitRole.NODE,
        node.id,
        token_id=token.id,
        job_type=job_type,
        attempt=1,
        retries_left=retries - 1,
    )
    dispatch_job(rt, token, node, wait.id)
    _wait(token)


def dispatch_job(rt: Runtime, token: Token, node: Node, wait_id: str) -> None:
    wait = rt.cp.waits[wait_id]
    assert wait.job_type is not None
    wait.job_running = True
    wait.due_at = rt.now + timedelta(seconds=rt.services.job_timeout_seconds)
    headers = {k: v for k, v in node.task_headers}
    rt.effects.append(
        DispatchJob(
            instance_id=rt.cp.instance_id,
            wait_id=wait.id,
            node_id=node.id,
            job_type=wait.job_type,
            attempt=wait.attempt,
            variables=rt.token_vars(token),
            headers=headers,
        )
    )
    rt.fact("JobDispatched", node=node.id, job_type=wait.job_type, attempt=wait.attempt)


def _service_task(rt: Runtime, token: Token, node: Node) -> None:
    if node.job_type is None:
        raise EngineInvariantError(f"{node.label} has no job type")
    _job(rt, token, node)


def _business_rule_task(rt: Runtime, token: Token, node: Node) -> None:
    """A called decision is evaluated inline, against the decisions the shell lent
    (``Services.decisions``, the latest deployed versions), like a script task: no job,
    no wait. A decision that is not deployed, or that breaks its hit policy, is an
    incident here (Camunda 8, N5); its retry looks the decision up again."""
    if node.decision_id is None:
        _service_task(rt, token, node)
        return
    from engine_core.dmn import evaluate_decision

    context = rt.token_vars(token)
    decision_id = non_empty_string(node.decision_id, context, node.id, rt.now, "decision id")
    try:
        result = evaluate_decision(rt.services.decisions, decision_id, context, now=rt.now)
    except EngineInvariantError:
        raise
    except Exception as exc:
        # A decision that is missing or breaks its hit policy (DecisionError), one of
        # its expressions that fails (ExpressionError), or anything else evaluating
        # the model's table raised: the cause class names which.
        raise TechnicalFailure(f"{node.label}: {exc}", type(exc).__name__) from exc
    rt.activity_done(token, {node.result_variable: result} if node.result_variable else {})


def _script_task(rt: Runtime, token: Token, node: Node) -> None:
    if node.job_type is not None:
        _job(rt, token, node)
        return
    if node.script is None:
        rt.activity_done(token, {})
        return
    value = json_value(evaluate(node.script, rt.token_vars(token), node.id, rt.now))
    result = {node.result_variable: value} if node.result_variable else {}
    rt.activity_done(token, result)


def _user_task(rt: Runtime, token: Token, node: Node) -> None:
    context = rt.token_vars(token)

    def text(raw: str | None) -> str | None:
        if raw is None:
            return None
        value = evaluate(raw, context, node.id, rt.now)
        return None if value is None else str(json_value(value))

    rt.add_wait(
        WaitKind.USER_TASK,
        WaitRole.NODE,
        node.id,
        token_id=token.id,
        task_name=node.name,
        assignee=text(node.assignee),
        candidate_groups=text(node.candidate_groups),
        form_key=node.form_key,
    )
    _wait(token)


def _receive_task(rt: Runtime, token: Token, node: Node) -> None:
    arm_event(rt, node, node.event, WaitRole.NODE, rt.token_vars(token), token_id=token.id)
    _wait(token)


def _sub_process(rt: Runtime, token: Token, node: Node) -> None:
    existing = rt.cp.scopes.get(token.inner_scope) if token.inner_scope else None
    inputs = rt.mapped_inputs(node, rt.token_vars(token)) if node.inputs else {}
    if existing is not None and existing.node_id == node.id:
        scope = existing  # a multi-instance inner instance: its scope is the sub-process's
        scope.variables.update(inputs)
    else:
        scope = rt.new_scope(node.id, token.scope_id, token.id, inputs)
        token.inner_scope = scope.id
    _wait(token)
    arm_event_sub_processes(rt, scope)
    starts = rt.defn.none_starts(node.id)
    if not starts:
        raise EngineInvariantError(f"sub-process {node.label} has no none start event")
    rt.spawn(starts[0].id, scope.id, list(token.lineage))


def _call_activity(rt: Runtime, token: Token, node: Node) -> None:
    context = rt.token_vars(token)
    key = non_empty_string(node.called_process or "", context, node.id, rt.now, "called process")
    variables = dict(context) if node.propagate_all_parent_variables else {}
    variables.update(rt.mapped_inputs(node, context))
    wait = rt.add_wait(WaitKind.CALL, WaitRole.NODE, node.id, token_id=token.id)
    child_id = f"{rt.cp.instance_id}.{wait.id}"
    wait.child_instance_id = child_id
    root = rt.cp.parent.root_instance_id if rt.cp.parent else rt.cp.instance_id
    rt.effects.append(
        StartChild(
            child_instance_id=child_id,
            process_key=key,
            variables=variables,
            parent_instance_id=rt.cp.instance_id,
            parent_wait_id=wait.id,
            root_instance_id=root,
            version_tag=node.called_version_tag,
        )
    )
    _wait(token)


# -- gateways -------------------------------------------------------------------------


def _exclusive(rt: Runtime, token: Token, node: Node) -> None:
    rt.take_flows(token, rt.chosen_flows(node, token, all_true=False))


def _parallel(rt: Runtime, token: Token, node: Node) -> None:
    from engine_core.joins import parallel_join

    if len(node.incoming) > 1:
        joined = parallel_join(rt, token, node)
        if joined is None:
            return
        token = joined
    rt.take_flows(token, list(node.outgoing))


def _inclusive(rt: Runtime, token: Token, node: Node) -> None:
    if len(node.incoming) > 1:
        token.state = TokenState.WAITING  # the join fires at quiescence (joins.py)
        return
    rt.take_flows(token, rt.chosen_flows(node, token, all_true=True))


def _event_based(rt: Runtime, token: Token, node: Node) -> None:
    """Arm every arm; the first to fire wins and withdraws the others (SRD-071 FR-3a)."""
    context = rt.token_vars(token)
    for flow_id in node.outgoing:
        target = rt.node(rt.defn.flows[flow_id].target)
        for index, definition in enumerate(target.events):
            if definition.kind in (EventKind.TIMER, EventKind.MESSAGE, EventKind.SIGNAL):
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
    NodeKind.USER_TASK: _user_task,
    NodeKind.SERVICE_TASK: _service_task,
    NodeKind.SEND_TASK: _service_task,
    NodeKind.BUSINESS_RULE_TASK: _business_rule_task,
    NodeKind.SCRIPT_TASK: _script_task,
    NodeKind.RECEIVE_TASK: _receive_task,
    NodeKind.SUB_PROCESS: _sub_process,
    NodeKind.CALL_ACTIVITY: _call_activity,
    NodeKind.EXCLUSIVE_GATEWAY: _exclusive,
    NodeKind.PARALLEL_GATEWAY: _parallel,
    NodeKind.INCLUSIVE_GATEWAY: _inclusive,
    NodeKind.EVENT_BASED_GATEWAY: _event_based,
}

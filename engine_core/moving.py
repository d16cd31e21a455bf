"""Every way a token moves on: the one module where a token's work at a node ends.

Leaving an activity, leaving without running it (a resolved incident, a finished
multi-instance body), taking flows, ending a token, completing its scope and with it
the owning activity or the instance, and a multi-instance inner instance completing.
These call each other recursively (the last token of a sub-process completes the
sub-process, whose token leaves and may complete the scope above), so they live in
one file rather than in a circle of modules.

Order matters when leaving. The result is merged first (output mappings see the
node's local variables), then the token's waits at the node are withdrawn (its
boundaries die with the activity), then an incident this token had at the node closes
(progress resolved it), and only then does the token move along its outgoing flows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from dormant.engine_core.checkpoint import (
    ROOT_SCOPE,
    CompensationEntry,
    IncidentState,
    InstanceStatus,
    Scope,
    Token,
    TokenState,
)
from dormant.engine_core.effects import NotifyParent
from dormant.engine_core.errors import EngineInvariantError
from dormant.engine_core.expressions import (
    TechnicalFailure,
    always_expression,
    boolean,
    evaluate,
    json_value,
)
from dormant.engine_core.model import EventKind, Node, NodeKind
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.transitions import move_token

__all__ = [
    "arrive",
    "cancel_instance",
    "check_scope",
    "chosen_flows",
    "complete_instance",
    "end_token",
    "fail_instance",
    "finish_body",
    "finish_event_sub",
    "finish_process",
    "leave_activity",
    "leave_without_running",
    "link_target",
    "plain_outgoing",
    "start_inner",
    "take_flows",
    "terminate_end",
]


# -- moving along flows ---------------------------------------------------------------


def arrive(rt: Runtime, token: Token, node_id: str, flow_id: str | None = None) -> None:
    """Put a token on a node, to be entered by the run loop.

    Leaving its node is progress: an incident the token had there is closed here as
    ``retried`` (an operator's Resolve closed its own before, engine_core/incidents.py),
    whatever kind of node it was (a gateway or event retried after an incident moves
    on by ``take_flows``, never through ``leave_activity``).
    """
    if token.node_id != node_id:
        rt.close_incidents(token, IncidentState.RETRIED)
    local = rt.cp.scopes.get(token.inner_scope) if token.inner_scope else None
    if local is not None and local.token_id == token.id and local.node_id == token.node_id:
        rt.drop_scope(local.id)  # what a gateway's or event's start listeners set locally
    token.node_id = node_id
    move_token(token, TokenState.ACTIVE)
    token.flow_id = flow_id
    token.inner_scope = None
    token.listener_phase, token.listener_index = None, 0
    rt.queue.append(token.id)


def take_flows(rt: Runtime, token: Token, flow_ids: Iterable[str]) -> None:
    """Leave along ``flow_ids``: the token follows the first, forks take the rest."""
    flows = [rt.defn.flows[f] for f in flow_ids]
    if not flows:
        scope = rt.cp.scopes.get(token.scope_id)
        owner = rt.defn.nodes.get(scope.node_id) if scope and scope.node_id else None
        if scope is not None and owner is not None and owner.ad_hoc is not None:
            _end_ad_hoc_path(rt, token, scope, owner)
            return
        end_token(rt, token)
        return
    first, *rest = flows
    if rest:
        rt.reserve_tokens(len(rest), token.node_id)
    for flow in rest:
        rt.spawn(flow.target, token.scope_id, [*token.lineage, token.id], flow.id)
    arrive(rt, token, first.target, first.id)


def chosen_flows(rt: Runtime, node: Node, token: Token, *, all_true: bool) -> list[str]:
    """Outgoing flows whose condition holds (the first one, or all), else the default.

    No flow to take is a technical failure (an incident), as in Camunda 8.
    """
    context: dict[str, Any] | None = (
        None  # the token's variables, read only if a condition needs them
    )
    taken: list[str] = []
    for flow in rt.defn.index.outgoing[node.id]:
        if flow.id == node.default_flow:
            continue
        if flow.condition is not None:
            if context is None:
                context = rt.token_vars(token)
            if not boolean(always_expression(flow.condition), context, node.id, rt.now):
                continue
        taken.append(flow.id)
        if not all_true:
            break
    if taken:
        return taken
    if node.default_flow is not None:
        return [node.default_flow]
    raise TechnicalFailure(
        f"no outgoing flow of {node.label} can be taken: no condition is true and "
        "there is no default flow",
        cause_class="NoFlowTaken",
    )


def plain_outgoing(rt: Runtime, node: Node, token: Token) -> list[str]:
    """An activity's or event's outgoing flows; conditional ones only when true."""
    if node.id in rt.defn.index.unconditional:
        return list(node.outgoing)
    return chosen_flows(rt, node, token, all_true=True)


# -- leaving an activity --------------------------------------------------------------


def leave_activity(
    rt: Runtime, token: Token, result: Mapping[str, Any], from_scope: Scope | None = None
) -> None:
    """An activity finished its work: merge its result and move on.

    A failing output mapping or outgoing condition is this token's failure at this
    node, whoever asked it to leave (its own entry, a wake, or the last token of its
    sub-process ending): the failure names them (``TechnicalFailure.at``)."""
    node = rt.node(token.node_id)
    try:
        _leave(rt, token, node, result, from_scope)
    except TechnicalFailure as failure:
        failure.at(token.id, node.id)
        raise


def _leave(
    rt: Runtime, token: Token, node: Node, result: Mapping[str, Any], from_scope: Scope | None
) -> None:
    if token.loop_index is not None:
        if token.listener_phase != "ended":
            _inner_outputs(rt, token, node, result, from_scope)
            if _to_end_listeners(rt, token, node):
                return
        _inner_done(rt, token, node)
        return
    if token.listener_phase == "ended":
        # Back from the end listeners: the outputs were applied before them.
        _leave_along_flows(rt, token, node)
        return
    if from_scope is not None:
        # A sub-process finished: its output mappings read the sub-process's variables.
        if node.outputs:
            context_scope = rt.new_scope(node.id, token.scope_id, token.id, from_scope.variables)
            token.inner_scope = context_scope.id
            try:
                rt.apply_outputs(node, token, {}, target_scope=token.scope_id)
            finally:
                rt.cp.scopes.pop(context_scope.id, None)
                token.inner_scope = None
    else:
        rt.apply_outputs(node, token, result)
    if _to_end_listeners(rt, token, node):
        return
    _leave_along_flows(rt, token, node)


def _to_end_listeners(rt: Runtime, token: Token, node: Node) -> bool:
    """The element is completing: its boundaries close and its end listeners run
    (engine_core/listeners.py, dispatched when the run loop enters the token)."""
    if not node.listeners("end"):
        return False
    rt.withdraw_token_waits(token.id)
    token.listener_phase, token.listener_index = "end", 0
    move_token(token, TokenState.ACTIVE)
    rt.queue.append(token.id)
    return True


def _leave_along_flows(rt: Runtime, token: Token, node: Node) -> None:
    collect_ad_hoc_output(rt, token, node)
    _record_compensable(rt, token)
    _finish_at_node(rt, token)
    if node.kind is NodeKind.INTERMEDIATE_THROW_EVENT and node.event.kind is EventKind.LINK:
        arrive(rt, token, link_target(rt, node).id)  # back from its end listeners
        return
    take_flows(rt, token, plain_outgoing(rt, node, token))


def link_target(rt: Runtime, node: Node) -> Node:
    """The catch event a link throw continues at: the one of its scope with its name."""
    name = node.event.link_name
    for candidate in rt.defn.nodes_in(node.parent):
        if (
            candidate.kind is NodeKind.INTERMEDIATE_CATCH_EVENT
            and candidate.event.kind is EventKind.LINK
            and candidate.event.link_name == name
        ):
            return candidate
    raise EngineInvariantError(f"link {name!r} thrown at {node.label} has no catch event")


def leave_without_running(rt: Runtime, token: Token) -> None:
    """Continue on the node's outgoing flows, node not (re-)run: a resolved incident,
    a finished multi-instance body."""
    node = rt.node(token.node_id)
    _finish_at_node(rt, token)
    take_flows(rt, token, plain_outgoing(rt, node, token))


def _finish_at_node(rt: Runtime, token: Token) -> None:
    rt.withdraw_token_waits(token.id)
    if token.inner_scope is not None:
        rt.drop_scope(token.inner_scope)
        token.inner_scope = None
    rt.close_incidents(token, IncidentState.RETRIED)


def _record_compensable(rt: Runtime, token: Token) -> None:
    """Completed activities with a compensation boundary enter the ledger (never failed ones)."""
    node = rt.node(token.node_id)
    for boundary_id in node.boundaries:
        boundary = rt.node(boundary_id)
        if boundary.event.kind is EventKind.COMPENSATE:
            rt.cp.compensation.append(
                CompensationEntry(
                    node_id=node.id,
                    scope_id=token.scope_id,
                    variables=rt.token_vars(token),
                )
            )
            return


def collect_ad_hoc_output(rt: Runtime, token: Token, node: Node) -> None:
    """An element directly inside an ad-hoc sub-process with ``outputElement`` is
    completing: the expression is evaluated in the element's own scope (its local
    variables, the job's activation variables among them, are still there) and its
    value appended to the sub-process's ``outputCollection``."""
    parent = rt.defn.nodes.get(node.parent) if node.parent else None
    spec = parent.ad_hoc if parent is not None else None
    if spec is None or not spec.output_element or not spec.output_collection:
        return
    scope = rt.cp.scopes.get(token.scope_id)
    if scope is None or parent is None or scope.node_id != parent.id:
        return
    value = json_value(
        evaluate(always_expression(spec.output_element), rt.token_vars(token), node.id, rt.now)
    )
    current = scope.variables.get(spec.output_collection)
    items = list(current) if isinstance(current, list) else []
    rt.propagate(scope.id, {spec.output_collection: [*items, value]})


# -- ending tokens and scopes ---------------------------------------------------------


# The phase of a job-worker ad-hoc sub-process's token asking for its next job
# (nodes.enter opens it: engine_core/ad_hoc.py).
AD_HOC_NEXT_JOB = "ad-hoc-next-job"


def _end_job_worker_path(rt: Runtime, token: Token, scope: Scope) -> None:
    """A path inside a job-worker ad-hoc sub-process ended: it completes if its job
    said so and nothing else runs inside; otherwise its token asks for the next job
    (its worker decides what runs next). A token in an incident asks nothing: the
    incident's retry opens the job."""
    rt.remove_token(token, TokenState.COMPLETED)
    if scope.ad_hoc_fulfilled:
        check_scope(rt, scope.id, by=token.node_id)
        return
    holder = rt.cp.tokens.get(scope.token_id) if scope.token_id else None
    if holder is not None and holder.state is TokenState.WAITING:
        holder.listener_phase = AD_HOC_NEXT_JOB
        move_token(holder, TokenState.ACTIVE)
        rt.queue.append(holder.id)


def _end_ad_hoc_path(rt: Runtime, token: Token, scope: Scope, owner: Node) -> None:
    """A path inside an ad-hoc sub-process ended: Zeebe reads the completion condition
    here, at the end of each execution path (an element with no outgoing flow), in the
    sub-process's scope, while the ending token is still live, so a condition that
    fails is an incident at that element and its retry runs the element again.

    Met (or no condition): the sub-process completes once no inner token is left;
    ``cancelRemainingInstances`` (the default) ends the others first. Not met: the
    token ends and the sub-process stays active, even with nothing left inside it, as
    in Zeebe: only a later path whose end meets the condition completes it."""
    spec = owner.ad_hoc
    assert spec is not None
    if owner.job_type is not None:
        _end_job_worker_path(rt, token, scope)
        return
    met = True
    if spec.completion_condition:
        met = _ad_hoc_condition(rt, spec.completion_condition, scope, owner)
        if met and spec.cancel_remaining:
            for other in rt.tokens_in(scope.id):
                if other.id != token.id:
                    rt.terminate_token(other)
            for child in rt.child_scopes(scope.id):
                if child.token_id is None:
                    rt.terminate_scope(child.id)
                    rt.drop_scope(child.id)
        rt.fact("AdHocConditionRead", node=owner.id, met=met)
    rt.remove_token(token, TokenState.COMPLETED)
    if met:
        check_scope(rt, scope.id, by=token.node_id)


def _ad_hoc_condition(rt: Runtime, condition: str, scope: Scope, owner: Node) -> bool:
    value = evaluate(always_expression(condition), rt.visible(scope.id), owner.id, rt.now)
    if isinstance(value, bool):
        return value
    kind = "null" if value is None else f"a {type(value).__name__}"
    raise TechnicalFailure(
        f"completionCondition {condition!r} of ad-hoc sub-process {owner.label} evaluated "
        f"to {kind}, expected a boolean (a variable it uses may be missing)",
        cause_class="ExpressionError",
    )


def end_token(rt: Runtime, token: Token, state: TokenState = TokenState.COMPLETED) -> None:
    """The token is done: drop it and its waits; its scope may now be complete."""
    rt.remove_token(token, state)
    check_scope(rt, token.scope_id, by=token.node_id)


def terminate_end(rt: Runtime, token: Token) -> None:
    """Terminate end: ends every token of its scope; the scope then completes (N8).
    With end listeners the terminating token stays for them, then ends as any end
    event's does (its scope completes then)."""
    scope_id = token.scope_id
    listened = bool(rt.node(token.node_id).listeners("end"))
    if not listened:
        rt.remove_token(token, TokenState.COMPLETED)
    for other in rt.tokens_in(scope_id):
        if other.id != token.id:
            rt.terminate_token(other)
    for child in rt.child_scopes(scope_id):
        if child.token_id is None:
            rt.terminate_scope(child.id)
            rt.drop_scope(child.id)
    rt.fact("Terminated", node=token.node_id)
    if listened:
        leave_activity(rt, token, {})
        return
    check_scope(rt, scope_id, by=token.node_id)


def check_scope(rt: Runtime, scope_id: str, by: str | None = None) -> None:
    """Complete a scope whose last token ended; the caller's token moves on.

    ``by``: the node where the last path ended, where the process's end listeners
    run if it has any (a token is what a listener's job waits on)."""
    scope = rt.cp.scopes.get(scope_id)
    if scope is None or scope.mi_items is not None:
        return
    if rt.tokens_in(scope_id):
        return
    if any(c.token_id is None and c.node_id is not None for c in rt.child_scopes(scope_id)):
        return  # an event sub-process is still running in this scope
    if scope_id == ROOT_SCOPE:
        if rt.defn.listeners("end"):
            _to_process_end(rt, by)
            return
        complete_instance(rt)
        return
    if scope.token_id is None:
        # An event sub-process finished: its end listeners, then its parent scope may
        # now be complete too.
        if scope.node_id is not None and rt.node(scope.node_id).listeners("end"):
            _to_event_sub_end(rt, scope, by)
            return
        _event_sub_done(rt, scope, by)
        return
    rt.drop_scope(scope_id)
    owner = rt.cp.tokens.get(scope.token_id)
    if owner is None:
        raise EngineInvariantError(
            f"scope {scope_id} of instance {rt.cp.instance_id} completed, "
            f"but its token {scope.token_id} is gone"
        )
    owner.inner_scope = None if owner.inner_scope == scope_id else owner.inner_scope
    leave_activity(rt, owner, {}, from_scope=scope)


# -- ending the instance --------------------------------------------------------------


def _to_process_end(rt: Runtime, by: str | None) -> None:
    """The process scope is done and the process has end listeners: they run on a
    token at the node where the last path ended (else at its first node). The
    process's event sub-processes can no longer start: it is completing."""
    for wait in [w for w in rt.cp.waits.values() if w.scope_id == ROOT_SCOPE]:
        rt.withdraw(wait)
    node_id = by if by is not None and by in rt.defn.nodes else rt.defn.children[None][0]
    token = rt.spawn(node_id, ROOT_SCOPE, [])
    token.listener_phase = "process-end"


def _to_event_sub_end(rt: Runtime, scope: Scope, by: str | None) -> None:
    """An event sub-process finished and has end listeners: they run on a token in its
    scope, at the node where its last path ended (else its start event); the event
    sub-processes nested in it can no longer start."""
    for wait in [w for w in rt.cp.waits.values() if w.scope_id == scope.id]:
        rt.withdraw(wait)
    inside = rt.defn.children.get(scope.node_id, ())
    node_id = by if by in inside else inside[0]
    token = rt.spawn(node_id, scope.id, [])
    token.listener_phase = "sub-end"


def _event_sub_done(rt: Runtime, scope: Scope, by: str | None) -> None:
    rt.drop_scope(scope.id)
    if scope.parent_id is not None:
        check_scope(rt, scope.parent_id, by=by)


def finish_event_sub(rt: Runtime, token: Token) -> None:
    """An event sub-process's end listeners are done: it completes."""
    scope = rt.cp.scopes[token.scope_id]
    rt.remove_token(token, TokenState.COMPLETED)
    _event_sub_done(rt, scope, token.node_id)


def finish_process(rt: Runtime, token: Token) -> None:
    """The process's end listeners are done: the instance completes."""
    rt.remove_token(token, TokenState.COMPLETED)
    complete_instance(rt)


def complete_instance(rt: Runtime) -> None:
    for wait in list(rt.cp.waits.values()):
        rt.withdraw(wait)
    rt.cp.status = InstanceStatus.COMPLETED
    rt.cp.ended_at = rt.now
    rt.fact("Completed")
    if rt.cp.parent is not None:
        rt.effects.append(
            NotifyParent(
                parent_instance_id=rt.cp.parent.instance_id,
                wait_id=rt.cp.parent.wait_id,
                completed=True,
                variables=dict(rt.cp.scopes[ROOT_SCOPE].variables),
            )
        )


def fail_instance(rt: Runtime, reason: str, error_code: str | None = None) -> None:
    """The fatal path: an error end event uncaught at the root, or a broken invariant."""
    rt.terminate_scope(ROOT_SCOPE)
    for wait in list(rt.cp.waits.values()):
        rt.withdraw(wait)
    rt.cp.status = InstanceStatus.FAILED
    rt.cp.failure = reason
    rt.cp.ended_at = rt.now
    rt.fact("Failed", error_code=error_code)
    if rt.cp.parent is not None:
        rt.effects.append(
            NotifyParent(
                parent_instance_id=rt.cp.parent.instance_id,
                wait_id=rt.cp.parent.wait_id,
                completed=False,
                variables={},
                error=reason,
                error_class="ChildFailed",
                error_code=error_code,
            )
        )


def cancel_instance(rt: Runtime, *, notify_parent: bool) -> None:
    """An operator (or the parent instance) cancelled: everything is withdrawn."""
    rt.terminate_scope(ROOT_SCOPE)
    for wait in list(rt.cp.waits.values()):
        rt.withdraw(wait)
    rt.cp.status = InstanceStatus.TERMINATED
    rt.cp.ended_at = rt.now
    rt.fact("Terminated", reason_kind="cancel")
    if rt.cp.parent is not None and notify_parent:
        rt.effects.append(
            NotifyParent(
                parent_instance_id=rt.cp.parent.instance_id,
                wait_id=rt.cp.parent.wait_id,
                completed=False,
                variables={},
                error=f"child instance {rt.cp.instance_id} was cancelled",
                error_class="ChildCancelled",
            )
        )


# -- multi-instance: an inner instance completes --------------------------------------


def start_inner(rt: Runtime, outer: Token, node: Node, body: Scope, index: int) -> None:
    """Start inner instance ``index`` of a multi-instance body (multi_instance.py)."""
    loop = node.loop
    assert loop is not None and body.mi_items is not None
    variables: dict[str, Any] = {"loopCounter": index + 1}
    output_name = _variable_name(loop.output_element)
    if output_name is not None:
        # Camunda 8 creates the output element as a local variable of each inner
        # instance (null until set), so parallel instances never share or clobber it.
        variables[output_name] = None
    if loop.input_element:
        variables[loop.input_element] = body.mi_items[index]
    inner = rt.spawn(node.id, body.id, [*outer.lineage, outer.id], loop_index=index)
    scope = rt.new_scope(node.id, body.id, inner.id, variables, loop_index=index)
    inner.inner_scope = scope.id


def _inner_outputs(
    rt: Runtime,
    token: Token,
    node: Node,
    result: Mapping[str, Any],
    from_scope: Scope | None,
) -> None:
    """One inner instance finished its work: its result lands (its end listeners, if
    any, run after this and before ``_inner_done``)."""
    body = rt.cp.scopes.get(token.scope_id)
    assert body is not None
    instance_scope_id = from_scope.id if from_scope is not None else token.inner_scope
    if from_scope is not None:
        # The sub-process body was the instance scope; read outputs from its variables.
        instance_scope = rt.new_scope(node.id, body.id, token.id, from_scope.variables)
        instance_scope_id = instance_scope.id
        token.inner_scope = instance_scope_id
    if instance_scope_id is not None and instance_scope_id in rt.cp.scopes:
        # Camunda 8: the result (or the output mappings' values) is written FROM the
        # instance scope: a name the instance has locally (the output element, the input
        # element, loopCounter) stays there; any other name propagates outward as usual.
        if node.outputs:
            rt.apply_outputs(node, token, result, target_scope=instance_scope_id)
        else:
            rt.propagate(instance_scope_id, result)


def _inner_done(rt: Runtime, token: Token, node: Node) -> None:
    """One inner instance is done: collect its output, start the next or finish."""
    loop = node.loop
    body = rt.cp.scopes.get(token.scope_id)
    assert loop is not None and body is not None and body.mi_results is not None
    context = rt.token_vars(token)
    if loop.output_element:
        output = json_value(
            evaluate(always_expression(loop.output_element), context, node.id, rt.now)
        )
        rt.hold(output, f"the output element of {node.label}")
        body.mi_results[token.loop_index or 0] = output
    # Read while this inner instance is still live (counted as completed): a failing
    # condition is an incident on it, which a retry re-runs, never on an ended token.
    complete = bool(loop.completion_condition) and _condition_met(
        rt, loop.completion_condition or "", body, node
    )
    if token.inner_scope is not None:
        rt.drop_scope(token.inner_scope)
    # Through remove_token, so an incident this inner instance had (now retried to
    # success) closes as resolved instead of outliving its token.
    rt.remove_token(token, TokenState.COMPLETED)
    body.mi_completed += 1
    outer = rt.cp.tokens[body.token_id] if body.token_id else None
    if outer is None:
        return
    total = len(body.mi_items or [])
    if complete:
        for sibling in rt.tokens_in(body.id):
            rt.terminate_token(sibling)
        finish_body(rt, outer, node, body)
        return
    if loop.sequential and body.mi_next < total:
        index = body.mi_next
        body.mi_next += 1
        start_inner(rt, outer, node, body, index)
        return
    if body.mi_completed >= total and not rt.tokens_in(body.id):
        finish_body(rt, outer, node, body)


def _condition_met(rt: Runtime, condition: str, body: Scope, node: Node) -> bool:
    """Evaluated as the inner instance that just finished is about to end."""
    total = len(body.mi_items or [])
    active = len(rt.tokens_in(body.id)) - 1
    context = {
        **rt.visible(body.id),
        "numberOfInstances": total,
        "numberOfCompletedInstances": body.mi_completed + 1,
        "numberOfActiveInstances": active,
        "numberOfTerminatedInstances": 0,
    }
    return boolean(always_expression(condition), context, node.id, rt.now)


def finish_body(rt: Runtime, outer: Token, node: Node, body: Scope) -> None:
    """Every inner instance is done (or the completion condition held): the outer
    token leaves the multi-instance activity with the output collection."""
    loop = node.loop
    assert loop is not None
    results = list(body.mi_results or [])
    outer.inner_scope = None
    rt.drop_scope(body.id)
    if loop.output_collection:
        rt.propagate(outer.scope_id, {loop.output_collection: results})
    move_token(outer, TokenState.ACTIVE)
    try:
        leave_without_running(rt, outer)
    except TechnicalFailure as failure:
        # The body's outgoing conditions: the activity's failure, on its own token.
        failure.at(outer.id, node.id)
        raise


def _variable_name(source: str | None) -> str | None:
    """The variable an output element names when it is a plain name (``=result``)."""
    if source is None:
        return None
    name = source.strip().removeprefix("=").strip()
    return name if _NAME.fullmatch(name) else None


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

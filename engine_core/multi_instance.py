"""Multi-instance activities: one scope per inner instance, outputs in input order.

The token that reaches a multi-instance activity waits at it, owning a *body* scope
(``mi_items`` set). Each inner instance is a token at the same node with
``loop_index`` set and its own instance scope holding ``inputElement`` and
``loopCounter``. Parallel starts them all; sequential starts the next one when the
previous completes, so an incident in one inner instance holds back the rest (and a
retry re-runs only that one). Boundaries belong to the outer token: they interrupt
the whole body.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from engine_core.checkpoint import Scope, Token, TokenState, WaitRole
from engine_core.expressions import TechnicalFailure, boolean, evaluate, json_value
from engine_core.model import Node

if TYPE_CHECKING:
    from engine_core.runtime import Runtime

__all__ = ["inner_done", "start_body"]


def start_body(rt: Runtime, token: Token, node: Node) -> None:
    loop = node.loop
    assert loop is not None
    context = rt.token_vars(token)
    items: list[Any]
    if loop.input_collection:
        value = evaluate(_expr(loop.input_collection), context, node.id, rt.now)
        if not isinstance(value, list):
            raise TechnicalFailure(
                f"input collection {loop.input_collection!r} of {node.label} evaluated to "
                f"{'null' if value is None else type(value).__name__}, expected a list",
                cause_class="ExpressionError",
            )
        _check_size(rt, node, len(value))
        items = [json_value(v) for v in value]
    else:
        count = evaluate(_expr(loop.cardinality or "0"), context, node.id, rt.now)
        if isinstance(count, bool) or not isinstance(count, int | float | Decimal) or count < 0:
            raise TechnicalFailure(
                f"loop cardinality {loop.cardinality!r} of {node.label} is not a "
                "non-negative number",
                cause_class="ExpressionError",
            )
        _check_size(rt, node, count)
        items = [None] * int(count)
    body = rt.new_scope(node.id, token.scope_id, token.id)
    body.mi_items = items
    body.mi_results = [None] * len(items)
    token.inner_scope = body.id
    token.state = TokenState.WAITING
    if not items:
        _finish(rt, token, node, body)
        return
    first_batch = 1 if loop.sequential else len(items)
    for index in range(first_batch):
        _start_inner(rt, token, node, body, index)
    body.mi_next = first_batch


def _check_size(rt: Runtime, node: Node, count: float | Decimal) -> None:
    """Every inner instance is a token and a scope in the checkpoint: a model asking
    for a billion of them is an incident here, not a step that allocates them all."""
    limit = rt.services.max_loop_items
    if count > limit:
        raise TechnicalFailure(
            f"multi-instance {node.label} asks for {count} inner instances; at most "
            f"{limit} are allowed (DORMANT_MAX_LOOP_ITEMS)",
            cause_class="LoopTooLarge",
        )


def _start_inner(rt: Runtime, outer: Token, node: Node, body: Scope, index: int) -> None:
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


def inner_done(
    rt: Runtime,
    token: Token,
    node: Node,
    result: Mapping[str, Any],
    from_scope: Scope | None,
) -> None:
    """One inner instance finished: collect its output, start the next or finish."""
    loop = node.loop
    body = rt.cp.scopes.get(token.scope_id)
    assert loop is not None and body is not None and body.mi_results is not None
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
    context = rt.token_vars(token)
    if loop.output_element:
        body.mi_results[token.loop_index or 0] = json_value(
            evaluate(_expr(loop.output_element), context, node.id, rt.now)
        )
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
        _finish(rt, outer, node, body)
        return
    if loop.sequential and body.mi_next < total:
        index = body.mi_next
        body.mi_next += 1
        _start_inner(rt, outer, node, body, index)
        return
    if body.mi_completed >= total and not rt.tokens_in(body.id):
        _finish(rt, outer, node, body)


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
    return boolean(_expr(condition), context, node.id, rt.now)


def _finish(rt: Runtime, outer: Token, node: Node, body: Scope) -> None:
    from engine_core.incidents import guarded
    from engine_core.leaving import leave_without_running

    loop = node.loop
    assert loop is not None
    results = list(body.mi_results or [])
    outer.inner_scope = None
    rt.drop_scope(body.id)
    if loop.output_collection:
        rt.propagate(outer.scope_id, {loop.output_collection: results})
    outer.state = TokenState.ACTIVE
    # The body's outgoing conditions fail: an incident at the activity, on its token.
    guarded(
        rt,
        outer,
        node,
        lambda: leave_without_running(rt, outer),
        activated=lambda: any(w.role is WaitRole.BOUNDARY for w in rt.waits_of(outer.id)),
    )


def _variable_name(source: str | None) -> str | None:
    """The variable an output element names when it is a plain name (``=result``)."""
    if source is None:
        return None
    name = source.strip().removeprefix("=").strip()
    return name if _NAME.fullmatch(name) else None


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _expr(source: str) -> str:
    return source if source.lstrip().startswith("=") else "=" + source

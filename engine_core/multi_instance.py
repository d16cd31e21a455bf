"""Multi-instance activities: one scope per inner instance, outputs in input order.

The token that reaches a multi-instance activity waits at it, owning a *body* scope
(``mi_items`` set). Each inner instance is a token at the same node with
``loop_index`` set and its own instance scope holding ``inputElement`` and
``loopCounter``. Parallel starts them all; sequential starts the next one when the
previous completes, so an incident in one inner instance holds back the rest (and a
retry re-runs only that one). Boundaries belong to the outer token: they interrupt
the whole body.

This module starts a body; an inner instance's completion is a way a token moves on
and lives with the others in ``moving.py``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from dormant.engine_core.checkpoint import Token, TokenState
from dormant.engine_core.errors import shorten
from dormant.engine_core.expressions import (
    TechnicalFailure,
    always_expression,
    evaluate,
    json_value,
)
from dormant.engine_core.model import Node
from dormant.engine_core.moving import finish_body, start_inner
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.transitions import move_token

__all__ = ["start_body"]


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


def start_body(rt: Runtime, token: Token, node: Node) -> None:
    loop = node.loop
    assert loop is not None
    context = rt.token_vars(token)
    items: list[Any]
    if loop.input_collection:
        value = evaluate(always_expression(loop.input_collection), context, node.id, rt.now)
        if not isinstance(value, list):
            raise TechnicalFailure(
                f"input collection {shorten(loop.input_collection)} of {node.label} evaluated to "
                f"{'null' if value is None else type(value).__name__}, expected a list",
                cause_class="ExpressionError",
            )
        _check_size(rt, node, len(value))
        items = [json_value(v) for v in value]
        # kept in the checkpoint for the inner instances: bounded like a variable
        rt.hold(items, f"the input collection of {node.label}")
    else:
        count = evaluate(always_expression(loop.cardinality or "0"), context, node.id, rt.now)
        if isinstance(count, bool) or not isinstance(count, int | float | Decimal) or count < 0:
            raise TechnicalFailure(
                f"loop cardinality {shorten(loop.cardinality)} of {node.label} is not a "
                "non-negative number",
                cause_class="ExpressionError",
            )
        _check_size(rt, node, count)
        items = [None] * int(count)
    body = rt.new_scope(node.id, token.scope_id, token.id)
    body.mi_items = items
    body.mi_results = [None] * len(items)
    token.inner_scope = body.id
    move_token(token, TokenState.WAITING)
    if not items:
        finish_body(rt, token, node, body)
        return
    first_batch = 1 if loop.sequential else len(items)
    for index in range(first_batch):
        start_inner(rt, token, node, body, index)
    body.mi_next = first_batch

"""Ad-hoc sub-processes: a scope whose inner elements run when the model names them.

Entering one opens its scope (input mappings first, as Camunda 8 applies them before
it evaluates anything), arms its event sub-processes, then evaluates
``zeebe:adHoc activeElementsCollection`` in that scope and starts one token at each
element the list names. Only inner elements without incoming sequence flows can be
named (what Zeebe calls the activatable elements); a flow leaving one carries its
token on as in any sub-process. An empty list, or no collection at all, activates
nothing and the sub-process stays active until a boundary or event sub-process ends it.

The collection is checked before any token starts, so a wrong-typed value or an id
that is not an activatable element is an incident at the ad-hoc sub-process naming
the attribute, with nothing half-started behind it.

When an inner path ends (a token with no flow left to take), the completion
condition is read: that is ``moving._end_ad_hoc_path``, the one place a token's path
ends.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from dormant.engine_core import event_subs
from dormant.engine_core.checkpoint import Token, TokenState
from dormant.engine_core.errors import shorten
from dormant.engine_core.expressions import TechnicalFailure, always_expression, evaluate
from dormant.engine_core.model import Node, NodeKind, ProcessDefinition
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.transitions import move_token

__all__ = ["activatable", "start"]

# Inner nodes that never start a path of their own: they hang off an activity, are
# started by their event, or are run by compensation.
_NEVER_ACTIVATED = frozenset({NodeKind.BOUNDARY_EVENT, NodeKind.EVENT_SUB_PROCESS})


def activatable(definition: ProcessDefinition, node: Node) -> tuple[str, ...]:
    """The inner element ids ``activeElementsCollection`` may name, in model order."""
    return tuple(
        n.id
        for n in definition.nodes_in(node.id)
        if not n.incoming and n.kind not in _NEVER_ACTIVATED and not n.is_for_compensation
    )


def start(rt: Runtime, token: Token, node: Node) -> None:
    spec = node.ad_hoc
    assert spec is not None  # the reader sets it on every ad-hoc sub-process
    existing = rt.cp.scopes.get(token.inner_scope) if token.inner_scope else None
    ran = token.listener_phase == "ran"  # the scope opened with its inputs before them
    inputs = rt.mapped_inputs(node, rt.token_vars(token)) if node.inputs and not ran else {}
    context = {**rt.token_vars(token), **inputs}
    elements = _elements(rt, node, context) if spec.active_elements else []
    if existing is not None and existing.node_id == node.id:
        scope = existing  # a multi-instance inner instance: its scope is the sub-process's
        rt.write_scope(scope, inputs)
    else:
        scope = rt.new_scope(node.id, token.scope_id, token.id, inputs)
        token.inner_scope = scope.id
    move_token(token, TokenState.WAITING)
    event_subs.arm(rt, scope)
    rt.fact("AdHocActivated", node=node.id, elements=len(elements))
    for element in elements:
        rt.spawn(element, scope.id, list(token.lineage))


def _elements(rt: Runtime, node: Node, context: dict[str, Any]) -> list[str]:
    raw = node.ad_hoc.active_elements if node.ad_hoc else None
    assert raw is not None
    value = evaluate(always_expression(raw), context, node.id, rt.now)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TechnicalFailure(
            f"activeElementsCollection {shorten(raw)} of ad-hoc sub-process {node.label} evaluated "
            f"to {_describe(value)}, expected a list of element ids (strings)",
            cause_class="ExpressionError",
        )
    limit = rt.services.max_loop_items
    if len(value) > limit:
        raise TechnicalFailure(
            f"activeElementsCollection of ad-hoc sub-process {node.label} names {len(value)} "
            f"elements; at most {limit} are allowed (DORMANT_MAX_LOOP_ITEMS)",
            cause_class="LoopTooLarge",
        )
    allowed = activatable(rt.defn, node)
    unknown = [v for v in value if v not in allowed]
    if unknown:
        raise TechnicalFailure(
            f"activeElementsCollection {shorten(raw)} of ad-hoc sub-process {node.label} names "
            f"{', '.join(repr(u[:80]) for u in unknown[:5])}, not an element of it that can "
            f"be activated (those are: {', '.join(allowed)})",
            cause_class="ExpressionError",
        )
    return list(value)


def _describe(value: Any) -> str:
    if isinstance(value, list):
        odd = next(v for v in value if not isinstance(v, str))
        return f"a list holding {_feel_kind(odd)}"
    return _feel_kind(value)


def _feel_kind(value: Any) -> str:
    """A value as FEEL names its type (a Decimal is a number to the model's author)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float | Decimal):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a context"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"

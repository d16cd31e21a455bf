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
ends. ``outputElement`` is evaluated as each inner element completes, in its own scope
(its local variables visible), and appended to ``outputCollection``, a local list of
the sub-process that starts empty (``moving.collect_ad_hoc_output``).

**The job-worker implementation** (a ``zeebe:taskDefinition`` on the sub-process, the
form Camunda 8.8's AI agent takes): entering opens a job for the sub-process itself,
its variables those of the sub-process's scope, which holds
``adHocSubProcessElements`` (what may be activated: id, name). The job's result
(``JobCompleted.ad_hoc``) names the elements to activate, each with variables local to
it, says whether the completion condition is fulfilled, and whether to cancel what
still runs inside. Each time an inner path ends a new job is opened (the worker sees
``outputCollection`` grown), unless one is open or the condition was fulfilled; a
fulfilled sub-process completes once nothing runs inside it. A result naming an
element that cannot be activated is an incident at the sub-process; its retry opens
the job again.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from dormant.engine_core import event_subs, jobs
from dormant.engine_core.checkpoint import Scope, Token, TokenState, Wait, WaitKind
from dormant.engine_core.errors import shorten
from dormant.engine_core.expressions import TechnicalFailure, always_expression, evaluate
from dormant.engine_core.incidents import raise_failure
from dormant.engine_core.model import Node, NodeKind, ProcessDefinition
from dormant.engine_core.moving import check_scope
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.transitions import move_token
from dormant.engine_core.triggers import AdHocResult, JobCompleted
from dormant.engine_core.wake import Wake

__all__ = ["ELEMENTS_VARIABLE", "activatable", "job_completed", "next_job", "start"]

# The local variable of a job-worker ad-hoc sub-process its job reads (Camunda 8.8).
ELEMENTS_VARIABLE = "adHocSubProcessElements"

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
    if spec.output_collection and spec.output_collection not in scope.variables:
        rt.write_scope(scope, {spec.output_collection: []})
    move_token(token, TokenState.WAITING)
    event_subs.arm(rt, scope)
    if node.job_type is not None:
        rt.write_scope(scope, {ELEMENTS_VARIABLE: _descriptions(rt.defn, node)})
        rt.fact("AdHocActivated", node=node.id, elements=0)
        next_job(rt, token, node)
        return
    rt.fact("AdHocActivated", node=node.id, elements=len(elements))
    for element in elements:
        rt.spawn(element, scope.id, list(token.lineage))


def _descriptions(definition: ProcessDefinition, node: Node) -> list[dict[str, Any]]:
    """``adHocSubProcessElements``: what the job may activate. Camunda also lists each
    element's documentation, properties and ``fromAi`` parameters; dormant reads none
    of those, so they are empty (docs/bpmn-elements.md)."""
    return [
        {
            "elementId": element_id,
            "elementName": definition.nodes[element_id].name,
            "documentation": None,
            "properties": {},
            "parameters": [],
        }
        for element_id in activatable(definition, node)
    ]


def next_job(rt: Runtime, token: Token, node: Node) -> None:
    """The sub-process's job, opened on entry and again after an inner path ended:
    the worker decides what runs next (its variables: the sub-process's scope)."""
    assert node.job_type is not None
    if any(
        w.kind is WaitKind.JOB and w.token_id == token.id and w.execution_listener is None
        for w in rt.cp.waits.values()
    ):
        return  # one is open: its worker sees what has ended when it reports
    jobs.open_job(rt, token, node, node.job_type, node.job_retries)
    if token.state is not TokenState.WAITING:
        move_token(token, TokenState.WAITING)


def job_completed(rt: Runtime, wait: Wait, trigger: JobCompleted) -> Wake:
    """The job of a job-worker ad-hoc sub-process reported (module docstring)."""
    token = rt.token_of(wait)
    node = rt.node(wait.node_id)
    rt.withdraw(wait)
    scope = rt.cp.scopes.get(token.inner_scope) if token.inner_scope else None
    if scope is None:
        return Wake.token(token.id)  # its scope already ended (a boundary, a cancel)
    try:
        _apply_result(rt, token, node, scope, trigger)
    except TechnicalFailure as failure:
        move_token(token, TokenState.ACTIVE)
        raise_failure(rt, failure, token, node)
    return Wake.token(token.id)


def _apply_result(
    rt: Runtime, token: Token, node: Node, scope: Scope, trigger: JobCompleted
) -> None:
    result = trigger.ad_hoc or AdHocResult()
    rt.bounded(trigger.variables, f"the job result of {node.label}")
    allowed = activatable(rt.defn, node)
    unknown = [a.element_id for a in result.activate if a.element_id not in allowed]
    if unknown:
        raise TechnicalFailure(
            f"the job of ad-hoc sub-process {node.label} asked to activate "
            f"{', '.join(repr(u[:80]) for u in unknown[:5])}, not an element of it that can "
            f"be activated (those are: {', '.join(allowed)})",
            cause_class="InvalidJobResult",
        )
    limit = rt.services.max_loop_items
    if len(result.activate) > limit:
        raise TechnicalFailure(
            f"the job of ad-hoc sub-process {node.label} asked to activate "
            f"{len(result.activate)} elements; at most {limit} are allowed "
            "(DORMANT_MAX_LOOP_ITEMS)",
            cause_class="LoopTooLarge",
        )
    for activation in result.activate:
        rt.bounded(activation.variables, f"the variables of {activation.element_id!r}")
    rt.propagate(scope.id, trigger.variables)
    if result.completion_condition_fulfilled:
        scope.ad_hoc_fulfilled = True
        if result.cancel_remaining:
            for other in rt.tokens_in(scope.id):
                rt.terminate_token(other)
            for child in rt.child_scopes(scope.id):
                if child.token_id is None:
                    rt.terminate_scope(child.id)
                    rt.drop_scope(child.id)
    for activation in result.activate:
        inner = rt.spawn(activation.element_id, scope.id, list(token.lineage))
        if activation.variables:
            local = rt.new_scope(
                activation.element_id, scope.id, inner.id, dict(activation.variables)
            )
            inner.inner_scope = local.id
    rt.fact(
        "AdHocJobCompleted",
        node=node.id,
        elements=len(result.activate),
        fulfilled=result.completion_condition_fulfilled,
    )
    if scope.ad_hoc_fulfilled:
        check_scope(rt, scope.id, by=node.id)


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

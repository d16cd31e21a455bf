"""Assemble and validate a ProcessDefinition: the one place both the XML reader and the
``ProcessBuilder`` go through, so a code-first process and a drawn one obey the same rules.

Callers hand over nodes in document order WITHOUT ``incoming``/``outgoing``/``boundaries``:
those are derived here from the flows and from ``attached_to``, so the two sources of
truth a BPMN file carries (``<incoming>`` children and ``sourceRef``) can never disagree
inside the engine. Everything the step function relies on without checking (a flow's
ends exist and share a scope, a boundary sits on an activity of its own scope, a default
flow leaves its node, a job has a type) is checked here, at deploy, and reported with
the ids to fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from dormant.engine_core.errors import InvalidModel, UnsupportedElement
from dormant.engine_core.expression_check import check_expressions
from dormant.engine_core.expressions import is_expression
from dormant.engine_core.inputs import check_model_name, shorten
from dormant.engine_core.job_types import reserved_job_type
from dormant.engine_core.model import (
    ACTIVITY_KINDS,
    CONTAINER_KINDS,
    EventKind,
    ExecutionListener,
    Flow,
    Node,
    NodeKind,
    ProcessDefinition,
)
from dormant.engine_core.task_attributes import static_problems

__all__ = ["assemble"]

K = NodeKind
E = EventKind

# Which event definitions each event kind runs. Error/escalation starts are added for
# event sub-process starts only (they catch what their parent scope throws).
_ALLOWED_EVENTS: Mapping[NodeKind, frozenset[EventKind]] = {
    K.START_EVENT: frozenset({E.NONE, E.MESSAGE, E.TIMER, E.SIGNAL}),
    K.END_EVENT: frozenset(
        {E.NONE, E.TERMINATE, E.ERROR, E.ESCALATION, E.MESSAGE, E.SIGNAL, E.COMPENSATE}
    ),
    K.INTERMEDIATE_CATCH_EVENT: frozenset({E.MESSAGE, E.TIMER, E.SIGNAL, E.LINK}),
    K.INTERMEDIATE_THROW_EVENT: frozenset(
        {E.NONE, E.MESSAGE, E.SIGNAL, E.ESCALATION, E.COMPENSATE, E.LINK}
    ),
    K.BOUNDARY_EVENT: frozenset(
        {E.TIMER, E.MESSAGE, E.SIGNAL, E.ERROR, E.ESCALATION, E.COMPENSATE}
    ),
}
_ESP_START_EVENTS = frozenset({E.MESSAGE, E.TIMER, E.SIGNAL, E.ERROR, E.ESCALATION})
_EBG_TARGET_EVENTS = frozenset({E.MESSAGE, E.TIMER, E.SIGNAL})


def _bad(message: str) -> InvalidModel:
    return InvalidModel(message)


def assemble(
    key: str,
    name: str | None,
    nodes: Iterable[Node],
    flows: Iterable[Flow],
    flow_scopes: Mapping[str, str | None] | None = None,
    execution_listeners: tuple[ExecutionListener, ...] = (),
) -> ProcessDefinition:
    """Derive the wiring, check every rule, and freeze the definition.

    ``flow_scopes`` maps a flow id to the container it was declared in (the reader
    knows it; the builder passes it too); a flow must stay inside that container.
    """
    node_list = list(nodes)
    flow_list = list(flows)
    _check_names(key, node_list)
    by_id: dict[str, Node] = {}
    for node in node_list:
        if node.id in by_id:
            raise _bad(f"process {key!r}: duplicate id {node.id!r}")
        by_id[node.id] = node
    flow_ids: set[str] = set()
    for flow in flow_list:
        if flow.id in by_id or flow.id in flow_ids:
            raise _bad(f"process {key!r}: duplicate id {flow.id!r}")
        flow_ids.add(flow.id)

    scopes = flow_scopes or {}
    incoming: dict[str, list[str]] = {n.id: [] for n in node_list}
    outgoing: dict[str, list[str]] = {n.id: [] for n in node_list}
    for flow in flow_list:
        _check_flow(key, flow, by_id, scopes)
        outgoing[flow.source].append(flow.id)
        incoming[flow.target].append(flow.id)

    boundaries: dict[str, list[str]] = {n.id: [] for n in node_list}
    children: dict[str | None, list[str]] = {None: []}
    for node in node_list:
        if node.parent is not None:
            parent = by_id.get(node.parent)
            if parent is None or parent.kind not in CONTAINER_KINDS:
                raise _bad(f"node {node.id!r}: its container {node.parent!r} is not a sub-process")
        children.setdefault(node.parent, []).append(node.id)
        if node.kind in CONTAINER_KINDS:
            children.setdefault(node.id, [])
        if node.kind is K.BOUNDARY_EVENT:
            _check_boundary(node, by_id)
            boundaries[node.attached_to or ""].append(node.id)
        elif node.attached_to is not None:
            raise _bad(f"node {node.id!r}: only a boundary event can be attached to an activity")

    final = {
        n.id: replace(
            n,
            incoming=tuple(incoming[n.id]),
            outgoing=tuple(outgoing[n.id]),
            boundaries=tuple(boundaries[n.id]),
        )
        for n in node_list
    }
    definition = ProcessDefinition(
        key=key,
        name=name,
        nodes=final,
        flows={f.id: f for f in flow_list},
        children={c: tuple(ids) for c, ids in children.items()},
        execution_listeners=execution_listeners,
    )
    for listener in execution_listeners:
        if not is_expression(listener.job_type):
            reserved = reserved_job_type(listener.job_type)
            if reserved is not None:
                raise _bad(f"process {key!r}: execution listener: {reserved}")
    for node in final.values():
        _check_node(definition, node)
    _check_scopes(definition)
    check_expressions(definition)
    return definition


def _check_names(key: str, nodes: list[Node]) -> None:
    """Every literal name the shell writes to a ``VARCHAR(255)`` column
    (persistence/tables.py) fits it. Refused here, first, in one line naming the element:
    a 300-character message name would otherwise deploy, and every start would fail at
    the insert -- a failed trigger whose retry can never succeed (issue 24, row 8). A
    name computed by FEEL is checked where it is evaluated
    (``expressions.non_empty_string``): an incident at the node."""
    check_model_name(key, "process id")
    for node in nodes:
        where = f"{node.kind} {shorten(node.id, 40)}"
        check_model_name(node.id, f"{where}: id")
        check_model_name(node.job_type, f"{where}: job type")
        check_model_name(node.called_process, f"{where}: called process id")
        check_model_name(node.decision_id, f"{where}: called decision id")
        if node.kind is K.USER_TASK:
            check_model_name(node.name, f"{where}: name")
        for event in node.events:
            check_model_name(event.message_name, f"{where}: message name")
            check_model_name(event.signal_name, f"{where}: signal name")


def _check_flow(
    key: str, flow: Flow, by_id: Mapping[str, Node], scopes: Mapping[str, str | None]
) -> None:
    for end, ref in (("sourceRef", flow.source), ("targetRef", flow.target)):
        if ref not in by_id:
            raise _bad(
                f"sequence flow {flow.id!r}: {end} {ref!r} is not a flow node of process {key!r}"
            )
    source, target = by_id[flow.source], by_id[flow.target]
    declared = scopes.get(flow.id, source.parent)
    if not source.parent == target.parent == declared:
        raise _bad(
            f"sequence flow {flow.id!r} crosses a sub-process boundary: {source.id!r} is in "
            f"{source.parent or 'the process'}, {target.id!r} in {target.parent or 'the process'}"
        )
    if target.kind is K.START_EVENT or target.kind is K.BOUNDARY_EVENT:
        raise _bad(
            f"sequence flow {flow.id!r}: a {target.kind} ({target.id!r}) takes no incoming flow"
        )
    if source.kind is K.END_EVENT:
        raise _bad(f"sequence flow {flow.id!r}: an end event ({source.id!r}) has no outgoing flow")


def _check_boundary(node: Node, by_id: Mapping[str, Node]) -> None:
    host = by_id.get(node.attached_to or "")
    if host is None:
        raise _bad(f"boundary event {node.id!r}: attachedToRef {node.attached_to!r} does not exist")
    if host.kind not in ACTIVITY_KINDS:
        raise _bad(
            f"boundary event {node.id!r}: attached to {host.id!r}, a {host.kind}, not an activity"
        )
    if host.parent != node.parent:
        raise _bad(f"boundary event {node.id!r}: not in the same scope as its activity {host.id!r}")


def _check_node(d: ProcessDefinition, node: Node) -> None:
    if len(node.events) > 1:
        raise UnsupportedElement(
            node.id,
            str(node.kind),
            node.name,
            "an event with several event definitions (multiple / parallel multiple)",
        )
    _check_event_kind(d, node)
    if node.default_flow is not None and node.default_flow not in node.outgoing:
        raise _bad(
            f"node {node.id!r}: default flow {node.default_flow!r} is not one of its outgoing flows"
        )
    if node.kind is K.SERVICE_TASK and not node.job_type:
        raise _bad(f"{node.kind} {node.id!r} has no job type (zeebe:taskDefinition type)")
    if node.kind is K.BUSINESS_RULE_TASK:
        if not (node.job_type or node.decision_id):
            raise _bad(
                f"businessRuleTask {node.id!r} has neither a called decision "
                "(zeebe:calledDecision decisionId) nor a job type (zeebe:taskDefinition type)"
            )
        if node.job_type and node.decision_id:
            raise _bad(
                f"businessRuleTask {node.id!r} has both a called decision and a job type; "
                "keep one (Camunda 8 accepts exactly one)"
            )
        if node.decision_id and not node.result_variable:
            raise _bad(
                f"businessRuleTask {node.id!r} calls decision {node.decision_id!r} without "
                "a resultVariable (zeebe:calledDecision resultVariable)"
            )
    if node.job_type and not is_expression(node.job_type):
        reserved = reserved_job_type(node.job_type)
        if reserved is not None:
            raise _bad(f"{node.kind} {node.id!r}: {reserved}")
    if node.task_listeners and node.kind is not K.USER_TASK:
        raise UnsupportedElement(
            node.id,
            str(node.kind),
            node.name,
            "zeebe:taskListeners run on user tasks only; on this element they would never run",
        )
    for listener in node.task_listeners:
        if not listener.job_type.lstrip().startswith("="):
            reserved = reserved_job_type(listener.job_type)
            if reserved is not None:
                raise _bad(f"userTask {node.id!r}: task listener: {reserved}")
    if node.kind is K.USER_TASK:
        problems = static_problems(node)
        if problems:
            raise _bad(f"userTask {node.id!r}: {problems[0]}")
    if node.kind is K.SEND_TASK and not node.job_type:
        raise _bad(f"sendTask {node.id!r} has no job type (zeebe:taskDefinition type)")
    if node.kind is K.SCRIPT_TASK and not (node.script or node.job_type):
        raise _bad(f"scriptTask {node.id!r} has no zeebe:script expression (nor a job type)")
    if node.kind is K.CALL_ACTIVITY and not node.called_process:
        raise _bad(
            f"callActivity {node.id!r} has no called process id (zeebe:calledElement processId)"
        )
    if node.kind is K.RECEIVE_TASK and not (node.events and node.event.message_name):
        raise _bad(f"receiveTask {node.id!r} has no message (messageRef)")
    for ev in node.events:
        _check_event(node, ev.kind, d)
    if node.retry_policy is not None:
        if node.retry_policy.attempts < 0:
            raise _bad(f"node {node.id!r}: dormant:retryPolicy attempts must be >= 0")
        if not node.retry_policy.backoff_seconds > 0:
            raise _bad(f"node {node.id!r}: dormant:retryPolicy backoff must be > 0")
    if node.loop is not None and not (node.loop.input_collection or node.loop.cardinality):
        raise _bad(
            f"node {node.id!r}: multi-instance needs an inputCollection or a loopCardinality"
        )
    if node.is_for_compensation and (node.incoming or node.outgoing):
        raise _bad(f"compensation handler {node.id!r} must have no sequence flows")
    if node.compensation_handler is not None:
        handler = d.nodes.get(node.compensation_handler)
        if handler is None or not handler.is_for_compensation:
            raise _bad(
                f"compensation boundary {node.id!r}: handler {node.compensation_handler!r} "
                'is not an activity with isForCompensation="true"'
            )
    if node.execution_listeners:
        _check_listeners(node)
    if node.kind is K.EVENT_BASED_GATEWAY:
        _check_event_based_gateway(d, node)
    if node.kind is K.EVENT_SUB_PROCESS and (node.incoming or node.outgoing):
        raise _bad(f"event sub-process {node.id!r} must have no sequence flows")


_GATEWAYS = frozenset(
    {K.EXCLUSIVE_GATEWAY, K.PARALLEL_GATEWAY, K.INCLUSIVE_GATEWAY, K.EVENT_BASED_GATEWAY}
)


def _listener_refusal(node: Node, event: str) -> str | None:
    """Why ``event`` listeners cannot sit on ``node``: Zeebe's limitations first
    (start events and boundary events have no start listeners, gateways and error end
    events no end listeners, compensation boundaries none), then what dormant does
    not run (the reason says which)."""
    kind, ev = node.kind, node.event.kind
    if event == "start" and kind in (K.START_EVENT, K.BOUNDARY_EVENT):
        return f"a {kind} has no start listeners (Zeebe); use the end listeners"
    if event == "end" and kind in _GATEWAYS:
        return "a gateway has no end listeners (Zeebe); use start listeners on what follows it"
    if event == "end" and kind is K.END_EVENT and ev is E.ERROR:
        return "an error end event has no end listeners (Zeebe); put them on the catch event"
    if kind is K.BOUNDARY_EVENT and ev is E.COMPENSATE:
        return "a compensation boundary event has no listeners (Zeebe); put them on its handler"
    return None


def _check_listeners(node: Node) -> None:
    for listener in node.execution_listeners:
        why = _listener_refusal(node, listener.event)
        if why is not None:
            raise UnsupportedElement(
                node.id,
                str(node.kind),
                node.name,
                f'zeebe:executionListener eventType="{listener.event}" '
                f"type={listener.job_type!r}: {why}",
            )
        if not is_expression(listener.job_type):
            reserved = reserved_job_type(listener.job_type)
            if reserved is not None:
                raise _bad(f"{node.kind} {node.id!r}: execution listener: {reserved}")


def _check_event_kind(d: ProcessDefinition, node: Node) -> None:
    allowed = _ALLOWED_EVENTS.get(node.kind)
    if allowed is None:
        return
    in_esp = node.parent is not None and d.nodes[node.parent].kind is K.EVENT_SUB_PROCESS
    if node.kind is K.START_EVENT and in_esp:
        allowed = _ESP_START_EVENTS
    kind = node.event.kind
    if kind not in allowed:
        where = " in an event sub-process" if in_esp else ""
        raise UnsupportedElement(
            node.id, str(node.kind), node.name, f"a {kind} {node.kind}{where} is not run"
        )


def _check_event(node: Node, kind: EventKind, d: ProcessDefinition) -> None:
    ev = node.event
    label = f"{node.kind} {node.id!r}"
    if kind is E.TIMER and (ev.timer is None or not ev.timer.value.strip()):
        raise _bad(f"{label}: timer with an empty value")
    if kind is E.MESSAGE and node.kind not in (
        K.END_EVENT,
        K.INTERMEDIATE_THROW_EVENT,
        K.SEND_TASK,
    ):
        if not ev.message_name:
            raise _bad(f"{label}: message has no name")
    if kind is E.MESSAGE and node.kind in (K.END_EVENT, K.INTERMEDIATE_THROW_EVENT):
        if not (ev.message_name or node.job_type):
            raise _bad(f"{label}: a message throw needs a message or a job type")
    if kind is E.MESSAGE and _subscribes_per_instance(node) and not ev.correlation_key:
        raise _bad(
            f"{label}: message {ev.message_name!r} has no correlation key "
            "(zeebe:subscription correlationKey on the bpmn:message)"
        )
    if kind is E.SIGNAL and not ev.signal_name:
        raise _bad(f"{label}: signal has no name")
    if kind is E.ERROR and node.kind is K.END_EVENT and not ev.error_code:
        raise _bad(f"{label}: an error end event needs an error with an errorCode")
    throws = node.kind in (K.END_EVENT, K.INTERMEDIATE_THROW_EVENT)
    if kind is E.ESCALATION and throws and not ev.escalation_code:
        raise _bad(f"{label}: an escalation throw needs an escalation with an escalationCode")
    if kind is E.LINK and not ev.link_name:
        raise _bad(f"{label}: link event has no name")
    if kind is E.COMPENSATE and ev.activity_ref is not None:
        target = d.nodes.get(ev.activity_ref)
        if target is None or target.kind not in ACTIVITY_KINDS:
            raise _bad(f"{label}: compensation activityRef {ev.activity_ref!r} is not an activity")


def _subscribes_per_instance(node: Node) -> bool:
    """A message wait of a running instance needs a key to find its instance; only a
    process-level message start (which creates the instance) does without."""
    if node.kind is K.START_EVENT:
        return node.parent is not None
    return node.kind in (K.INTERMEDIATE_CATCH_EVENT, K.BOUNDARY_EVENT, K.RECEIVE_TASK)


def _check_event_based_gateway(d: ProcessDefinition, node: Node) -> None:
    if len(node.outgoing) < 2:
        raise _bad(f"event-based gateway {node.id!r} needs at least two outgoing flows")
    for fid in node.outgoing:
        target = d.nodes[d.flows[fid].target]
        ok = target.kind is K.RECEIVE_TASK or (
            target.kind is K.INTERMEDIATE_CATCH_EVENT and target.event.kind in _EBG_TARGET_EVENTS
        )
        if target.listeners("start"):
            raise UnsupportedElement(
                target.id,
                str(target.kind),
                target.name,
                "zeebe:executionListener start listeners on an event after an event-based "
                f"gateway ({node.id!r}) are not run; put them on the gateway",
            )
        if not ok or len(target.incoming) != 1:
            raise _bad(
                f"event-based gateway {node.id!r}: flow {fid!r} must lead to a "
                "message/timer/signal "
                f"catch event or receive task with no other incoming flow, not {target.id!r}"
            )


def _check_ad_hoc(d: ProcessDefinition, node: Node, members: list[Node]) -> None:
    """Zeebe's constraints: at least one activity, no start or end event inside."""
    where = f"ad-hoc sub-process {node.id!r}"
    for n in members:
        if n.kind in (K.START_EVENT, K.END_EVENT):
            raise _bad(f"{where} must not contain start or end events ({n.kind} {n.id!r})")
    if not any(n.kind in ACTIVITY_KINDS for n in members):
        raise _bad(f"{where} needs at least one activity")
    if node.ad_hoc is None:
        raise _bad(f"{where} has no ad-hoc settings")


def _check_scopes(d: ProcessDefinition) -> None:
    for container, ids in d.children.items():
        members = [d.nodes[i] for i in ids]
        starts = [n for n in members if n.kind is K.START_EVENT]
        where = f"process {d.key!r}" if container is None else f"sub-process {container!r}"
        if container is None:
            if not starts:
                raise _bad(f"{where} has no start event")
        elif d.nodes[container].kind is K.AD_HOC_SUB_PROCESS:
            _check_ad_hoc(d, d.nodes[container], members)
        elif d.nodes[container].kind is K.SUB_PROCESS:
            none_starts = [n for n in starts if n.event.kind is E.NONE]
            if len(starts) != 1 or len(none_starts) != 1:
                raise _bad(f"{where} needs exactly one none start event")
        elif len(starts) != 1:
            raise _bad(f"event {where} needs exactly one start event")
        catches: dict[str, str] = {}
        for n in members:
            if n.kind is K.INTERMEDIATE_CATCH_EVENT and n.event.kind is E.LINK:
                name = n.event.link_name or ""
                if name in catches:
                    raise _bad(
                        f"{where}: link catch events {catches[name]!r} and {n.id!r} "
                        f"share the name {name!r}"
                    )
                catches[name] = n.id
        for n in members:
            if n.kind is K.INTERMEDIATE_THROW_EVENT and n.event.kind is E.LINK:
                if (n.event.link_name or "") not in catches:
                    raise _bad(
                        f"link throw {n.id!r}: no link catch named {n.event.link_name!r} in {where}"
                    )

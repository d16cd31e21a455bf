"""Read BPMN 2.0 XML (as bpmn.io / Camunda Modeler save it) into ProcessDefinitions.

Pure: takes the XML text, returns frozen definitions. The document is parsed with
defusedxml with DTDs forbidden outright: a BPMN file never needs one, and refusing it
closes entity expansion (billion laughs) and external-resource fetches in one rule.

Every flow node becomes a ``Node`` or refuses the model with ``UnsupportedElement``:
a skipped node would deploy a process whose tokens take paths its author never drew.
Structure and references are checked by ``validate.assemble``, shared with the builder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any
from xml.etree.ElementTree import Element, ParseError

import defusedxml  # type: ignore[import-untyped]
import defusedxml.ElementTree as SafeET  # type: ignore[import-untyped]

from dormant.engine_core.bpmn_extensions import (
    BPMN,
    ZEEBE,
    local,
    read_extensions,
    read_loop,
    truthy,
)
from dormant.engine_core.errors import InvalidModel, UnsupportedElement, shorten
from dormant.engine_core.inputs import check_model_name
from dormant.engine_core.model import (
    AdHocSpec,
    EventDefinition,
    EventKind,
    Flow,
    Node,
    NodeKind,
    ProcessDefinition,
    TimerKind,
    TimerSpec,
)
from dormant.engine_core.validate import assemble
from dormant.engine_core.xml_input import check_depth, model_text

__all__ = ["MAX_SCOPE_DEPTH", "read_bpmn"]

# Sub-processes (embedded and event) nested inside each other; deeper is refused at
# deploy with the element named, never a RecursionError (docs/limits.md, "Models").
MAX_SCOPE_DEPTH = 50

_NODE_KINDS: dict[str, NodeKind] = {
    k.value: k for k in NodeKind if k not in (NodeKind.EVENT_SUB_PROCESS,)
}
_EVENT_KINDS = {
    "messageEventDefinition": EventKind.MESSAGE,
    "timerEventDefinition": EventKind.TIMER,
    "signalEventDefinition": EventKind.SIGNAL,
    "errorEventDefinition": EventKind.ERROR,
    "escalationEventDefinition": EventKind.ESCALATION,
    "compensateEventDefinition": EventKind.COMPENSATE,
    "terminateEventDefinition": EventKind.TERMINATE,
    "linkEventDefinition": EventKind.LINK,
}
_REFUSED: dict[str, str] = {
    "transaction": "transactions (and cancel events) are not supported",
    "complexGateway": "complex gateways are not supported; use an inclusive gateway",
    "callChoreography": "choreographies are not executable",
    "subChoreography": "choreographies are not executable",
    "choreographyTask": "choreographies are not executable",
    "standardLoopCharacteristics": "standard loops are not supported; use multi-instance",
    "conditionalEventDefinition": "conditional events are not supported",
    "cancelEventDefinition": "cancel events are not supported (no transactions)",
    "eventDefinitionRef": "shared event definitions are not supported; define the event inline",
}
# Children of the process or a sub-process that carry no behaviour in Zeebe.
_IGNORED_IN_SCOPE = frozenset(
    {
        "laneSet",
        "textAnnotation",
        "association",
        "documentation",
        "extensionElements",
        "dataObject",
        "dataObjectReference",
        "dataStoreReference",
        "property",
        "group",
        "ioSpecification",
        "incoming",
        "outgoing",
        "multiInstanceLoopCharacteristics",
        "dataInputAssociation",
        "dataOutputAssociation",
        "category",
        "auditing",
        "monitoring",
    }
)
_SCOPE_TAGS = frozenset({"subProcess", "adHocSubProcess"})
_TIMER_TAGS = {
    "timeDuration": TimerKind.DURATION,
    "timeDate": TimerKind.DATE,
    "timeCycle": TimerKind.CYCLE,
}


@dataclass
class _Refs:
    """Definitions-level elements that event definitions point at, by id."""

    messages: dict[str, Element] = field(default_factory=dict)
    signals: dict[str, Element] = field(default_factory=dict)
    errors: dict[str, Element] = field(default_factory=dict)
    escalations: dict[str, Element] = field(default_factory=dict)


@dataclass
class _Draft:
    nodes: list[Node] = field(default_factory=list)
    flows: list[Flow] = field(default_factory=list)
    flow_scopes: dict[str, str | None] = field(default_factory=dict)
    associations: list[tuple[str, str]] = field(default_factory=list)


def read_bpmn(source: str | bytes) -> list[ProcessDefinition]:
    """Every executable process of a BPMN document, in document order."""
    root = _parse(source)
    if local(root) != (BPMN, "definitions"):
        raise InvalidModel(
            f"not a BPMN 2.0 document: the root element is {root.tag!r}, "
            f"expected {{{BPMN}}}definitions"
        )
    _check_unique_ids(root)
    refs = _Refs()
    processes: list[Element] = []
    for el in root:
        ns, name = local(el)
        if ns != BPMN:
            continue
        if name == "process":
            processes.append(el)
        elif name == "choreography":
            raise UnsupportedElement(
                el.get("id", "?"), name, el.get("name"), "choreographies are not executable"
            )
        else:
            table = {
                "message": refs.messages,
                "signal": refs.signals,
                "error": refs.errors,
                "escalation": refs.escalations,
            }.get(name)
            if table is not None and el.get("id"):
                table[el.get("id", "")] = el
    executable = [p for p in processes if truthy(p.get("isExecutable"), True)]
    if not executable:
        raise InvalidModel('the document has no executable process (isExecutable="true")')
    return [_read_process(p, refs) for p in executable]


def _parse(source: str | bytes) -> Element:
    """Bytes are decoded as their declaration says (``model_text``); a ``str`` is taken
    as already decoded (the parser then ignores its declared encoding)."""
    source = model_text(source)
    text = source.encode("utf-8")
    try:
        root: Element = SafeET.fromstring(
            source, forbid_dtd=True, forbid_entities=True, forbid_external=True
        )
    except ParseError as exc:
        line, column = getattr(exc, "position", (0, 0))
        reason = str(exc).split(": line ")[0]
        raise InvalidModel(f"malformed XML at line {line}, column {column}: {reason}") from exc
    except defusedxml.DefusedXmlException as exc:
        line, column = _position_of(text, rb"<!(DOCTYPE|ENTITY)")
        raise InvalidModel(
            f"refused XML at line {line}, column {column}: {type(exc).__name__} "
            "(DTDs, entities and external references are not allowed in BPMN files)"
        ) from exc
    check_depth(root)
    return root


def _position_of(text: bytes, pattern: bytes) -> tuple[int, int]:
    match = re.search(pattern, text)
    if match is None:
        return 1, 0
    before = text[: match.start()]
    return before.count(b"\n") + 1, match.start() - (before.rfind(b"\n") + 1)


def _check_unique_ids(root: Element) -> None:
    seen: set[str] = set()
    for el in root.iter():
        if local(el)[0] != BPMN or el.get("id") is None:
            continue
        eid = el.get("id", "")
        if eid in seen:
            raise InvalidModel(f"duplicate id {eid!r} ({local(el)[1]})")
        seen.add(eid)


def _read_process(process: Element, refs: _Refs) -> ProcessDefinition:
    key = process.get("id")
    if not key:
        raise InvalidModel("a process has no id")
    # The process's own extensions: its version tag and its execution listeners.
    extensions = read_extensions(process)
    tag = extensions.get("version_tag")
    check_model_name(tag, f"process {shorten(key, 40)}: version tag")
    draft = _Draft()
    _read_scope(process, None, refs, draft)
    nodes = _link_compensation(draft)
    definition = assemble(
        key,
        process.get("name"),
        nodes,
        draft.flows,
        draft.flow_scopes,
        execution_listeners=extensions.get("execution_listeners", ()),
    )
    return replace(definition, version_tag=tag) if tag else definition


def _read_scope(
    scope: Element, parent: str | None, refs: _Refs, draft: _Draft, depth: int = 0
) -> None:
    if depth > MAX_SCOPE_DEPTH:
        raise InvalidModel(
            f"sub-process {parent!r} nests sub-processes more than {MAX_SCOPE_DEPTH} "
            "levels deep; flatten the model or use a call activity"
        )
    for el in scope:
        ns, name = local(el)
        if ns != BPMN or (name in _IGNORED_IN_SCOPE and name != "association"):
            continue
        if name == "association":
            if el.get("sourceRef") and el.get("targetRef"):
                draft.associations.append((el.get("sourceRef", ""), el.get("targetRef", "")))
        elif name == "sequenceFlow":
            draft.flows.append(_read_flow(el))
            draft.flow_scopes[el.get("id", "")] = parent
        elif name in _NODE_KINDS:
            node = _read_node(el, name, parent, refs)
            draft.nodes.append(node)
            if name in _SCOPE_TAGS:
                _read_scope(el, node.id, refs, draft, depth + 1)
        elif name == "completionCondition" and local(scope)[1] == "adHocSubProcess":
            continue  # read with its ad-hoc sub-process (_ad_hoc)
        else:
            why = _REFUSED.get(name, f"bpmn:{name} is not a supported element")
            raise UnsupportedElement(el.get("id", "?"), name, el.get("name"), why)


def _read_flow(el: Element) -> Flow:
    fid = el.get("id")
    if not fid:
        raise InvalidModel("a sequence flow has no id")
    condition = None
    for child in el:
        if local(child) == (BPMN, "conditionExpression"):
            condition = (child.text or "").strip() or None
    return Flow(
        id=fid,
        source=el.get("sourceRef", ""),
        target=el.get("targetRef", ""),
        condition=condition,
        name=el.get("name"),
    )


def _read_node(el: Element, tag: str, parent: str | None, refs: _Refs) -> Node:
    nid = el.get("id")
    if not nid:
        raise InvalidModel(f"a {tag} has no id")
    name = el.get("name")
    kind = _NODE_KINDS[tag]
    if kind is NodeKind.SUB_PROCESS and truthy(el.get("triggeredByEvent"), False):
        kind = NodeKind.EVENT_SUB_PROCESS
    if tag == "eventBasedGateway" and (
        truthy(el.get("instantiate"), False)
        or el.get("eventGatewayType", "Exclusive") != "Exclusive"
    ):
        raise UnsupportedElement(
            nid, tag, name, "instantiating or parallel event-based gateways are not supported"
        )
    if truthy(el.get("parallelMultiple"), False):
        raise UnsupportedElement(nid, tag, name, "parallel multiple events are not supported")
    fields: dict[str, Any] = read_extensions(el)
    events: list[EventDefinition] = []
    for child in el:
        cns, cname = local(child)
        if cns != BPMN:
            continue
        if cname in _REFUSED:
            raise UnsupportedElement(nid, tag, name, _REFUSED[cname])
        if cname in _EVENT_KINDS:
            events.append(_read_event(nid, _EVENT_KINDS[cname], child, refs))
        elif cname == "multiInstanceLoopCharacteristics":
            fields["loop"] = read_loop(el, child)
    if len(events) > 1:
        raise UnsupportedElement(
            nid, tag, name, "an event with several event definitions (multiple) is not supported"
        )
    if tag == "adHocSubProcess":
        fields["ad_hoc"] = _ad_hoc(el, fields)
    elif "ad_hoc" in fields:
        raise UnsupportedElement(nid, tag, name, "zeebe:adHoc belongs on a bpmn:adHocSubProcess")
    if tag in ("receiveTask", "sendTask") and el.get("messageRef"):
        # The task's message is its one event definition: the engine addresses waits by index.
        events.append(_message(nid, el.get("messageRef", ""), refs))
    return Node(
        id=nid,
        kind=kind,
        name=name,
        parent=parent,
        events=tuple(events),
        default_flow=el.get("default") or None,
        attached_to=el.get("attachedToRef") if tag == "boundaryEvent" else None,
        cancel_activity=truthy(el.get("cancelActivity"), True),
        is_interrupting=truthy(el.get("isInterrupting"), True),
        is_for_compensation=truthy(el.get("isForCompensation"), False),
        **fields,
    )


def _ad_hoc(el: Element, fields: dict[str, Any]) -> AdHocSpec:
    """The settings of both implementations: Zeebe's own ("BPMN"), and the job worker's
    (a ``zeebe:taskDefinition``: a job decides what runs and when it is done, so a
    completion condition or an active elements collection beside it is refused).
    Sequential ordering would run differently, so is refused."""
    nid, name = el.get("id", "?"), el.get("name")
    spec: AdHocSpec = fields.get("ad_hoc") or AdHocSpec()
    if fields.get("job_type"):
        clash = "activeElementsCollection" if spec.active_elements else None
        if any(local(c) == (BPMN, "completionCondition") for c in el):
            clash = "completionCondition"
        if clash is not None:
            raise UnsupportedElement(
                nid,
                "adHocSubProcess",
                name,
                f"{clash} on the job-worker implementation (zeebe:taskDefinition) is not "
                "supported: its job's result names the elements to activate and says when "
                "the sub-process is done",
            )
    ordering = (el.get("ordering") or "Parallel").strip()
    if ordering != "Parallel":
        raise UnsupportedElement(
            nid, "adHocSubProcess", name, f'ordering="{ordering}" is not supported (Parallel only)'
        )
    condition = None
    for child in el:
        if local(child) == (BPMN, "completionCondition"):
            condition = (child.text or "").strip() or None
    return replace(
        spec,
        completion_condition=condition,
        cancel_remaining=truthy(el.get("cancelRemainingInstances"), True),
    )


def _ref(nid: str, what: str, ref: str, table: dict[str, Element]) -> Element:
    target = table.get(ref)
    if target is None:
        raise InvalidModel(f"element {nid!r}: {what}Ref {ref!r} does not name a bpmn:{what}")
    return target


def _message(nid: str, ref: str, refs: _Refs) -> EventDefinition:
    msg = _ref(nid, "message", ref, refs.messages)
    key = None
    for ext in msg:
        if local(ext) == (BPMN, "extensionElements"):
            for sub in ext:
                if local(sub) == (ZEEBE, "subscription"):
                    key = sub.get("correlationKey") or None
    return EventDefinition(
        EventKind.MESSAGE, message_name=msg.get("name") or None, correlation_key=key
    )


def _read_event(nid: str, kind: EventKind, el: Element, refs: _Refs) -> EventDefinition:
    if kind is EventKind.MESSAGE:
        ref = el.get("messageRef")
        return _message(nid, ref, refs) if ref else EventDefinition(kind)
    if kind is EventKind.TIMER:
        return EventDefinition(kind, timer=_timer(nid, el))
    if kind is EventKind.SIGNAL:
        ref = el.get("signalRef")
        if not ref:
            raise InvalidModel(f"element {nid!r}: signal event without a signalRef")
        return EventDefinition(
            kind, signal_name=_ref(nid, "signal", ref, refs.signals).get("name") or None
        )
    if kind is EventKind.ERROR:
        ref = el.get("errorRef")
        code = _ref(nid, "error", ref, refs.errors).get("errorCode") or None if ref else None
        return EventDefinition(kind, error_code=code)
    if kind is EventKind.ESCALATION:
        ref = el.get("escalationRef")
        esc = (
            _ref(nid, "escalation", ref, refs.escalations).get("escalationCode") or None
            if ref
            else None
        )
        return EventDefinition(kind, escalation_code=esc)
    if kind is EventKind.COMPENSATE:
        return EventDefinition(
            kind,
            activity_ref=el.get("activityRef") or None,
            wait_for_completion=truthy(el.get("waitForCompletion"), True),
        )
    if kind is EventKind.LINK:
        return EventDefinition(kind, link_name=el.get("name") or None)
    return EventDefinition(kind)


def _timer(nid: str, el: Element) -> TimerSpec:
    specs = [
        TimerSpec(_TIMER_TAGS[local(c)[1]], (c.text or "").strip())
        for c in el
        if local(c)[0] == BPMN and local(c)[1] in _TIMER_TAGS
    ]
    if len(specs) != 1 or not specs[0].value:
        raise InvalidModel(
            f"element {nid!r}: a timer needs exactly one non-empty "
            "timeDuration, timeDate or timeCycle"
        )
    return specs[0]


def _link_compensation(draft: _Draft) -> list[Node]:
    """Point each compensation boundary at the handler its association leads to."""
    by_id = {n.id: n for n in draft.nodes}
    handlers: dict[str, str] = {}
    for source, target in draft.associations:
        node = by_id.get(source)
        if (
            node is not None
            and node.kind is NodeKind.BOUNDARY_EVENT
            and node.event.kind is EventKind.COMPENSATE
        ):
            handlers[source] = target
    out = []
    for n in draft.nodes:
        if n.kind is NodeKind.BOUNDARY_EVENT and n.event.kind is EventKind.COMPENSATE:
            if n.id not in handlers:
                raise InvalidModel(
                    f"compensation boundary event {n.id!r} has no association to a handler"
                )
            n = replace(n, compensation_handler=handlers[n.id])
        out.append(n)
    return out

"""The vendor extension elements of one BPMN element: Camunda 8 (Zeebe) and dormant's own.

Each known extension maps onto ``Node`` fields; an extension that would change how the
element behaves and that dormant does not run (listeners, anything in the
Zeebe namespace we have not read) refuses the whole model. Silently dropping one would
deploy a process that runs differently from what its author drew.
Extensions of other tools (test-case annotations, modeler templates) carry no behaviour
and are ignored.
"""

from __future__ import annotations

from typing import Any
from xml.etree.ElementTree import Element

import isodate

from dormant.engine_core.errors import InvalidModel, UnsupportedElement
from dormant.engine_core.model import (
    AdHocSpec,
    ExecutionListener,
    IoMapping,
    LoopSpec,
    RetryPolicy,
    TaskListener,
)
from dormant.engine_core.task_attributes import listener_event

__all__ = ["BPMN", "DORMANT", "ZEEBE", "local", "read_extensions", "read_loop", "truthy"]

BPMN = "http://www.omg.org/spec/BPMN/20100524/MODEL"
ZEEBE = "http://camunda.org/schema/zeebe/1.0"
DORMANT = "http://dormant.dev/schema/1.0"

# Zeebe extensions that only feed other tools (embedded form documents, modeler
# properties, linked resources): no behaviour dormant models.
_ZEEBE_IGNORED = frozenset({"properties", "userTaskForm", "linkedResources"})

# The user-task elements: each attribute dormant reads -> the Node field it fills.
# An attribute not listed here is refused, never dropped (a newer Camunda attribute
# would otherwise be silently ignored).
_USER_TASK_ATTRIBUTES: dict[str, dict[str, str]] = {
    "assignmentDefinition": {
        "assignee": "assignee",
        "candidateUsers": "candidate_users",
        "candidateGroups": "candidate_groups",
    },
    "taskSchedule": {"dueDate": "due_date", "followUpDate": "follow_up_date"},
    "priorityDefinition": {"priority": "priority"},
    "formDefinition": {
        "formKey": "form_key",
        "formId": "form_id",
        "externalReference": "external_reference",
    },
    # The marker of a Camunda user task (without it Camunda runs a job-worker user
    # task, a job of type io.camunda.zeebe:userTask); dormant holds both the same way.
    "userTask": {},
}
# Attributes that carry no behaviour of their own.
_FORM_BINDING = ("bindingType", "versionTag")


def local(element: Element) -> tuple[str, str]:
    """(namespace, local name) of an element: namespaces are matched by URI, never prefix."""
    tag = element.tag
    if tag.startswith("{"):
        ns, _, name = tag[1:].partition("}")
        return ns, name
    return "", tag


def truthy(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    return value.strip().lower() == "true"


def _refuse(host: Element, why: str) -> UnsupportedElement:
    return UnsupportedElement(host.get("id", "?"), local(host)[1], host.get("name"), why)


def _child_text(el: Element, name: str) -> str | None:
    for child in el:
        if local(child) == (ZEEBE, name):
            return (child.text or "").strip()
    return None


def read_extensions(host: Element) -> dict[str, Any]:
    """Node fields taken from ``host``'s ``extensionElements``."""
    fields: dict[str, Any] = {}
    for ext in host:
        if local(ext) != (BPMN, "extensionElements"):
            continue
        for el in ext:
            ns, name = local(el)
            if ns == ZEEBE:
                _read_zeebe(host, el, name, fields)
            elif ns == DORMANT:
                _read_dormant(host, el, name, fields)
    return fields


def _read_zeebe(host: Element, el: Element, name: str, fields: dict[str, Any]) -> None:
    hid = host.get("id", "?")
    if name in _ZEEBE_IGNORED:
        return
    if name == "taskDefinition":
        # Attributes since Zeebe 1.0; child elements in some hand-written older models.
        fields["job_type"] = el.get("type") or _child_text(el, "type") or None
        fields["job_retries"] = el.get("retries") or _child_text(el, "retries") or None
    elif name == "taskHeaders":
        headers = []
        for h in el:
            if local(h) == (ZEEBE, "header"):
                if not h.get("key"):
                    raise InvalidModel(f"element {hid!r}: zeebe:header without a key")
                headers.append((h.get("key", ""), h.get("value", "")))
        fields["task_headers"] = tuple(headers)
    elif name == "script":
        fields["script"] = el.get("expression") or None
        fields["result_variable"] = el.get("resultVariable") or None
    elif name == "ioMapping":
        inputs: list[IoMapping] = []
        outputs: list[IoMapping] = []
        for m in el:
            kind = local(m)[1]
            if kind not in ("input", "output"):
                continue
            target = m.get("target")
            if not target:
                raise InvalidModel(f"element {hid!r}: zeebe:{kind} without a target")
            mapping = IoMapping(source=m.get("source") or "=null", target=target)
            (inputs if kind == "input" else outputs).append(mapping)
        fields["inputs"], fields["outputs"] = tuple(inputs), tuple(outputs)
    elif name == "calledDecision":
        # The decision is looked up when the task runs, by its binding (Camunda 8), so
        # a model may be deployed before its .dmn; running it without one is an incident.
        fields["decision_binding"], fields["decision_version_tag"] = _binding(host, el, name)
        fields["decision_id"] = el.get("decisionId") or None
        fields["result_variable"] = el.get("resultVariable") or None
    elif name == "calledElement":
        fields["called_binding"], fields["called_version_tag"] = _binding(host, el, name)
        fields["called_process"] = el.get("processId") or None
        fields["propagate_all_child_variables"] = truthy(el.get("propagateAllChildVariables"), True)
        fields["propagate_all_parent_variables"] = truthy(
            el.get("propagateAllParentVariables"), True
        )
    elif name in _USER_TASK_ATTRIBUTES:
        _read_user_task(host, el, name, fields)
    elif name == "taskListeners":
        fields["task_listeners"] = _read_task_listeners(host, el)
    elif name == "executionListeners":
        fields["execution_listeners"] = _execution_listeners(host, el)
    elif name == "adHoc":
        collection = (el.get("outputCollection") or "").strip() or None
        element = (el.get("outputElement") or "").strip() or None
        if (collection is None) != (element is None):
            raise _refuse(
                host,
                "zeebe:adHoc outputCollection and outputElement go together (the list to "
                "collect into and what each completed inner element adds to it)",
            )
        fields["ad_hoc"] = AdHocSpec(
            active_elements=el.get("activeElementsCollection") or None,
            output_collection=collection,
            output_element=element,
        )
    elif name == "versionTag":
        if local(host)[1] == "process":  # metadata anywhere else
            fields["version_tag"] = (el.get("value") or "").strip() or None
    elif name in ("loopCharacteristics", "subscription"):
        return  # read with their BPMN parent (multi-instance, message)
    else:
        raise _refuse(host, f"zeebe:{name} is not supported")


def _own_attributes(el: Element) -> list[str]:
    """The attributes of ``el`` in no namespace or Zeebe's (another tool's are its own)."""
    out = []
    for attr in el.attrib:
        if not attr.startswith("{") or attr.startswith("{" + ZEEBE + "}"):
            out.append(attr.rpartition("}")[2])
    return out


def _read_user_task(host: Element, el: Element, name: str, fields: dict[str, Any]) -> None:
    known = _USER_TASK_ATTRIBUTES[name]
    for attr in _own_attributes(el):
        if name == "formDefinition" and attr in _FORM_BINDING:
            continue
        if attr not in known:
            raise _refuse(host, f"zeebe:{name} attribute {attr!r} is not supported")
    if name == "formDefinition":
        # Camunda 8.6 form binding: the latest deployed form, like every other binding.
        binding = (el.get("bindingType") or "latest").strip()
        if binding != "latest":
            raise _refuse(
                host,
                f'zeebe:formDefinition bindingType="{binding}" is not supported: dormant '
                'only records the form (bindingType="latest")',
            )
        given = [a for a in ("formKey", "formId", "externalReference") if el.get(a)]
        if len(given) > 1:
            raise InvalidModel(
                f"element {host.get('id', '?')!r}: zeebe:formDefinition sets "
                f"{' and '.join(given)}; Camunda allows one of formKey, formId, "
                "externalReference"
            )
    for attr, field in known.items():
        value = el.get(attr)
        if value is not None and value.strip():
            fields[field] = value


def _read_task_listeners(host: Element, el: Element) -> tuple[TaskListener, ...]:
    listeners = []
    for child in el:
        ns, kind = local(child)
        if ns != ZEEBE or kind != "taskListener":
            raise _refuse(host, f"zeebe:taskListeners holds {kind!r}, not a zeebe:taskListener")
        for attr in _own_attributes(child):
            if attr not in ("eventType", "type", "retries"):
                raise _refuse(host, f"zeebe:taskListener attribute {attr!r} is not supported")
        raw = child.get("eventType") or ""
        event = listener_event(raw)
        if event is None:
            raise _refuse(
                host,
                f"zeebe:taskListener eventType={raw!r} is not run: dormant runs "
                "create, assign, update and complete listeners (or their 8.7 names creating, "
                "assigning, updating, completing)",
            )
        job_type = (child.get("type") or "").strip()
        if not job_type:
            raise InvalidModel(
                f"element {host.get('id', '?')!r}: zeebe:taskListener eventType={raw!r} "
                "has no type (the job type of the listener)"
            )
        retries = (child.get("retries") or "").strip() or None
        listeners.append(TaskListener(event=event, job_type=job_type, retries=retries))
    return tuple(listeners)


def _execution_listeners(host: Element, el: Element) -> tuple[ExecutionListener, ...]:
    """Zeebe's rules: ``eventType`` start or end, a non-empty ``type``, and no two
    listeners with the same event type and job type on one element."""
    hid = host.get("id", "?")
    listeners: list[ExecutionListener] = []
    for child in el:
        if local(child) != (ZEEBE, "executionListener"):
            continue
        event = (child.get("eventType") or "").strip()
        if event not in ("start", "end"):
            raise InvalidModel(
                f"element {hid!r}: zeebe:executionListener eventType {event!r} is not "
                '"start" or "end"'
            )
        job_type = (child.get("type") or "").strip()
        if not job_type:
            raise InvalidModel(f"element {hid!r}: zeebe:executionListener without a type")
        if any(x.event == event and x.job_type == job_type for x in listeners):
            raise InvalidModel(
                f"element {hid!r}: two {event} execution listeners of type {job_type!r} "
                "(Zeebe requires each eventType and type pair to be unique)"
            )
        retries = (child.get("retries") or "").strip() or None
        listeners.append(ExecutionListener(event, job_type, retries))
    return tuple(listeners)


_BINDINGS = ("latest", "deployment", "versionTag")


def _binding(host: Element, el: Element, name: str) -> tuple[str, str | None]:
    """``bindingType`` (Camunda 8.6+: latest, deployment, versionTag) and, for
    versionTag, the tag; any other value is refused rather than run as "latest"."""
    binding = (el.get("bindingType") or "latest").strip()
    if binding not in _BINDINGS:
        raise _refuse(
            host,
            f'zeebe:{name} bindingType="{binding}" is not supported '
            "(latest, deployment or versionTag)",
        )
    if binding != "versionTag":
        return binding, None
    tag = (el.get("versionTag") or "").strip()
    if not tag:
        raise InvalidModel(
            f'element {host.get("id", "?")!r}: zeebe:{name} bindingType="versionTag" '
            "needs a versionTag attribute"
        )
    return binding, tag


# A retry is scheduled at now + backoff: a backoff of millions of days would be a
# date past year 9999 when the incident is raised. A year is more than any operator
# waits for an automatic retry.
MAX_RETRY_BACKOFF_SECONDS = 366 * 24 * 3600.0


def _read_dormant(host: Element, el: Element, name: str, fields: dict[str, Any]) -> None:
    hid = host.get("id", "?")
    if name != "retryPolicy":
        raise InvalidModel(f"element {hid!r}: unknown dormant extension dormant:{name}")
    try:
        attempts = int(el.get("attempts", ""))
    except ValueError:
        raise InvalidModel(
            f"element {hid!r}: dormant:retryPolicy attempts {el.get('attempts')!r} "
            "is not an integer"
        ) from None
    text = el.get("backoff", "")
    try:
        backoff = isodate.parse_duration(text)
        seconds = float(backoff.total_seconds())
    except (isodate.ISO8601Error, ValueError, AttributeError, TypeError, OverflowError):
        raise InvalidModel(
            f"element {hid!r}: dormant:retryPolicy backoff {text!r} is not an ISO 8601 duration "
            "(e.g. PT10S)"
        ) from None
    if attempts < 0 or not 0 < seconds <= MAX_RETRY_BACKOFF_SECONDS:
        raise InvalidModel(
            f"element {hid!r}: dormant:retryPolicy needs attempts >= 0 and a backoff above "
            f"zero and at most P366D (got attempts={attempts}, backoff={text!r})"
        )
    fields["retry_policy"] = RetryPolicy(attempts=attempts, backoff_seconds=seconds)


def read_loop(host: Element, mi: Element) -> LoopSpec:
    """``multiInstanceLoopCharacteristics`` with its Zeebe collection settings."""
    spec: dict[str, str | None] = {}
    cardinality = condition = None
    for child in mi:
        ns, name = local(child)
        if (ns, name) == (BPMN, "loopCardinality"):
            cardinality = (child.text or "").strip() or None
        elif (ns, name) == (BPMN, "completionCondition"):
            condition = (child.text or "").strip() or None
        elif (ns, name) == (BPMN, "extensionElements"):
            for el in child:
                if local(el) == (ZEEBE, "loopCharacteristics"):
                    spec = {
                        k: (el.get(k) or None)
                        for k in (
                            "inputCollection",
                            "inputElement",
                            "outputCollection",
                            "outputElement",
                        )
                    }
    return LoopSpec(
        sequential=truthy(mi.get("isSequential"), False),
        input_collection=spec.get("inputCollection"),
        input_element=spec.get("inputElement"),
        output_collection=spec.get("outputCollection"),
        output_element=spec.get("outputElement"),
        cardinality=cardinality,
        completion_condition=condition,
    )

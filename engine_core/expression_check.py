"""Every FEEL expression of a model is parsed at deploy, as Camunda 8 does.

A syntax error found at run time would park every instance that reaches the element
in an incident; found at deploy, it refuses the file with the element, the expression
and the position named, before any instance can trip on it.
"""

from __future__ import annotations

from collections.abc import Iterator

from dormant.engine_core.errors import ExpressionError, InvalidModel
from dormant.engine_core.expressions import feel_source, is_expression
from dormant.engine_core.feel import compile_expression
from dormant.engine_core.model import ProcessDefinition

__all__ = ["check_expressions"]


def _expressions(definition: ProcessDefinition) -> Iterator[tuple[str, str, str]]:
    """(element id, what, FEEL source without '=') for every expression of the model."""

    def attribute(element: str, what: str, raw: str | None) -> Iterator[tuple[str, str, str]]:
        if raw is not None and is_expression(raw):
            yield element, what, feel_source(raw)

    def always(element: str, what: str, raw: str | None) -> Iterator[tuple[str, str, str]]:
        if raw is not None and raw.strip():
            yield element, what, feel_source(raw)

    for node in definition.nodes.values():
        nid = node.id
        yield from attribute(nid, "job type", node.job_type)
        yield from attribute(nid, "job retries", node.job_retries)
        yield from attribute(nid, "script", node.script)
        yield from attribute(nid, "assignee", node.assignee)
        yield from attribute(nid, "candidate groups", node.candidate_groups)
        yield from attribute(nid, "candidate users", node.candidate_users)
        yield from attribute(nid, "due date", node.due_date)
        yield from attribute(nid, "follow-up date", node.follow_up_date)
        yield from attribute(nid, "priority", node.priority)
        yield from attribute(nid, "form key", node.form_key)
        yield from attribute(nid, "form id", node.form_id)
        yield from attribute(nid, "external form reference", node.external_reference)
        for task_listener in node.task_listeners:
            what = f"{task_listener.event} task listener"
            yield from attribute(nid, f"{what} type", task_listener.job_type)
            yield from attribute(nid, f"{what} retries", task_listener.retries)
        yield from attribute(nid, "called process", node.called_process)
        yield from attribute(nid, "called decision", node.decision_id)
        for mapping in (*node.inputs, *node.outputs):
            yield from attribute(nid, f"mapping to {mapping.target!r}", mapping.source)
        for event in node.events:
            yield from attribute(nid, "message name", event.message_name)
            yield from always(nid, "correlation key", event.correlation_key)
            yield from attribute(nid, "signal name", event.signal_name)
            if event.timer is not None:
                yield from attribute(nid, "timer", event.timer.value)
        if node.loop is not None:
            yield from always(nid, "input collection", node.loop.input_collection)
            yield from always(nid, "output element", node.loop.output_element)
            yield from always(nid, "loop cardinality", node.loop.cardinality)
            yield from always(nid, "completion condition", node.loop.completion_condition)
        for listener in node.execution_listeners:
            what = f"{listener.event} execution listener"
            yield from attribute(nid, f"{what} type", listener.job_type)
            yield from attribute(nid, f"{what} retries", listener.retries)
        if node.ad_hoc is not None:
            yield from always(nid, "activeElementsCollection", node.ad_hoc.active_elements)
            yield from always(nid, "completionCondition", node.ad_hoc.completion_condition)
            yield from always(nid, "outputElement", node.ad_hoc.output_element)
    for listener in definition.execution_listeners:
        what = f"process {listener.event} execution listener"
        yield from attribute(definition.key, f"{what} type", listener.job_type)
        yield from attribute(definition.key, f"{what} retries", listener.retries)
    for flow in definition.flows.values():
        yield from always(flow.id, "condition", flow.condition)


def check_expressions(definition: ProcessDefinition) -> None:
    for element, what, source in _expressions(definition):
        try:
            compile_expression(source)
        except ExpressionError as exc:
            raise InvalidModel(
                f"process {definition.key!r}: element {element!r}: the {what} is not valid "
                f"FEEL: {exc}"
            ) from exc

"""Code-first processes: a ``ProcessBuilder`` that yields the same ``ProcessDefinition``
the XML reader would for the same drawing.

It exists for tests and for users who would rather not draw; it is deliberately a thin
recorder of nodes and flows, because ``build()`` hands everything to
``validate.assemble`` — the exact path the reader takes — so a builder-made process can
never be something a BPMN file could not express or would be refused for.

    b = ProcessBuilder("order", name="Order")
    b.start_event("start").service_task("charge", job_type="charge-card")
    b.exclusive_gateway("ok?", default="to_fail")
    b.sequence("start", "charge", "ok?")
    b.flow("ok?", "ship", condition="=paid = true")
    with b.sub_process("ship"):
        b.start_event("s").end_event("e").sequence("s", "e")
    definition = b.build()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from itertools import pairwise
from typing import Any, Self

from dormant.engine_core.errors import InvalidModel
from dormant.engine_core.model import (
    AdHocSpec,
    EventDefinition,
    EventKind,
    ExecutionListener,
    Flow,
    Node,
    NodeKind,
    ProcessDefinition,
    TimerKind,
    TimerSpec,
)
from dormant.engine_core.validate import assemble

__all__ = [
    "ProcessBuilder",
    "compensate",
    "error",
    "escalation",
    "link",
    "message",
    "signal",
    "terminate",
    "timer",
]


# Event definitions, named as in BPMN; each returns what the reader builds for that XML.
def message(name: str, correlation_key: str | None = None) -> EventDefinition:
    return EventDefinition(EventKind.MESSAGE, message_name=name, correlation_key=correlation_key)


def timer(value: str, kind: TimerKind = TimerKind.DURATION) -> EventDefinition:
    return EventDefinition(EventKind.TIMER, timer=TimerSpec(kind, value))


def signal(name: str) -> EventDefinition:
    return EventDefinition(EventKind.SIGNAL, signal_name=name)


def error(code: str | None = None) -> EventDefinition:
    return EventDefinition(EventKind.ERROR, error_code=code)


def escalation(code: str | None = None) -> EventDefinition:
    return EventDefinition(EventKind.ESCALATION, escalation_code=code)


def compensate(activity: str | None = None, wait_for_completion: bool = True) -> EventDefinition:
    return EventDefinition(
        EventKind.COMPENSATE, activity_ref=activity, wait_for_completion=wait_for_completion
    )


def link(name: str) -> EventDefinition:
    return EventDefinition(EventKind.LINK, link_name=name)


def terminate() -> EventDefinition:
    return EventDefinition(EventKind.TERMINATE)


def _events(event: EventDefinition | None) -> tuple[EventDefinition, ...]:
    return () if event is None or event.kind is EventKind.NONE else (event,)


class ProcessBuilder:
    """Records nodes and flows in call order (= document order) under the open container."""

    def __init__(
        self,
        key: str,
        name: str | None = None,
        execution_listeners: tuple[ExecutionListener, ...] = (),
    ) -> None:
        self.key = key
        self.name = name
        self.execution_listeners = execution_listeners
        self._nodes: dict[str, Node] = {}
        self._flows: list[Flow] = []
        self._scopes: dict[str, str | None] = {}
        self._stack: list[str] = []

    # -- generic --------------------------------------------------------------------

    def node(self, kind: NodeKind, id: str, **fields: Any) -> Self:
        """Add any node; ``fields`` are ``Node`` fields (``incoming``/``outgoing`` are derived)."""
        if id in self._nodes:
            raise InvalidModel(f"process {self.key!r}: duplicate id {id!r}")
        parent = self._stack[-1] if self._stack else None
        self._nodes[id] = Node(id=id, kind=kind, parent=parent, **fields)
        return self

    def flow(
        self,
        source: str,
        target: str,
        id: str | None = None,
        condition: str | None = None,
        default: bool = False,
        name: str | None = None,
    ) -> Self:
        """A sequence flow; ``default=True`` makes it the source's default flow."""
        fid = id or self._flow_id(source, target)
        self._flows.append(Flow(fid, source, target, condition=condition, name=name))
        self._scopes[fid] = self._stack[-1] if self._stack else None
        if default:
            node = self._nodes.get(source)
            if node is None:
                raise InvalidModel(f"flow {fid!r}: default flow of unknown node {source!r}")
            self._nodes[source] = replace(node, default_flow=fid)
        return self

    def sequence(self, *ids: str) -> Self:
        """Link consecutive nodes with unconditional flows."""
        for source, target in pairwise(ids):
            self.flow(source, target)
        return self

    def build(self) -> ProcessDefinition:
        if self._stack:
            raise InvalidModel(f"process {self.key!r}: sub-process {self._stack[-1]!r} still open")
        return assemble(
            self.key,
            self.name,
            self._nodes.values(),
            self._flows,
            self._scopes,
            execution_listeners=self.execution_listeners,
        )

    def _flow_id(self, source: str, target: str) -> str:
        base = f"{source}->{target}"
        taken = {f.id for f in self._flows}
        fid, n = base, 1
        while fid in taken:
            n += 1
            fid = f"{base}#{n}"
        return fid

    # -- events ---------------------------------------------------------------------

    def start_event(self, id: str, event: EventDefinition | None = None, **fields: Any) -> Self:
        return self.node(NodeKind.START_EVENT, id, events=_events(event), **fields)

    def end_event(self, id: str, event: EventDefinition | None = None, **fields: Any) -> Self:
        return self.node(NodeKind.END_EVENT, id, events=_events(event), **fields)

    def intermediate_catch_event(self, id: str, event: EventDefinition, **fields: Any) -> Self:
        return self.node(NodeKind.INTERMEDIATE_CATCH_EVENT, id, events=_events(event), **fields)

    def intermediate_throw_event(
        self, id: str, event: EventDefinition | None = None, **fields: Any
    ) -> Self:
        return self.node(NodeKind.INTERMEDIATE_THROW_EVENT, id, events=_events(event), **fields)

    def boundary_event(
        self,
        id: str,
        attached_to: str,
        event: EventDefinition,
        cancel_activity: bool = True,
        **fields: Any,
    ) -> Self:
        return self.node(
            NodeKind.BOUNDARY_EVENT,
            id,
            attached_to=attached_to,
            events=_events(event),
            cancel_activity=cancel_activity,
            **fields,
        )

    # -- activities -----------------------------------------------------------------

    def task(self, id: str, **fields: Any) -> Self:
        return self.node(NodeKind.TASK, id, **fields)

    def manual_task(self, id: str, **fields: Any) -> Self:
        return self.node(NodeKind.MANUAL_TASK, id, **fields)

    def user_task(self, id: str, **fields: Any) -> Self:
        return self.node(NodeKind.USER_TASK, id, **fields)

    def service_task(self, id: str, job_type: str, **fields: Any) -> Self:
        return self.node(NodeKind.SERVICE_TASK, id, job_type=job_type, **fields)

    def send_task(self, id: str, job_type: str, **fields: Any) -> Self:
        return self.node(NodeKind.SEND_TASK, id, job_type=job_type, **fields)

    def business_rule_task(self, id: str, job_type: str | None = None, **fields: Any) -> Self:
        """A job (``job_type``) or a called decision (``decision_id``, ``result_variable``)."""
        return self.node(NodeKind.BUSINESS_RULE_TASK, id, job_type=job_type, **fields)

    def script_task(
        self, id: str, script: str, result_variable: str | None = None, **fields: Any
    ) -> Self:
        return self.node(
            NodeKind.SCRIPT_TASK, id, script=script, result_variable=result_variable, **fields
        )

    def receive_task(
        self, id: str, message_name: str, correlation_key: str | None = None, **fields: Any
    ) -> Self:
        return self.node(
            NodeKind.RECEIVE_TASK, id, events=(message(message_name, correlation_key),), **fields
        )

    def call_activity(self, id: str, called_process: str, **fields: Any) -> Self:
        return self.node(NodeKind.CALL_ACTIVITY, id, called_process=called_process, **fields)

    # -- gateways -------------------------------------------------------------------

    def exclusive_gateway(self, id: str, default: str | None = None, **fields: Any) -> Self:
        return self.node(NodeKind.EXCLUSIVE_GATEWAY, id, default_flow=default, **fields)

    def inclusive_gateway(self, id: str, default: str | None = None, **fields: Any) -> Self:
        return self.node(NodeKind.INCLUSIVE_GATEWAY, id, default_flow=default, **fields)

    def parallel_gateway(self, id: str, **fields: Any) -> Self:
        return self.node(NodeKind.PARALLEL_GATEWAY, id, **fields)

    def event_based_gateway(self, id: str, **fields: Any) -> Self:
        return self.node(NodeKind.EVENT_BASED_GATEWAY, id, **fields)

    # -- containers -----------------------------------------------------------------

    @contextmanager
    def sub_process(self, id: str, **fields: Any) -> Iterator[Self]:
        """Nodes and flows added inside the ``with`` block belong to this sub-process."""
        self.node(NodeKind.SUB_PROCESS, id, **fields)
        with self._inside(id):
            yield self

    @contextmanager
    def ad_hoc_sub_process(
        self,
        id: str,
        active_elements: str | None = None,
        completion_condition: str | None = None,
        cancel_remaining: bool = True,
        **fields: Any,
    ) -> Iterator[Self]:
        """An ad-hoc sub-process: its inner elements need no start or end event."""
        spec = AdHocSpec(active_elements, completion_condition, cancel_remaining)
        self.node(NodeKind.AD_HOC_SUB_PROCESS, id, ad_hoc=spec, **fields)
        with self._inside(id):
            yield self

    @contextmanager
    def event_sub_process(self, id: str, **fields: Any) -> Iterator[Self]:
        self.node(NodeKind.EVENT_SUB_PROCESS, id, **fields)
        with self._inside(id):
            yield self

    @contextmanager
    def _inside(self, container: str) -> Iterator[None]:
        self._stack.append(container)
        try:
            yield
        finally:
            self._stack.pop()

"""The process model: what a deployed BPMN process *is*, independent of any instance.

Frozen, slotted dataclasses: a definition is read once at deploy (or load) and shared
by every trigger of every instance pinned to it, so nothing may change it.

One ``Node`` class for every flow node, with ``kind`` selecting the behaviour
(the step function keeps a table ``kind -> handler``), rather than a class per element:
the element set is closed by BPMN, and one shape keeps the reader, the builder and
the engine in step. Fields that a kind does not use stay at their defaults.

Ids are the modeller's ids. Event definitions are addressed by their INDEX within
their node, never by their XML id: a definition id may be minted per save and is not
a stable key across versions (docs/waits.md, Boundaries), while the order of definitions is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "AdHocSpec",
    "DefinitionIndex",
    "EventDefinition",
    "EventKind",
    "ExecutionListener",
    "Flow",
    "IoMapping",
    "LoopSpec",
    "Node",
    "NodeKind",
    "ProcessDefinition",
    "RetryPolicy",
    "TaskListener",
    "TimerKind",
    "TimerSpec",
]


class NodeKind(StrEnum):
    START_EVENT = "startEvent"
    END_EVENT = "endEvent"
    INTERMEDIATE_CATCH_EVENT = "intermediateCatchEvent"
    INTERMEDIATE_THROW_EVENT = "intermediateThrowEvent"
    BOUNDARY_EVENT = "boundaryEvent"
    TASK = "task"
    USER_TASK = "userTask"
    SERVICE_TASK = "serviceTask"
    SCRIPT_TASK = "scriptTask"
    SEND_TASK = "sendTask"
    RECEIVE_TASK = "receiveTask"
    BUSINESS_RULE_TASK = "businessRuleTask"
    MANUAL_TASK = "manualTask"
    EXCLUSIVE_GATEWAY = "exclusiveGateway"
    PARALLEL_GATEWAY = "parallelGateway"
    INCLUSIVE_GATEWAY = "inclusiveGateway"
    EVENT_BASED_GATEWAY = "eventBasedGateway"
    SUB_PROCESS = "subProcess"
    AD_HOC_SUB_PROCESS = "adHocSubProcess"
    EVENT_SUB_PROCESS = "eventSubProcess"
    CALL_ACTIVITY = "callActivity"


ACTIVITY_KINDS = frozenset(
    {
        NodeKind.TASK,
        NodeKind.USER_TASK,
        NodeKind.SERVICE_TASK,
        NodeKind.SCRIPT_TASK,
        NodeKind.SEND_TASK,
        NodeKind.RECEIVE_TASK,
        NodeKind.BUSINESS_RULE_TASK,
        NodeKind.MANUAL_TASK,
        NodeKind.SUB_PROCESS,
        NodeKind.AD_HOC_SUB_PROCESS,
        NodeKind.CALL_ACTIVITY,
    }
)

CONTAINER_KINDS = frozenset(
    {NodeKind.SUB_PROCESS, NodeKind.AD_HOC_SUB_PROCESS, NodeKind.EVENT_SUB_PROCESS}
)


class EventKind(StrEnum):
    NONE = "none"
    MESSAGE = "message"
    TIMER = "timer"
    SIGNAL = "signal"
    ERROR = "error"
    ESCALATION = "escalation"
    COMPENSATE = "compensate"
    TERMINATE = "terminate"
    LINK = "link"


class TimerKind(StrEnum):
    DURATION = "duration"  # ISO 8601 duration, e.g. PT24H
    DATE = "date"  # ISO 8601 date-time, e.g. 2026-12-01T09:00:00Z
    CYCLE = "cycle"  # ISO 8601 repeating interval, e.g. R3/PT10M


@dataclass(frozen=True, slots=True)
class TimerSpec:
    kind: TimerKind
    # The raw attribute text: a literal, or a FEEL expression when it starts with "=".
    value: str


@dataclass(frozen=True, slots=True)
class EventDefinition:
    """One event definition of an event node; addressed by its index in ``Node.events``."""

    kind: EventKind
    # Message: the message name (literal or "=expr") and the correlation-key expression.
    message_name: str | None = None
    correlation_key: str | None = None
    timer: TimerSpec | None = None
    signal_name: str | None = None
    # Error / escalation: the code; None on a catch means "catch all".
    error_code: str | None = None
    error_message: str | None = None
    escalation_code: str | None = None
    # Compensation throw: the activity to compensate (None = every compensable activity).
    activity_ref: str | None = None
    wait_for_completion: bool = True
    link_name: str | None = None


@dataclass(frozen=True, slots=True)
class IoMapping:
    """``zeebe:input``/``zeebe:output``: ``source`` is "=FEEL" or a static value."""

    source: str
    target: str


@dataclass(frozen=True, slots=True)
class LoopSpec:
    """Multi-instance characteristics (``zeebe:loopCharacteristics``)."""

    sequential: bool
    input_collection: str | None = None
    input_element: str | None = None
    output_collection: str | None = None
    output_element: str | None = None
    cardinality: str | None = None
    completion_condition: str | None = None


@dataclass(frozen=True, slots=True)
class AdHocSpec:
    """An ad-hoc sub-process: ``zeebe:adHoc activeElementsCollection`` (FEEL, a list of
    inner element ids, evaluated on entry), ``bpmn:completionCondition`` (FEEL, read
    when an inner path ends) and ``cancelRemainingInstances`` (BPMN attribute);
    ``outputCollection`` (a variable name) and ``outputElement`` (FEEL, evaluated as
    each inner element completes, its value appended to that list). With a
    ``zeebe:taskDefinition`` (the node's job type) it is the job-worker
    implementation: a job decides what runs (engine_core/ad_hoc.py)."""

    active_elements: str | None = None
    completion_condition: str | None = None
    cancel_remaining: bool = True
    output_collection: str | None = None
    output_element: str | None = None


@dataclass(frozen=True, slots=True)
class ExecutionListener:
    """A ``zeebe:executionListener``: a blocking job of ``job_type`` run before the
    element's behaviour (``event`` "start") or after it, before the token leaves
    ("end"); ``retries`` as on a task definition (literal or "=expr")."""

    event: str
    job_type: str
    retries: str | None = None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How an incident at an activity is retried automatically (dormant extension)."""

    attempts: int
    backoff_seconds: float


@dataclass(frozen=True, slots=True)
class TaskListener:
    """A ``zeebe:taskListener``: a blocking job of ``job_type`` that runs before the user
    task's ``event`` (create, assign, update, complete) takes effect."""

    event: str
    job_type: str
    retries: str | None = None


@dataclass(frozen=True, slots=True)
class Flow:
    id: str
    source: str
    target: str
    condition: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    kind: NodeKind
    name: str | None = None
    # The id of the (event) sub-process that contains this node; None at process level.
    parent: str | None = None
    incoming: tuple[str, ...] = ()
    outgoing: tuple[str, ...] = ()
    events: tuple[EventDefinition, ...] = ()

    # Jobs (service, send, business rule task; job-worker user tasks are NOT jobs here).
    job_type: str | None = None
    job_retries: str | None = None
    task_headers: tuple[tuple[str, str], ...] = ()

    # Script task: a FEEL expression and where its result goes.
    script: str | None = None
    result_variable: str | None = None
    # Business rule task: the DMN decision it evaluates (literal or "=expr"); its
    # result goes to ``result_variable``.
    decision_id: str | None = None
    # zeebe:calledDecision bindingType (latest | deployment | versionTag) and its tag.
    decision_binding: str = "latest"
    decision_version_tag: str | None = None

    # User task: each attribute as the model wrote it (a literal, or "=expr"),
    # evaluated when the task is created (engine_core/user_tasks.py).
    assignee: str | None = None
    candidate_groups: str | None = None
    candidate_users: str | None = None
    due_date: str | None = None
    follow_up_date: str | None = None
    priority: str | None = None
    form_key: str | None = None
    form_id: str | None = None
    external_reference: str | None = None
    task_listeners: tuple[TaskListener, ...] = ()

    inputs: tuple[IoMapping, ...] = ()
    outputs: tuple[IoMapping, ...] = ()

    # Gateways and activities: the flow taken when no condition is true.
    default_flow: str | None = None

    # Boundary events: the activity they sit on and whether they interrupt it.
    attached_to: str | None = None
    cancel_activity: bool = True
    # Activities: the boundary event ids attached to them, in model order.
    boundaries: tuple[str, ...] = ()

    loop: LoopSpec | None = None
    ad_hoc: AdHocSpec | None = None

    # Call activity.
    called_process: str | None = None
    # zeebe:calledElement bindingType: latest | deployment | versionTag
    # (engine_core/bindings.py); with versionTag, the tag asked for.
    called_binding: str = "latest"
    called_version_tag: str | None = None
    propagate_all_child_variables: bool = True
    propagate_all_parent_variables: bool = True

    # Compensation: a handler activity (isForCompensation) and, on a boundary, its handler.
    is_for_compensation: bool = False
    compensation_handler: str | None = None

    # Event sub-process start events: whether they interrupt their parent scope.
    is_interrupting: bool = True

    retry_policy: RetryPolicy | None = None

    # zeebe:executionListeners, in model order (start and end mixed).
    execution_listeners: tuple[ExecutionListener, ...] = ()

    def listeners(self, event: str) -> tuple[ExecutionListener, ...]:
        """The execution listeners of one event type, in the order they run (asked at
        every entry and exit of every node: most have none)."""
        if not self.execution_listeners:
            return ()
        return tuple(x for x in self.execution_listeners if x.event == event)

    @property
    def event(self) -> EventDefinition:
        """The node's single event definition, or a NONE definition."""
        return self.events[0] if self.events else _NO_EVENT

    @property
    def label(self) -> str:
        """How messages name this node: its id, and its name when it has one."""
        return f"{self.id!r} ({self.name})" if self.name else repr(self.id)


_NO_EVENT = EventDefinition(EventKind.NONE)


@dataclass(frozen=True, slots=True)
class DefinitionIndex:
    """What the step asks of a definition on every node it enters, answered once per
    definition (when it is built) instead of once per step: a definition never changes
    and is shared by every trigger of every instance pinned to it."""

    # node id -> its outgoing flows, in model order.
    outgoing: Mapping[str, tuple[Flow, ...]]
    # The nodes none of whose outgoing flows has a condition (they take them all, or
    # the first, without evaluating anything).
    unconditional: frozenset[str]
    # container id (None = the process) -> its event sub-processes / its none starts.
    event_subs: Mapping[str | None, tuple[Node, ...]]
    none_starts: Mapping[str | None, tuple[Node, ...]]
    # Every job type the model names (its jobs and its execution and task listeners),
    # as written: a literal, or "=expr" computed at run time.
    job_types: frozenset[str] = frozenset()

    @classmethod
    def of(cls, definition: ProcessDefinition) -> DefinitionIndex:
        flows, nodes = definition.flows, definition.nodes
        outgoing = {n.id: tuple(flows[f] for f in n.outgoing if f in flows) for n in nodes.values()}
        inside = {
            container: tuple(nodes[n] for n in ids if n in nodes)
            for container, ids in definition.children.items()
        }
        return cls(
            outgoing=outgoing,
            unconditional=frozenset(
                n for n, out in outgoing.items() if all(f.condition is None for f in out)
            ),
            event_subs={
                c: tuple(n for n in ns if n.kind is NodeKind.EVENT_SUB_PROCESS)
                for c, ns in inside.items()
            },
            none_starts={
                c: tuple(
                    n
                    for n in ns
                    if n.kind is NodeKind.START_EVENT and n.event.kind is EventKind.NONE
                )
                for c, ns in inside.items()
            },
            job_types=frozenset(
                [n.job_type for n in nodes.values() if n.job_type is not None]
                + [x.job_type for n in nodes.values() for x in n.execution_listeners]
                + [x.job_type for n in nodes.values() for x in n.task_listeners]
                + [x.job_type for x in definition.execution_listeners]
            ),
        )


@dataclass(frozen=True, slots=True)
class ProcessDefinition:
    """One executable process: its key is the BPMN process id."""

    key: str
    name: str | None
    nodes: Mapping[str, Node]
    flows: Mapping[str, Flow]
    # Container id (None = the process itself) -> the ids of the nodes directly inside it.
    children: Mapping[str | None, tuple[str, ...]] = field(default_factory=dict)
    # zeebe:versionTag: what a call activity with bindingType="versionTag" asks for.
    version_tag: str | None = None
    # The process's own zeebe:executionListeners (around the whole instance).
    execution_listeners: tuple[ExecutionListener, ...] = ()
    # Derived from the fields above when the definition is built (never passed in).
    index: DefinitionIndex = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", DefinitionIndex.of(self))

    def node(self, node_id: str) -> Node:
        return self.nodes[node_id]

    def listeners(self, event: str) -> tuple[ExecutionListener, ...]:
        """The process's execution listeners of one event type, in the order they run."""
        if not self.execution_listeners:
            return ()
        return tuple(x for x in self.execution_listeners if x.event == event)

    def flow(self, flow_id: str) -> Flow:
        return self.flows[flow_id]

    def nodes_in(self, container: str | None) -> tuple[Node, ...]:
        return tuple(self.nodes[n] for n in self.children.get(container, ()))

    def none_starts(self, container: str | None) -> tuple[Node, ...]:
        """The start events of a scope that a plain start (or sub-process entry) takes."""
        return self.index.none_starts.get(container, ())

    def event_sub_processes(self, container: str | None) -> tuple[Node, ...]:
        return self.index.event_subs.get(container, ())

    def message_starts(self) -> tuple[Node, ...]:
        """Process-level message start events: they create instances."""
        return tuple(
            n
            for n in self.nodes_in(None)
            if n.kind is NodeKind.START_EVENT and n.event.kind is EventKind.MESSAGE
        )

    def signal_starts(self) -> tuple[Node, ...]:
        return tuple(
            n
            for n in self.nodes_in(None)
            if n.kind is NodeKind.START_EVENT and n.event.kind is EventKind.SIGNAL
        )

    def timer_starts(self) -> tuple[Node, ...]:
        return tuple(
            n
            for n in self.nodes_in(None)
            if n.kind is NodeKind.START_EVENT and n.event.kind is EventKind.TIMER
        )

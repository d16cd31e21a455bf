"""What the instance page draws, derived from the checkpoint and the history facts.

The overlays are keyed by BPMN node id, the ids bpmn-js draws the diagram with:
``waiting`` (each wait of a token there, spelled out: timer due at, message name and
key, user task, job type and attempt), ``incidents`` (open ones), ``completed`` (the
node appears in the history and no live token is at it), ``withdrawn`` (the node's last
fact is a ``Withdrawn``: a cancel, a terminate end or an interrupting boundary took its
token before it finished, so it is not ticked completed). Facts record the nodes where
something happened (a start, a wait woken, a job dispatched, an end reached, an
incident); nodes a token passes straight through (gateways, script tasks) leave no
fact, so they are not marked — the history stays one row per event, not per node.

Nothing here carries a variable value unless asked to (``values=True``, for a
signed-in user): a message wait's correlation key is computed from variables, so it is
left out for everyone else, as the JSON endpoint that repeats the overlays is served to
anyone who may see the page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dormant.engine_core.checkpoint import ROOT_SCOPE, Checkpoint, Wait, WaitKind
from dormant.engine_core.model import NodeKind, ProcessDefinition
from dormant.engine_core.views import FactView

__all__ = [
    "INTERNAL_FACTS",
    "NODE_KEYS",
    "NodeOverlay",
    "ScopeVariables",
    "describe_wait",
    "overlays",
    "scopes",
    "taken_flows",
]

# Fact detail keys that name a node the instance reached (the instance page's marks and
# the process page's "passed" counts, persistence/console_queries.py ``node_counts``).
NODE_KEYS = ("node", "start", "boundary", "arm", "host", "gateway")
# The engine's bookkeeping rather than the process's story: one per trigger applied
# (which token woke, what waits remain) or a trigger that found nothing to do. The
# history hides them unless asked (issue 28: "internal facts behind a toggle").
INTERNAL_FACTS = frozenset({"Hydrated", "Dehydrated", "Stale"})
# Nodes a token passes in one step, recording no fact of their own (their flows are
# inferred: ``taken_flows``); a node that waits or runs a job always leaves a fact.
_PASS_THROUGH = frozenset(
    {
        NodeKind.EXCLUSIVE_GATEWAY,
        NodeKind.PARALLEL_GATEWAY,
        NodeKind.INCLUSIVE_GATEWAY,
        NodeKind.EVENT_BASED_GATEWAY,
        NodeKind.TASK,
        NodeKind.MANUAL_TASK,
        NodeKind.SCRIPT_TASK,
        NodeKind.INTERMEDIATE_THROW_EVENT,
    }
)
# A token taken away before it finished (engine_core/runtime.py ``terminate_token``).
_WITHDRAWN = "Withdrawn"


@dataclass(slots=True)
class NodeOverlay:
    waiting: list[str] = field(default_factory=list)
    incidents: list[str] = field(default_factory=list)
    completed: bool = False
    withdrawn: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "waiting": self.waiting,
            "incidents": self.incidents,
            "completed": self.completed,
            "withdrawn": self.withdrawn,
        }


@dataclass(frozen=True, slots=True)
class ScopeVariables:
    id: str
    node_id: str | None
    parent_id: str | None
    variables: dict[str, Any]


def _at(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment is not None else "?"


def describe_wait(wait: Wait, *, values: bool = True) -> str:
    """One wait in an operator's words: what would wake it. Without ``values`` a
    message's correlation key (a value) is only said to exist."""
    kind = wait.kind
    if kind is WaitKind.MESSAGE:
        key = ""
        if wait.correlation_key is not None:
            key = f" key {wait.correlation_key}" if values else " key (hidden)"
        return f"message {wait.message_name}{key}"
    if kind is WaitKind.SIGNAL:
        return f"signal {wait.signal_name}"
    if kind is WaitKind.JOB:
        state = (
            f"running, times out {_at(wait.due_at)}"
            if wait.job_running
            else f"retry backoff until {_at(wait.due_at)}"
        )
        what = "task listener job" if wait.listener_of else "job"
        return f"{what} {wait.job_type}, attempt {wait.attempt} ({state})"
    if kind is WaitKind.USER_TASK:
        return f"user task {wait.task_name or wait.node_id}" + "".join(
            f", {part}" for part in _task_parts(wait)
        )
    if kind is WaitKind.CALL:
        return f"child instance {wait.child_instance_id}"
    if kind is WaitKind.RETRY:
        return f"retry of incident {wait.incident_id} at {_at(wait.due_at)}"
    return f"timer due {_at(wait.due_at)}"


def _task_parts(wait: Wait) -> list[str]:
    """A user task's attributes, as the task list shows them."""
    parts = []
    if wait.assignee:
        parts.append(f"assignee {wait.assignee}")
    if wait.candidate_users:
        parts.append("candidate users " + ", ".join(wait.candidate_users))
    if wait.candidate_groups:
        parts.append("candidate groups " + ", ".join(wait.candidate_groups))
    if wait.due_date is not None:
        parts.append(f"due {_at(wait.due_date)}")
    if wait.follow_up_date is not None:
        parts.append(f"follow up {_at(wait.follow_up_date)}")
    parts.append(f"priority {wait.priority}")
    form = wait.form_key or wait.form_id or wait.external_reference
    if form:
        parts.append(f"form {form}")
    if wait.task_state.value != "created":
        parts.append(f"{wait.task_state.value} (its task listeners run)")
    if wait.denied_reason:
        parts.append(f"last transition denied: {wait.denied_reason}")
    return parts


def overlays(
    checkpoint: Checkpoint, history: list[FactView], *, values: bool = False
) -> dict[str, NodeOverlay]:
    out: dict[str, NodeOverlay] = {}

    def at(node_id: str) -> NodeOverlay:
        return out.setdefault(node_id, NodeOverlay())

    for wait in checkpoint.waits.values():
        if wait.kind is not WaitKind.RETRY:
            at(wait.node_id).waiting.append(describe_wait(wait, values=values))
    for incident in checkpoint.incidents.values():
        if not incident.state.closed:
            at(incident.node_id).incidents.append(
                f"{incident.cause_class}, attempts {incident.attempts}"
            )
    live = {t.node_id for t in checkpoint.tokens.values()}
    # In fact order: a node's last word decides. Withdrawn (a cancel, a terminate end,
    # an interrupting boundary took its token) is not completed; entered again later
    # (a loop) and finished, it is.
    for fact in history:
        withdrawn = fact.kind == _WITHDRAWN
        for key in NODE_KEYS:
            node = fact.details.get(key)
            if isinstance(node, str) and node not in live:
                at(node).completed = not withdrawn
                at(node).withdrawn = withdrawn
    for node_id in live:
        if node_id in out:
            out[node_id].completed = False
            out[node_id].withdrawn = False
    return out


def scopes(checkpoint: Checkpoint) -> list[ScopeVariables]:
    """Every scope with its own variables, the root first."""
    ordered = sorted(checkpoint.scopes.values(), key=lambda s: (s.id != ROOT_SCOPE, s.id))
    return [ScopeVariables(s.id, s.node_id, s.parent_id, dict(s.variables)) for s in ordered]


def taken_flows(definition: ProcessDefinition, marks: dict[str, NodeOverlay]) -> list[str]:
    """The sequence flows the instance took, as Operate draws them: both ends reached.

    Reached: every node the overlays name (a fact named it, a token waits there, an
    incident is open there). Nodes a token passes straight through (gateways, script
    and plain tasks, throw events: ``_PASS_THROUGH``) record no fact; one counts as
    passed when it lies on a path of such nodes from a reached node to a reached
    node, so ``charge → gateway → done`` draws
    both of its flows, and the branch to a node never reached is not drawn. An
    inference from the facts, not a record of every flow: a gateway passed on the way
    to a node reached again later by another path may draw a flow of both."""
    reached = set(marks)
    passable = {
        node.id
        for node in definition.nodes.values()
        if node.kind in _PASS_THROUGH
        or (node.kind is NodeKind.BUSINESS_RULE_TASK and node.job_type is None)
    }
    outgoing: dict[str, list[str]] = {}
    incoming: dict[str, list[str]] = {}
    for flow in definition.flows.values():
        outgoing.setdefault(flow.source, []).append(flow.target)
        incoming.setdefault(flow.target, []).append(flow.source)

    def spread(edges: dict[str, list[str]]) -> set[str]:
        seen: set[str] = set()
        todo = [n for node in reached for n in edges.get(node, ()) if n not in reached]
        while todo:
            node = todo.pop()
            if node in seen or node in reached or node not in passable:
                continue
            seen.add(node)
            todo.extend(edges.get(node, ()))
        return seen

    passed = spread(outgoing) & spread(incoming)
    on_path = reached | passed
    return sorted(
        flow.id
        for flow in definition.flows.values()
        if flow.source in on_path and flow.target in on_path
    )

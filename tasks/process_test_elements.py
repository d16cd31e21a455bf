"""Which elements of one process-test instance completed and which were terminated,
read step by step from the tokens before and after each trigger.

The facts name only the elements where something is recorded (a job sent, a task
created, an end reached, a boundary fired); a message catch woken, a gateway, a script
task, an error boundary record nothing of their own (docs/console.md, the instance
page). The test engine applies every step itself, so it sees each token where it was
before the step and where it is after: an element a token was woken at and left is
completed; one whose token was taken without being woken (an interrupting boundary, a
terminate end, a cancel) is terminated; the elements between where a token was and
where it went (or each end event reached) are completed, found as the shortest path
through the model's flows, boundary attachments and sub-process entries and exits, each
once a step (two tokens meeting at a join pass it once); an element a token stands at
after the step is active, not passed. In a loop the path is an inference, as the
console's taken flows are. A token that moved on without being woken by name (a
step continued past its budget, ``Continue``; a sub-process left when its inside
ended) completed its element.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dormant.engine_core.effects import Fact
from dormant.engine_core.model import NodeKind, ProcessDefinition

__all__ = ["ElementLog"]

# A token waiting at a join is consumed by the arrival that completes the join: that is
# the join's completion, not a withdrawal.
_JOINS = frozenset({NodeKind.PARALLEL_GATEWAY, NodeKind.INCLUSIVE_GATEWAY})


@dataclass(slots=True)
class ElementLog:
    definition: ProcessDefinition
    completed: dict[str, int] = field(default_factory=dict)
    terminated: dict[str, int] = field(default_factory=dict)
    # Every completion in the order it happened (IS_COMPLETED_IN_ORDER).
    order: list[str] = field(default_factory=list)
    _edges: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        d = self.definition
        edges: dict[str, list[str]] = {}
        for flow in d.flows.values():
            edges.setdefault(flow.source, []).append(flow.target)
        for node in d.nodes.values():
            for boundary in node.boundaries:
                edges.setdefault(node.id, []).append(boundary)
            inner = d.children.get(node.id, ())
            for child in inner:
                kid = d.nodes[child]
                if kid.kind is NodeKind.START_EVENT:
                    edges.setdefault(node.id, []).append(child)
                if kid.kind is NodeKind.END_EVENT:
                    edges.setdefault(child, []).append(node.id)
        self._edges = edges

    def _mark(self, node: str, outcome: str) -> None:
        counts = self.completed if outcome == "completed" else self.terminated
        counts[node] = counts.get(node, 0) + 1
        if outcome == "completed":
            self.order.append(node)

    def _path(self, source: str, targets: Iterable[str]) -> list[str] | None:
        """The nodes strictly between ``source`` and the nearest of ``targets``, and
        that target, or None when none is reachable."""
        goal = set(targets)
        back: dict[str, str | None] = {source: None}
        todo = deque([source])
        while todo:
            node = todo.popleft()
            if node in goal and node != source:
                path = [node]
                while (prev := back[path[-1]]) is not None and prev != source:
                    path.append(prev)
                return path[::-1]
            for nxt in self._edges.get(node, ()):
                if nxt not in back:
                    back[nxt] = node
                    todo.append(nxt)
        return None

    def step(
        self,
        before: Mapping[str, str],
        after: Mapping[str, str],
        facts: Iterable[Fact],
    ) -> None:
        """One applied step: ``before`` / ``after`` map each live token to its node."""
        facts = list(facts)
        woken = {f.details.get("token") for f in facts if f.kind == "Hydrated"}
        ends = [str(f.details["node"]) for f in facts if f.kind == "EndEventReached"]
        fired = {
            str(f.details.get("host")): str(f.details.get("boundary"))
            for f in facts
            if f.kind == "BoundaryFired" and f.details.get("interrupting")
        }
        starts = [str(f.details["start"]) for f in facts if f.kind == "Started"]
        withdrawn = [str(f.details["node"]) for f in facts if f.kind == "Withdrawn"]
        # A retried (or resolved) incident runs its element again with a new token.
        retried = {
            str(f.details.get("node"))
            for f in facts
            if f.kind == "Incident" and f.details.get("action") in ("retried", "resolved")
        }
        live = set(after.values())
        # What this step did to each element, in the order the tokens did it (the
        # woken tokens first): where a token was, then the path to where it is now, or
        # to each end event reached in the step when it is gone. Each element once a
        # step (two tokens meeting at a join pass it once); one where a token is now
        # is active, not passed.
        happened: dict[str, str] = {}
        unwoken: list[str] = []  # left without being woken: withdrawn, unless passed
        fresh = [at for t, at in after.items() if t not in before]

        def walk(origin: str, targets: Iterable[str]) -> None:
            for target in targets:
                for node in self._path(origin, [target]) or ():
                    happened.setdefault(node, "completed")

        for node in starts:
            happened.setdefault(node, "completed")
            walk(node, [*fresh, *ends])
        order = sorted(before, key=lambda t: t not in woken)
        for token in order:
            was, now = before[token], after.get(token)
            if now == was or (now is None and was in ends):
                continue  # still there; or an end it stood at, counted as reached below
            if was in fired:
                happened.setdefault(was, "terminated")
                origin = fired[was]
                happened.setdefault(origin, "completed")
            elif (
                token in woken
                or now is not None  # moved on (a sub-process left when its inside ended)
                or was in retried
                or self.definition.nodes[was].kind in _JOINS
            ):
                origin = was
                nearest = self._path(was, [now] if now is not None else [*ends, *live])
                # Left through an interrupting boundary of its own (an error caught
                # there records no BoundaryFired): the element was terminated.
                first = self.definition.nodes[nearest[0]] if nearest else None
                interrupted = (
                    first is not None and first.attached_to == was and first.cancel_activity
                )
                happened.setdefault(was, "terminated" if interrupted else "completed")
            else:
                unwoken.append(was)
                continue
            walk(origin, [now] if now is not None else [*ends, *fresh])
            if now is not None:
                walk(origin, fresh)  # a fork: the other branches' tokens
        for node in ends:
            happened.setdefault(node, "completed")
        # A token that left unwoken from an element a woken token passed through (a
        # sub-process whose inner end was reached) completed with it; any other was
        # taken away (an interrupting boundary, a terminate end, a cancel).
        for was in unwoken:
            happened.setdefault(was, "terminated")
        for node in withdrawn:
            happened[node] = "terminated"
        for node, outcome in happened.items():
            if node not in live or outcome == "terminated":
                self._mark(node, outcome)

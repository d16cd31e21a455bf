"""The bookkeeping one ``apply`` runs on: tokens, scopes, variables, waits.

A ``Runtime`` wraps a private copy of the checkpoint for the length of one trigger. It
only keeps books: it never moves a token on (``moving.py`` does), so every step-machine
module imports it and it imports none of them. Invariants it keeps:

* A token is in ``cp.tokens`` while it is live (active, waiting, in incident); an ended
  token is removed, so the document never grows with history.
* A wait is in ``cp.waits`` exactly while it can still fire. Every path that ends a
  wait goes through ``withdraw``: fired, lost a gateway race, cancelled by an
  interrupting boundary, its scope terminated, the instance cancelled. The Store
  derives the hold rows from ``cp.waits``, so withdrawal is total by construction.
* A token resumed by a trigger keeps its id and lineage; only a fork makes new
  tokens, so lineage measures fork depth, never the number of wake cycles.
* Variables are JSON values. A write propagates to the innermost scope that already
  has the name, else to the process scope (Camunda 8's propagation rule).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dormant.engine_core.checkpoint import (
    ROOT_SCOPE,
    Checkpoint,
    IncidentState,
    InstanceStatus,
    Scope,
    TaskState,
    Token,
    TokenState,
    Wait,
    WaitKind,
    WaitRole,
)
from dormant.engine_core.effects import CancelChild, Effect, Fact
from dormant.engine_core.errors import EngineInvariantError, InvalidVariables
from dormant.engine_core.expressions import TechnicalFailure, evaluate, json_value
from dormant.engine_core.inputs import check_value, encoded_size
from dormant.engine_core.model import ACTIVITY_KINDS, Node, ProcessDefinition
from dormant.engine_core.services import Services
from dormant.engine_core.transitions import move_incident, move_token

__all__ = ["Runtime"]

# The ``Incident`` fact's ``action`` for each way an incident closes (docs/incidents.md).
_CLOSE_ACTIONS: Mapping[IncidentState, str] = {
    IncidentState.RETRIED: "retry-succeeded",
    IncidentState.RESOLVED: "resolved",
    IncidentState.OVERTAKEN: "overtaken",
    IncidentState.DEAD_LETTERED: "dead-lettered",
}


class Runtime:
    def __init__(
        self, definition: ProcessDefinition, cp: Checkpoint, now: datetime, services: Services
    ) -> None:
        self.defn = definition
        self.cp = cp
        self.now = now
        self.services = services
        self.effects: list[Effect] = []
        self.facts: list[Fact] = []
        self.queue: deque[str] = deque()
        # Tokens re-entering their node for an incident retry: their boundaries stay as
        # they were (still armed, or already fired) and are not armed a second time.
        self.keep_boundaries: set[str] = set()
        # Node entries so far in this step, against ``services.step_budget``.
        self.entries = 0
        # About how many bytes the scopes' variables and multi-instance outputs take,
        # against ``limits.max_checkpoint_bytes``: measured on the first write of the
        # step, then kept by every write (``charge_bytes``).
        self._held: int | None = None
        # This step's ``Withdrawn`` fact per node: a cancel of 10,000 inner instances
        # of one multi-instance activity is one fact counting them, not 10,000.
        self.withdrawn: dict[str, tuple[int, Fact]] = {}
        # Set when a node would have taken the instance past ``max_tokens``: the step
        # stops there, its one incident raised, and the tokens still queued stay active,
        # parked behind it (engine._run, docs/limits.md "What one instance holds").
        self.token_bound_reached = False

    # -- facts and ids -------------------------------------------------------------

    def fact(self, kind: str, **details: str | int | float | bool | None) -> None:
        self.facts.append(Fact(kind, details))

    def node(self, node_id: str) -> Node:
        try:
            return self.defn.nodes[node_id]
        except KeyError as exc:
            raise EngineInvariantError(
                f"instance {self.cp.instance_id} refers to node {node_id!r}, which process "
                f"{self.cp.process_key} v{self.cp.version} does not have"
            ) from exc

    # -- variables -----------------------------------------------------------------

    def scope_chain(self, scope_id: str | None) -> list[Scope]:
        """The scope and its ancestors, innermost first."""
        chain: list[Scope] = []
        while scope_id is not None:
            scope = self.cp.scopes.get(scope_id)
            if scope is None:
                break
            chain.append(scope)
            scope_id = scope.parent_id
        return chain

    def visible(self, scope_id: str | None) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for scope in reversed(self.scope_chain(scope_id)):
            merged.update(scope.variables)
        return merged

    def token_scope(self, token: Token) -> str:
        """The innermost scope a token's node sees: its local scope when it has one."""
        return token.inner_scope or token.scope_id

    def token_vars(self, token: Token) -> dict[str, Any]:
        return self.visible(self.token_scope(token))

    def propagate(self, scope_id: str | None, variables: Mapping[str, Any]) -> None:
        """Write variables to the scope that has them (else the outermost). Every value
        a model stores passes here, so one too large or too deep to store is refused
        here, as a failure of the node that wrote it, never at the encode."""
        for name, value in variables.items():
            try:
                check_value(value, f"variable {name[:60]!r}", self.services.limits, depth=1)
            except InvalidVariables as exc:
                raise TechnicalFailure(str(exc), "InvalidVariables") from None
        chain = self.scope_chain(scope_id)
        if not chain:
            chain = [self.cp.scopes[ROOT_SCOPE]]
        writes: list[tuple[Scope, str, Any]] = []
        for name, value in variables.items():
            target = next((sc for sc in chain if name in sc.variables), chain[-1])
            writes.append((target, name, value))
        self.charge_bytes(sum(_growth(sc.variables, n, v) for sc, n, v in writes))
        for target, name, value in writes:
            target.variables[name] = value

    def write_scope(self, scope: Scope, variables: Mapping[str, Any]) -> None:
        """Write ``variables`` into ``scope`` itself (local variables: input mappings, a
        listener's result), charged to what the instance holds."""
        self.charge_bytes(sum(_growth(scope.variables, n, v) for n, v in variables.items()))
        scope.variables.update(variables)

    # -- what one instance holds (docs/limits.md, "Every bound at a glance") ---------

    def bounded(self, values: Mapping[str, Any], what: str) -> None:
        """``values`` entering the checkpoint or a message as one whole -- a mapping's
        result, a job's input or result, a thrown payload, a child's inputs -- within
        the limit of a trigger's variables (``DORMANT_MAX_VARIABLES_BYTES``), else an
        incident at the node: each variable alone may fit while the whole does not
        (issue 24, row 5; one home for the check: ``engine_core/inputs.py``)."""
        limits = self.services.limits
        total = 2
        for name, value in values.items():
            try:
                total += check_value(value, f"variable {name[:60]!r}", limits, depth=1)
            except InvalidVariables as exc:
                raise TechnicalFailure(str(exc), "InvalidVariables") from None
            total += len(name) + 4
            if total > limits.max_bytes:
                raise TechnicalFailure(
                    f"{what} is larger than the limit of {limits.max_bytes} bytes "
                    "(DORMANT_MAX_VARIABLES_BYTES)",
                    "InvalidVariables",
                )

    def charge_bytes(self, growth: int) -> None:
        """Account ``growth`` bytes about to be written to the checkpoint's scopes; past
        ``limits.max_checkpoint_bytes`` the write is refused, an incident at the node
        that made it, before anything is stored -- 400 inner instances each holding
        1 MB would otherwise commit a 400 MB checkpoint."""
        if self._held is None:
            self._held = sum(_scope_size(sc) for sc in self.cp.scopes.values()) + sum(
                encoded_size(i.data) for i in self.cp.incidents.values() if i.data
            )
        held = self._held + growth
        limit = self.services.limits.max_checkpoint_bytes
        if growth > 0 and held > limit:
            raise TechnicalFailure(
                f"instance {self.cp.instance_id} would hold about {held:,} bytes of "
                f"variables, more than the limit of {limit:,} (DORMANT_MAX_CHECKPOINT_BYTES)",
                "LimitExceeded",
            )
        self._held = held

    def snapshot_fits(self, snapshot: Mapping[str, Any], replaced: Mapping[str, Any]) -> bool:
        """Whether an incident's variables snapshot (replacing ``replaced``) stays within
        the checkpoint bound; charged if it does. Never raises: an incident must be
        recorded even when the instance is full."""
        growth = encoded_size(snapshot) - (encoded_size(replaced) if replaced else 0)
        try:
            self.charge_bytes(growth)
        except TechnicalFailure:
            if replaced:
                self.charge_bytes(-encoded_size(replaced))
            return False
        return True

    def hold(self, value: Any, what: str) -> int:
        """A value the checkpoint keeps outside the variables (a multi-instance
        activity's input collection, its output elements until the output collection is
        written): checked and charged like a variable."""
        try:
            check_value(value, what, self.services.limits, depth=1)
        except InvalidVariables as exc:
            raise TechnicalFailure(str(exc), "InvalidVariables") from None
        size = encoded_size(value)
        self.charge_bytes(size)
        return size

    def apply_outputs(
        self, node: Node, token: Token, result: Mapping[str, Any], target_scope: str | None = None
    ) -> None:
        """Merge an activity's result: through its output mappings, or propagate all of it."""
        self.bounded(result, f"the result of {node.label}")
        if not node.outputs:
            self.propagate(target_scope or self.token_scope(token), result)
            return
        context = {**self.token_vars(token), **result}
        mapped = {
            m.target: json_value(evaluate(m.source, context, node.id, self.now))
            for m in node.outputs
        }
        nested = _nest(mapped)
        self.bounded(nested, f"the output mappings of {node.label}")
        self.propagate(target_scope or token.scope_id, nested)

    def mapped_inputs(self, node: Node, context: Mapping[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for m in node.inputs:
            scope = {**context, **values}
            values[m.target] = json_value(evaluate(m.source, scope, node.id, self.now))
        nested = _nest(values)
        self.bounded(nested, f"the input mappings of {node.label}")
        return nested

    # -- scopes --------------------------------------------------------------------

    def new_scope(
        self,
        node_id: str | None,
        parent_id: str | None,
        token_id: str | None,
        variables: dict[str, Any] | None = None,
        loop_index: int | None = None,
    ) -> Scope:
        if variables:
            self.charge_bytes(encoded_size(variables))
        scope = Scope(
            id=self.cp.next_id("s"),
            node_id=node_id,
            parent_id=parent_id,
            token_id=token_id,
            variables=dict(variables or {}),
            loop_index=loop_index,
        )
        self.cp.scopes[scope.id] = scope
        return scope

    def drop_scope(self, scope_id: str) -> None:
        for wait in [w for w in self.cp.waits.values() if w.scope_id == scope_id]:
            self.withdraw(wait)
        dropped = self.cp.scopes.pop(scope_id, None)
        if dropped is not None and self._held is not None:
            self._held -= _scope_size(dropped)

    def tokens_in(self, scope_id: str) -> list[Token]:
        return [t for t in self.cp.tokens.values() if t.scope_id == scope_id]

    def child_scopes(self, scope_id: str) -> list[Scope]:
        return [s for s in self.cp.scopes.values() if s.parent_id == scope_id]

    # -- tokens --------------------------------------------------------------------

    def reserve_tokens(self, count: int, node_id: str) -> None:
        """Room for ``count`` new tokens, or the one ``LimitExceeded`` failure of this
        step: checked before a node adds any (a fork's every branch at once), so a fork
        refused leaves no half of its branches behind to run twice on retry."""
        limit = self.services.limits.max_tokens
        held = len(self.cp.tokens)
        if held + count <= limit:
            return
        # A parallel fork in a loop adds a token each turn: stopped at the node that
        # would pass the bound, as ONE incident; the step ends there (issue 24, row 5).
        self.token_bound_reached = True
        raise TechnicalFailure(
            f"instance {self.cp.instance_id} has {held:,} tokens; {count:,} more at "
            f"{node_id!r} would pass the limit of {limit:,} (DORMANT_MAX_TOKENS); a parallel fork "
            "in a loop? The instance's other moving tokens are parked until this incident "
            "is retried",
            "LimitExceeded",
        )

    def spawn(
        self,
        node_id: str,
        scope_id: str,
        lineage: list[str],
        flow_id: str | None = None,
        loop_index: int | None = None,
        *,
        replacing: bool = False,
    ) -> Token:
        """A new active token, queued. ``replacing``: it takes the place of one that goes
        at once (an incident's retry), so the instance holds no more tokens than before."""
        if not replacing:
            self.reserve_tokens(1, node_id)
        token = Token(
            id=self.cp.next_id("t"),
            node_id=node_id,
            state=TokenState.ACTIVE,
            scope_id=scope_id,
            lineage=lineage,
            flow_id=flow_id,
            loop_index=loop_index,
        )
        self.cp.tokens[token.id] = token
        self.queue.append(token.id)
        return token

    def remove_token(self, token: Token, state: TokenState) -> None:
        """Drop a token; an incident it still had closes with it.

        Withdrawn (a boundary, a terminate, a cancel took it away): the incident is
        overtaken. Completed (e.g. an end event that failed, then succeeded on retry):
        it is retried. Either way no open incident outlives its token, so the
        instance's ``active_incidents`` status always names a real, actionable one.
        """
        self.withdraw_token_waits(token.id)
        move_token(token, state)
        self.cp.tokens.pop(token.id, None)
        self.close_incidents(
            token,
            IncidentState.OVERTAKEN if state is TokenState.WITHDRAWN else IncidentState.RETRIED,
        )

    def close_incidents(self, token: Token, state: IncidentState) -> None:
        """Close the open incidents of ``token`` with their facts: ``retried`` when the
        token moved on after a retry ran its node again (the progress paths pass it),
        ``resolved`` by the operator's Resolve (engine_core/incidents.py closes those
        itself, before the token moves), ``overtaken`` when the token was withdrawn."""
        action = _CLOSE_ACTIONS[state]
        for incident in self.cp.incidents.values():
            if incident.token_id == token.id and not incident.state.closed:
                move_incident(incident, state)
                incident.retry_at = None
                for wait in [w for w in self.cp.waits.values() if w.incident_id == incident.id]:
                    self.withdraw(wait)
                self.fact(
                    "Incident",
                    action=action,
                    incident=incident.id,
                    node=incident.node_id,
                    cause_class=incident.cause_class,
                )

    # -- waits ---------------------------------------------------------------------

    def add_wait(self, kind: WaitKind, role: WaitRole, node_id: str, **fields: Any) -> Wait:
        wait = Wait(id=self.cp.next_id("w"), kind=kind, role=role, node_id=node_id, **fields)
        self.cp.waits[wait.id] = wait
        return wait

    def withdraw(self, wait: Wait) -> None:
        """End a wait by any path. The Store removes its hold rows in the same commit."""
        self.cp.waits.pop(wait.id, None)
        if wait.kind is WaitKind.CALL and wait.child_instance_id:
            self.effects.append(CancelChild(wait.child_instance_id))

    def live_wait(self, wait_id: str, *kinds: WaitKind) -> Wait | None:
        """The wait a trigger names, if it can still fire: None makes the trigger stale."""
        wait = self.cp.waits.get(wait_id)
        if wait is None or wait.kind not in kinds:
            return None
        if wait.token_id is not None and wait.token_id not in self.cp.tokens:
            return None
        return wait

    def token_of(self, wait: Wait) -> Token:
        """The token a (token-owned) wait belongs to."""
        if wait.token_id is None or wait.token_id not in self.cp.tokens:
            raise EngineInvariantError(
                f"wait {wait.id} of instance {self.cp.instance_id} has no live token"
            )
        return self.cp.tokens[wait.token_id]

    def waits_of(self, token_id: str) -> list[Wait]:
        return [w for w in self.cp.waits.values() if w.token_id == token_id]

    def withdraw_token_waits(
        self, token_id: str, *, keep_boundaries: bool = False, keep_transition: bool = False
    ) -> None:
        """Withdraw what ``token_id`` waits for, but its armed boundaries when
        ``keep_boundaries``, and a user task in a transition when ``keep_transition``
        (parked in an incident: the failed listener runs again on retry, with the
        transition's pending completion or assignment)."""
        for wait in self.waits_of(token_id):
            if keep_boundaries and wait.role is WaitRole.BOUNDARY:
                continue
            if (
                keep_transition
                and wait.kind is WaitKind.USER_TASK
                and wait.task_state is not TaskState.CREATED
            ):
                continue
            self.withdraw(wait)

    # -- terminating ---------------------------------------------------------------

    def terminate_token(self, token: Token) -> None:
        """Withdraw a token and everything it runs (its sub-process or multi-instance body).

        The ``Withdrawn`` fact names its node: a user task or job a cancel, a terminate
        end or an interrupting boundary took away did not complete, and the history
        (and the console's diagram) must be able to tell the two apart. One fact per node
        and step, with how many tokens there were withdrawn."""
        if token.inner_scope is not None and token.inner_scope in self.cp.scopes:
            self.terminate_scope(token.inner_scope)
            self.cp.scopes.pop(token.inner_scope, None)
        self.remove_token(token, TokenState.WITHDRAWN)
        node = token.node_id
        seen = self.withdrawn.get(node)
        if seen is not None:
            at, fact = seen
            # Counted in the same fact only while nothing since named the node (a node
            # entered again and completed in between keeps its own order).
            if all(f.details.get("node") != node for f in self.facts[at + 1 :]):
                fact.details["tokens"] = int(fact.details.get("tokens") or 0) + 1
                return
        fact = Fact("Withdrawn", {"node": node, "tokens": 1})
        self.withdrawn[node] = (len(self.facts), fact)
        self.facts.append(fact)

    def terminate_scope(self, scope_id: str) -> None:
        """Withdraw every token and wait inside a scope, depth first; keep the scope."""
        for token in self.tokens_in(scope_id):
            self.terminate_token(token)
        for child in self.child_scopes(scope_id):
            self.terminate_scope(child.id)
            self.drop_scope(child.id)
        for wait in [w for w in self.cp.waits.values() if w.scope_id == scope_id]:
            self.withdraw(wait)

    # -- bookkeeping ---------------------------------------------------------------

    def settle_status(self) -> None:
        if self.cp.status.ended:
            return
        self.cp.status = (
            InstanceStatus.ACTIVE_INCIDENTS
            if self.cp.has_open_incidents()
            else InstanceStatus.ACTIVE
        )

    def is_activity(self, node: Node) -> bool:
        return node.kind in ACTIVITY_KINDS


def _nest(values: Mapping[str, Any]) -> dict[str, Any]:
    """Targets may be paths (``order.total``): build the nested contexts they name."""
    result: dict[str, Any] = {}
    for target, value in values.items():
        parts = target.split(".")
        cursor = result
        for part in parts[:-1]:
            nxt = cursor.get(part)
            if not isinstance(nxt, dict):
                nxt = {}
                cursor[part] = nxt
            cursor = nxt
        cursor[parts[-1]] = value
    return result


def _growth(variables: Mapping[str, Any], name: str, value: Any) -> int:
    """How many bytes writing ``name`` into ``variables`` adds (negative: frees)."""
    old = encoded_size(variables[name]) if name in variables else -len(name) - 4
    return encoded_size(value) - old


def _scope_size(scope: Scope) -> int:
    return (
        encoded_size(scope.variables)
        + (encoded_size(scope.mi_results) if scope.mi_results else 0)
        + (encoded_size(scope.mi_items) if scope.mi_items else 0)
    )

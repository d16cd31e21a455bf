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
from dormant.engine_core.inputs import check_value
from dormant.engine_core.model import ACTIVITY_KINDS, Node, ProcessDefinition
from dormant.engine_core.services import Services
from dormant.engine_core.transitions import move_incident, move_token

__all__ = ["Runtime"]


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
        # This step's ``Withdrawn`` fact per node: a cancel of 10,000 inner instances
        # of one multi-instance activity is one fact counting them, not 10,000.
        self.withdrawn: dict[str, tuple[int, Fact]] = {}

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
        for name, value in variables.items():
            for scope in chain:
                if name in scope.variables:
                    scope.variables[name] = value
                    break
            else:
                chain[-1].variables[name] = value

    def apply_outputs(
        self, node: Node, token: Token, result: Mapping[str, Any], target_scope: str | None = None
    ) -> None:
        """Merge an activity's result: through its output mappings, or propagate all of it."""
        if not node.outputs:
            self.propagate(target_scope or self.token_scope(token), result)
            return
        context = {**self.token_vars(token), **result}
        mapped = {
            m.target: json_value(evaluate(m.source, context, node.id, self.now))
            for m in node.outputs
        }
        self.propagate(target_scope or token.scope_id, _nest(mapped))

    def mapped_inputs(self, node: Node, context: Mapping[str, Any]) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for m in node.inputs:
            scope = {**context, **values}
            values[m.target] = json_value(evaluate(m.source, scope, node.id, self.now))
        return _nest(values)

    # -- scopes --------------------------------------------------------------------

    def new_scope(
        self,
        node_id: str | None,
        parent_id: str | None,
        token_id: str | None,
        variables: dict[str, Any] | None = None,
        loop_index: int | None = None,
    ) -> Scope:
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
        self.cp.scopes.pop(scope_id, None)

    def tokens_in(self, scope_id: str) -> list[Token]:
        return [t for t in self.cp.tokens.values() if t.scope_id == scope_id]

    def child_scopes(self, scope_id: str) -> list[Scope]:
        return [s for s in self.cp.scopes.values() if s.parent_id == scope_id]

    # -- tokens --------------------------------------------------------------------

    def spawn(
        self,
        node_id: str,
        scope_id: str,
        lineage: list[str],
        flow_id: str | None = None,
        loop_index: int | None = None,
    ) -> Token:
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
        it is resolved. Either way no open incident outlives its token, so the
        instance's ``active_incidents`` status always names a real, actionable one.
        """
        self.withdraw_token_waits(token.id)
        move_token(token, state)
        self.cp.tokens.pop(token.id, None)
        self.close_incidents(
            token,
            IncidentState.OVERTAKEN if state is TokenState.WITHDRAWN else IncidentState.RESOLVED,
        )

    def close_incidents(self, token: Token, state: IncidentState) -> None:
        """Close the open incidents of ``token`` (resolved or overtaken), with their facts."""
        action = "overtaken" if state is IncidentState.OVERTAKEN else "resolved"
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

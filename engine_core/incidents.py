"""Incidents: a technical failure parks its token instead of killing the instance.

The incident lives in the checkpoint; operator actions (retry, resolve, drop) are
triggers applied in the same locked transaction as any other, and a scheduled retry
is a wait with a deadline, so it survives any restart (SRD-079).

* Raising withdraws the token's own waits but keeps its armed boundaries: a
  non-interrupting timer still fires while the incident is open, and an interrupting
  one overtakes it.
* A repeated failure at the same node after a retry updates the same incident.
* Inside a child instance (call activity) nothing is raised locally: the child fails
  and the caller's call-activity node raises the incident (SRD-079 FR-2).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from engine_core.checkpoint import Incident, IncidentState, Token, TokenState, WaitKind, WaitRole
from engine_core.errors import EngineInvariantError, InvalidOperation, UnknownIncident
from engine_core.expressions import TechnicalFailure
from engine_core.model import Node

if TYPE_CHECKING:
    from engine_core.runtime import Runtime

__all__ = ["drop", "guarded", "raise_incident", "resolve", "retry"]


def guarded(
    rt: Runtime,
    token: Token,
    node: Node,
    work: Callable[[], object],
    *,
    activated: Callable[[], bool] | None = None,
) -> bool:
    """Run one piece of ``token``'s work at ``node``; True when it succeeded.

    The one way a failure of the model (an expression that fails or gives what the
    element cannot use) leaves the step: an incident at the node whose work failed, on
    the token doing it. Every unit of work ``apply`` runs for a token goes through a
    guard (entering a node, leaving it, a join firing, a boundary or event
    sub-process catching with its payload), so no evaluation failure escapes
    ``apply`` and none lands on a token that is already gone. ``activated`` tells,
    after the failure, whether the node's boundaries are still armed (see
    ``raise_incident``).
    """
    try:
        work()
    except TechnicalFailure as failure:
        armed = True if activated is None else activated()
        raise_incident(rt, token, node, str(failure), failure.cause_class, activated=armed)
        return False
    return True


def raise_incident(
    rt: Runtime,
    token: Token,
    node: Node,
    cause: str,
    cause_class: str,
    job_type: str | None = None,
    *,
    activated: bool = True,
) -> None:
    """Park ``token`` at ``node`` in an incident (or update its open one).

    ``activated`` is False when the node failed while activating (its boundaries were
    withdrawn unarmed, nodes.enter): the retry must arm them then, and only then.
    """
    if rt.cp.tokens.get(token.id) is not token:
        raise EngineInvariantError(
            f"incident at {node.label} of instance {rt.cp.instance_id} raised on token "
            f"{token.id}, which has already ended: {cause}"
        )
    if rt.cp.parent is not None:
        rt.fail_instance(f"{node.label}: {cause}")
        return
    rt.withdraw_token_waits(token.id, keep_boundaries=True)
    token.state = TokenState.INCIDENT
    snapshot = rt.token_vars(token)
    incident = next(
        (
            i
            for i in rt.cp.incidents.values()
            if i.token_id == token.id and i.node_id == node.id and not i.state.closed
        ),
        None,
    )
    if incident is None:
        incident = Incident(
            id=f"{rt.cp.instance_id}.{rt.cp.next_id('i')}",
            node_id=node.id,
            node_name=node.name,
            token_id=token.id,
            scope_id=token.scope_id,
            lineage=list(token.lineage),
            cause=cause,
            cause_class=cause_class,
            first_at=rt.now,
            last_at=rt.now,
            data=snapshot,
            job_type=job_type,
            boundaries_armed=activated,
        )
        rt.cp.incidents[incident.id] = incident
    else:
        incident.attempts += 1
        incident.last_at = rt.now
        incident.cause = cause
        incident.cause_class = cause_class
        incident.data = snapshot
        incident.lineage = list(token.lineage)  # the retried token's: ends with the failed one
        incident.state = IncidentState.OPEN
        incident.boundaries_armed = activated
    rt.fact(
        "Incident",
        action="raised",
        incident=incident.id,
        node=node.id,
        cause_class=cause_class,
        attempts=incident.attempts,
    )
    policy = node.retry_policy or rt.services.incident_retry_policy
    if policy is not None and incident.attempts <= policy.attempts:
        incident.state = IncidentState.RETRY_SCHEDULED
        incident.retry_at = rt.now + timedelta(seconds=policy.backoff_seconds)
        rt.add_wait(
            WaitKind.RETRY,
            WaitRole.INCIDENT,
            node.id,
            token_id=token.id,
            due_at=incident.retry_at,
            incident_id=incident.id,
        )
        rt.fact(
            "Incident",
            action="retry-scheduled",
            incident=incident.id,
            node=node.id,
            cause_class=cause_class,
        )


def _open_incident(rt: Runtime, incident_id: str) -> tuple[Incident, Token]:
    incident = rt.cp.incidents.get(incident_id)
    if incident is None:
        open_ids = [i.id for i in rt.cp.incidents.values() if not i.state.closed]
        raise UnknownIncident(
            f"instance {rt.cp.instance_id} ({rt.cp.process_key} v{rt.cp.version}) has no "
            f"incident {incident_id!r}; open incidents: {', '.join(open_ids) or 'none'}"
        )
    if incident.state.closed:
        raise InvalidOperation(
            f"incident {incident_id} of instance {rt.cp.instance_id} is already "
            f"{incident.state.value}; only an open incident can be retried, resolved or dropped"
        )
    token = rt.cp.tokens.get(incident.token_id)
    if token is None or token.state is not TokenState.INCIDENT:
        raise InvalidOperation(
            f"incident {incident_id} of instance {rt.cp.instance_id} has no token waiting "
            f"at {incident.node_id!r} (it is being retried already)"
        )
    return incident, token


def _withdraw_retry(rt: Runtime, incident: Incident) -> None:
    for wait in [w for w in rt.cp.waits.values() if w.incident_id == incident.id]:
        rt.withdraw(wait)
    incident.retry_at = None


def retry(rt: Runtime, incident_id: str) -> str:
    """Re-run the failed node with a fresh token whose lineage ends with the failed one.

    Attempts carry on the incident. What the failed token still owned moves to the new
    token: its armed boundaries (never armed a second time), its local or
    multi-instance scope, and the incident itself, so a repeated failure updates the
    same incident. Lineage grows by one per retry, never per wake.
    """
    incident, failed = _open_incident(rt, incident_id)
    _withdraw_retry(rt, incident)
    incident.state = IncidentState.OPEN
    rt.fact(
        "Incident",
        action="retried",
        incident=incident.id,
        node=incident.node_id,
        cause_class=incident.cause_class,
        attempts=incident.attempts,
    )
    fresh = rt.spawn(
        failed.node_id,
        failed.scope_id,
        [*failed.lineage, failed.id],
        flow_id=failed.flow_id,
        loop_index=failed.loop_index,
    )
    fresh.inner_scope = failed.inner_scope
    for wait in rt.waits_of(failed.id):
        wait.token_id = fresh.id
    for scope in rt.cp.scopes.values():
        if scope.token_id == failed.id:
            scope.token_id = fresh.id
    incident.token_id = fresh.id
    rt.cp.tokens.pop(failed.id, None)
    if incident.boundaries_armed:
        # Armed before the failure (a job that failed): they stay as they are, still
        # armed or already fired (a one-shot timer leaves no wait to tell by). An
        # activation failure armed none (nodes._unarm_boundaries): the retry arms them.
        rt.keep_boundaries.add(fresh.id)
    return fresh.id


def resolve(rt: Runtime, incident_id: str) -> str:
    """Continue on the node's outgoing flows without running the node again."""
    from engine_core.leaving import leave_without_running

    incident, token = _open_incident(rt, incident_id)
    _withdraw_retry(rt, incident)
    token.state = TokenState.ACTIVE
    try:
        leave_without_running(rt, token)  # closes the incident as resolved
    except TechnicalFailure as failure:
        # A gateway chooses its flows by its conditions; if they still fail there is
        # no flow to continue on. The step is abandoned, so nothing changes.
        raise InvalidOperation(
            f"incident {incident_id} of instance {rt.cp.instance_id} cannot be resolved: "
            f"{failure}; retry it once the variables it needs are set, or drop it"
        ) from failure
    return token.id


def drop(rt: Runtime, incident_id: str) -> str:
    """Dead-letter: the incident closes, is kept, and its token blocks completion."""
    incident, token = _open_incident(rt, incident_id)
    _withdraw_retry(rt, incident)
    rt.withdraw_token_waits(token.id)
    incident.state = IncidentState.DEAD_LETTERED
    rt.fact(
        "Incident",
        action="dead-lettered",
        incident=incident.id,
        node=incident.node_id,
        cause_class=incident.cause_class,
    )
    return token.id

"""Incidents: a technical failure parks its token instead of killing the instance.

The incident lives in the checkpoint; operator actions (retry, resolve, drop) are
triggers applied in the same locked transaction as any other, and a scheduled retry
is a wait with a deadline, so it survives any restart (docs/incidents.md).

* Raising withdraws the token's own waits but keeps its armed boundaries: a
  non-interrupting timer still fires while the incident is open, and an interrupting
  one overtakes it.
* A repeated failure at the same node after a retry updates the same incident.
* Inside a child instance (call activity) nothing is raised locally: the child fails
  and the caller's call-activity node raises the incident (docs/incidents.md).
* An incident closes with its token: retried when the token moves on after a retry,
  resolved by the operator's Resolve, overtaken when it is withdrawn
  (``Runtime.close_incidents``, called wherever a token goes).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from dormant.engine_core.checkpoint import (
    Incident,
    IncidentState,
    Token,
    TokenState,
    WaitKind,
    WaitRole,
)
from dormant.engine_core.errors import EngineInvariantError, InvalidOperation, UnknownIncident
from dormant.engine_core.expressions import TechnicalFailure
from dormant.engine_core.model import Node
from dormant.engine_core.moving import fail_instance, leave_activity, leave_without_running
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.transitions import move_incident, move_token

__all__ = ["drop", "leave_or_raise", "raise_failure", "raise_incident", "resolve", "retry"]


def raise_failure(
    rt: Runtime,
    failure: TechnicalFailure,
    token: Token,
    node: Node,
    *,
    activated: bool = True,
) -> None:
    """The one way a failure of the model leaves the step: an incident.

    Every unit of work ``apply`` runs for a token catches ``TechnicalFailure`` and
    comes here: entering a node, a woken token leaving it, an inclusive join firing, a
    compensation throw moving on, a boundary or event sub-process start taking its
    payload. The incident is at ``token`` / ``node``, the unit's own, unless the failure
    names another token whose work failed inside the unit (the sub-process whose last
    token just ended, a multi-instance body whose last inner instance did): then at
    that one, whose boundaries are armed exactly while it still holds them.
    """
    if failure.token_id is not None and failure.token_id != token.id:
        owner = rt.cp.tokens.get(failure.token_id)
        if owner is None or failure.node_id is None:
            raise EngineInvariantError(
                f"a failure at {failure.node_id!r} of instance {rt.cp.instance_id} names "
                f"token {failure.token_id}, which is gone: {failure}"
            ) from failure
        token, node = owner, rt.node(failure.node_id)
        activated = any(w.role is WaitRole.BOUNDARY for w in rt.waits_of(token.id))
    raise_incident(rt, token, node, str(failure), failure.cause_class, activated=activated)


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
        fail_instance(rt, f"{node.label}: {cause}")
        return
    rt.withdraw_token_waits(token.id, keep_boundaries=True, keep_transition=True)
    move_token(token, TokenState.INCIDENT)
    snapshot: dict[str, Any] = rt.token_vars(token)
    incident = next(
        (
            i
            for i in rt.cp.incidents.values()
            if i.token_id == token.id and i.node_id == node.id and not i.state.closed
        ),
        None,
    )
    if not rt.snapshot_fits(snapshot, incident.data if incident is not None else {}):
        # Every incident keeps a copy of what its node saw: 20,000 incidents of a fork
        # bomb would copy the variables 20,000 times. Past the checkpoint bound the
        # copy is left out, and the cause says so (docs/incidents.md, the snapshot).
        snapshot = {}
        cause = f"{cause} (variables snapshot left out: DORMANT_MAX_CHECKPOINT_BYTES)"
    if incident is None:
        incident = Incident(
            id=_incident_id(rt),
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
        move_incident(incident, IncidentState.OPEN)
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
        move_incident(incident, IncidentState.RETRY_SCHEDULED)
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


def _incident_id(rt: Runtime) -> str:
    """``<instance>.i1`` for the instance's first incident, ``.i2`` for its second: an
    operator reads the number as "how many incidents so far" (issue 28: ids drawn from
    the checkpoint's shared counter made the first one ``.i3``). The checkpoint keeps
    closed incidents too, so the count never goes back; an id an older dormant drew from
    the counter is skipped, never reused."""
    n = len(rt.cp.incidents) + 1
    while f"{rt.cp.instance_id}.i{n}" in rt.cp.incidents:
        n += 1
    return f"{rt.cp.instance_id}.i{n}"


def leave_or_raise(rt: Runtime, token: Token, variables: Mapping[str, Any]) -> None:
    """A woken token leaves its node; a failure while leaving (an output mapping, an
    outgoing condition) is an incident at that node, not a lost trigger."""
    move_token(token, TokenState.ACTIVE)
    node = rt.node(token.node_id)
    try:
        leave_activity(rt, token, variables)
    except TechnicalFailure as failure:
        raise_failure(rt, failure, token, node)


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
    move_incident(incident, IncidentState.OPEN)
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
        replacing=True,
    )
    fresh.inner_scope = failed.inner_scope
    # A failed execution listener runs again, not the ones that completed before it.
    fresh.listener_phase, fresh.listener_index = failed.listener_phase, failed.listener_index
    for wait in rt.waits_of(failed.id):
        wait.token_id = fresh.id
    for scope in rt.cp.scopes.values():
        if scope.token_id == failed.id:
            scope.token_id = fresh.id
    incident.token_id = fresh.id
    move_token(failed, TokenState.WITHDRAWN)  # replaced by the fresh token
    rt.cp.tokens.pop(failed.id, None)
    if incident.boundaries_armed:
        # Armed before the failure (a job that failed): they stay as they are, still
        # armed or already fired (a one-shot timer leaves no wait to tell by). An
        # activation failure armed none (boundaries.unarm): the retry arms them.
        rt.keep_boundaries.add(fresh.id)
    return fresh.id


def resolve(rt: Runtime, incident_id: str) -> str:
    """Continue on the node's outgoing flows without running the node again."""
    incident, token = _open_incident(rt, incident_id)
    _withdraw_retry(rt, incident)
    # Closed here as ``resolved`` before the token moves: moving on closes what is
    # still open as ``retried`` (a retry's success), which this is not.
    rt.close_incidents(token, IncidentState.RESOLVED)
    move_token(token, TokenState.ACTIVE)
    try:
        leave_without_running(rt, token)
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
    move_incident(incident, IncidentState.DEAD_LETTERED)
    rt.fact(
        "Incident",
        action="dead-lettered",
        incident=incident.id,
        node=incident.node_id,
        cause_class=incident.cause_class,
    )
    return token.id

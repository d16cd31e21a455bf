"""Boundary events: armed with their activity, unarmed, fired, interrupting it.

A boundary is a wait of its host token (docs/waits.md, Boundaries), keyed by boundary node and
event definition index, armed when the token first enters the activity (the
multi-instance body, not each inner instance). Whatever makes a boundary fire — its
own timer, message or signal wait, or an error or escalation caught on the host —
goes through ``fire``: an interrupting boundary withdraws everything the host runs
and moves the host token onto the boundary; a non-interrupting one forks a token
beside the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dormant.engine_core.arming import WAITABLE, arm_event, keep_or_withdraw
from dormant.engine_core.checkpoint import IncidentState, Token, Wait, WaitRole
from dormant.engine_core.expressions import TechnicalFailure
from dormant.engine_core.incidents import raise_failure
from dormant.engine_core.model import Node
from dormant.engine_core.moving import arrive
from dormant.engine_core.runtime import Runtime

__all__ = ["arm", "fire", "fire_wait", "interrupt", "unarm"]


def arm(rt: Runtime, token: Token, activity: Node) -> None:
    variables = rt.token_vars(token)
    for boundary_id in activity.boundaries:
        boundary = rt.node(boundary_id)
        for index, definition in enumerate(boundary.events):
            if definition.kind in WAITABLE:
                arm_event(
                    rt,
                    boundary,
                    definition,
                    WaitRole.BOUNDARY,
                    variables,
                    def_index=index,
                    token_id=token.id,
                    interrupting=boundary.cancel_activity,
                )


def unarm(rt: Runtime, token: Token) -> None:
    """An activity whose ACTIVATION failed (a null correlation key, job type, input
    collection...) has opened no boundary subscription, as in Camunda 8, where all of
    an element's subscriptions are opened together after its expressions evaluated.
    Left armed, a boundary timer would later cancel the incident and carry the token
    past a failure the operator never saw. The retry arms them (incidents.retry)."""
    for wait in rt.waits_of(token.id):
        if wait.role is WaitRole.BOUNDARY:
            rt.withdraw(wait)


def interrupt(rt: Runtime, host: Token) -> None:
    """An interrupting boundary cancels its activity: every wait, inner scope, incident."""
    rt.withdraw_token_waits(host.id)
    if host.inner_scope is not None and host.inner_scope in rt.cp.scopes:
        rt.terminate_scope(host.inner_scope)
        rt.drop_scope(host.inner_scope)
    host.inner_scope = None
    rt.close_incidents(host, IncidentState.OVERTAKEN)


def fire(
    rt: Runtime, host: Token, boundary: Node, variables: Mapping[str, Any], *, interrupting: bool
) -> str:
    """The one fire path; returns the id of the token that continues at the boundary.

    The token is on the boundary before its output mappings read the payload, so a
    failing mapping is an incident at the boundary event, on that token."""
    if interrupting:
        interrupt(rt, host)
        arrive(rt, host, boundary.id)
        token, target = host, host.scope_id
    else:
        token = rt.spawn(boundary.id, host.scope_id, [*host.lineage, host.id])
        target = None
    try:
        rt.apply_outputs(boundary, token, variables, target_scope=target)
    except TechnicalFailure as failure:
        raise_failure(rt, failure, token, boundary)
    return token.id


def fire_wait(rt: Runtime, wait: Wait, variables: Mapping[str, Any]) -> str:
    """The boundary's own timer, message or signal wait fired."""
    host = rt.token_of(wait)
    boundary = rt.node(wait.node_id)
    rt.fact(
        "BoundaryFired",
        boundary=boundary.id,
        host=host.node_id,
        interrupting=boundary.cancel_activity,
    )
    if not boundary.cancel_activity:
        keep_or_withdraw(rt, wait)
    return fire(rt, host, boundary, variables, interrupting=boundary.cancel_activity)

"""Moving a running instance to another version of its process.

dormant stores tokens, waits and incidents at node ids, so a migration is a
re-pointing: every node id the checkpoint names goes through the mapping (a node not
mapped keeps its id) and must exist in the target with a compatible shape. Nothing
else changes: a timer keeps its recorded deadline (``due_at`` is never re-evaluated),
a message wait keeps its recorded name and correlation key (so its subscription row
stays as it is and still correlates), a user task keeps its task id, and an open
incident moves with its token.

``problems`` is the plan check, pure and read-only: the shell runs it for a dry run,
and ``migrate`` runs it again under the instance lock before it changes anything, so
a refused plan changes nothing. Boundaries the target adds to an activity that is
already running are not armed (they would need the activity to be entered again);
the ``Migrated`` fact counts them.
"""

from __future__ import annotations

from collections.abc import Mapping

from dormant.engine_core.checkpoint import Checkpoint, WaitRole
from dormant.engine_core.errors import InvalidOperation
from dormant.engine_core.model import Node, NodeKind, ProcessDefinition
from dormant.engine_core.runtime import Runtime
from dormant.engine_core.triggers import MigrateInstance
from dormant.engine_core.wake import INSTANCE, Wake

__all__ = ["migrate", "problems"]

_JOINS = (NodeKind.PARALLEL_GATEWAY, NodeKind.INCLUSIVE_GATEWAY)


def problems(
    source: ProcessDefinition,
    target: ProcessDefinition,
    cp: Checkpoint,
    mapping: Mapping[str, str],
    target_version: int,
) -> list[str]:
    """Why ``cp`` cannot move from ``source`` to ``target`` (empty: it can)."""
    found: list[str] = []
    if target.key != cp.process_key:
        found.append(f"the target is process {target.key!r}, not {cp.process_key!r}")
    if target_version == cp.version:
        found.append(f"the instance already runs version {cp.version}")
    for old_id, new_id in mapping.items():
        if old_id not in source.nodes:
            found.append(f"--map {old_id}={new_id}: v{cp.version} has no node {old_id!r}")
        if new_id not in target.nodes:
            found.append(f"--map {old_id}={new_id}: v{target_version} has no node {new_id!r}")

    def to(node_id: str | None) -> str | None:
        return None if node_id is None else mapping.get(node_id, node_id)

    def check(node_id: str, what: str) -> Node | None:
        src = source.nodes.get(node_id)
        dst = target.nodes.get(to(node_id) or "")
        if src is None:
            found.append(f"{what} is at {node_id!r}, which v{cp.version} does not have")
            return None
        if dst is None:
            found.append(
                f"{what} is at {node_id!r}, which v{target_version} does not have "
                f"(map it: --map {node_id}=NODE)"
            )
            return None
        if src.kind is not dst.kind:
            found.append(
                f"{what} is at {node_id!r} ({src.kind.value}); v{target_version}'s "
                f"{dst.id!r} is a {dst.kind.value}"
            )
        elif tuple(e.kind for e in src.events) != tuple(e.kind for e in dst.events):
            found.append(
                f"{what} is at {node_id!r}: its event definitions "
                f"({', '.join(e.kind.value for e in src.events) or 'none'}) differ from "
                f"v{target_version}'s {dst.id!r} "
                f"({', '.join(e.kind.value for e in dst.events) or 'none'})"
            )
        elif (src.loop is None) != (dst.loop is None) or (
            src.loop is not None
            and dst.loop is not None
            and src.loop.sequential != dst.loop.sequential
        ):
            found.append(
                f"{what} is at {node_id!r}: its multi-instance shape differs in the target"
            )
        if to(src.parent) != dst.parent:
            found.append(
                f"{what} is at {node_id!r} inside {src.parent or 'the process'}; "
                f"v{target_version}'s {dst.id!r} is inside {dst.parent or 'the process'}"
            )
        return dst

    for token in cp.tokens.values():
        dst = check(token.node_id, f"token {token.id}")
        if (
            dst is not None
            and dst.kind in _JOINS
            and token.flow_id is not None
            and (token.flow_id not in target.flows or target.flows[token.flow_id].target != dst.id)
        ):
            found.append(
                f"token {token.id} waits at join {token.node_id!r} having arrived by flow "
                f"{token.flow_id!r}, which does not lead there in v{target_version}"
            )
    for wait in cp.waits.values():
        dst = check(wait.node_id, f"{wait.kind.value} wait {wait.id}")
        if dst is None:
            continue
        if wait.def_index >= max(len(dst.events), 1):
            found.append(f"{wait.kind.value} wait {wait.id}: {dst.id!r} has no event definition")
        if wait.role is WaitRole.BOUNDARY and wait.token_id in cp.tokens:
            host = to(cp.tokens[wait.token_id].node_id)
            if dst.attached_to != host:
                found.append(
                    f"boundary {wait.node_id!r} is armed on {host!r}; v{target_version}'s "
                    f"{dst.id!r} is attached to {dst.attached_to!r}"
                )
    for incident in cp.incidents.values():
        if not incident.state.closed:
            check(incident.node_id, f"incident {incident.id}")
    for scope in cp.scopes.values():
        if scope.node_id is not None:
            check(scope.node_id, f"scope {scope.id}")
    for entry in cp.compensation:
        check(entry.node_id, f"the compensation record of {entry.node_id!r}")
    return list(dict.fromkeys(found))


def migrate(rt: Runtime, trigger: MigrateInstance) -> Wake:
    """Re-point the instance to ``trigger.version`` (lent as the services' target)."""
    cp = rt.cp
    target = rt.services.migration_target
    if target is None:
        raise InvalidOperation(f"version {trigger.version} of {cp.process_key!r} is not loaded")
    found = problems(rt.defn, target, cp, trigger.mapping, trigger.version)
    if found:
        raise InvalidOperation(
            f"instance {cp.instance_id} cannot move from {cp.process_key} v{cp.version} to "
            f"v{trigger.version}: " + "; ".join(found)
        )

    def to(node_id: str) -> str:
        return trigger.mapping.get(node_id, node_id)

    unarmed = 0
    for token in cp.tokens.values():
        had = {to(b) for b in rt.defn.nodes[token.node_id].boundaries}
        unarmed += len(set(target.nodes[to(token.node_id)].boundaries) - had)
        token.node_id = to(token.node_id)
    for wait in cp.waits.values():
        wait.node_id = to(wait.node_id)
    for incident in cp.incidents.values():
        if not incident.state.closed:
            incident.node_id = to(incident.node_id)
            incident.node_name = target.nodes[incident.node_id].name
    for scope in cp.scopes.values():
        if scope.node_id is not None:
            scope.node_id = to(scope.node_id)
    for entry in cp.compensation:
        entry.node_id = to(entry.node_id)
    old = cp.version
    cp.version = trigger.version
    rt.defn = target
    rt.fact(
        "Migrated",
        from_version=old,
        to_version=trigger.version,
        mapped=",".join(f"{k}>{v}" for k, v in sorted(trigger.mapping.items())) or None,
        tokens=len(cp.tokens),
        waits=len(cp.waits),
        boundaries_not_armed=unarmed,
    )
    return INSTANCE

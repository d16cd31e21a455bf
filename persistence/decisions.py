"""DMN decisions in the database, and what is deployed lent to the core.

``parse_decisions`` reads a .dmn file before anything is written; ``insert_decisions``
stores a new version of each of its decisions in a deployment (persistence/
deployments.py decides when: a deployment where nothing changed bumps nothing).
``DecisionCache`` builds the ``Services`` a step runs with: the latest version of every
decision, parsed once per file checksum, and for bindings every decision and process
version. Only a process that has a business rule task or a call activity pays for it,
and then one ``count(*)`` per trigger: a new deployment (by any process on any
machine) is seen by the next trigger -- which is what lets an incident retry after
``dormant deploy FILE.dmn`` succeed with no restart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, insert, select

from dormant.engine_core.bindings import DecisionVersion, ProcessVersion
from dormant.engine_core.dmn import Decision, read_dmn
from dormant.engine_core.engine import Services
from dormant.engine_core.model import NodeKind, ProcessDefinition
from dormant.persistence.tables import decisions, definitions, deployments

__all__ = [
    "DecisionCache",
    "ParsedDecisions",
    "deployed_decision",
    "file_versions",
    "insert_decisions",
    "latest_decision",
    "parse_decisions",
    "uses_decisions",
]

# Parsed .dmn files shared by every Store in the process: file checksum -> id -> decision.
_PARSED: dict[str, dict[str, Decision]] = {}
_PARSED_LOCK = threading.Lock()


def _checksum(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _decision_checksum(decision: Decision) -> str:
    """The decision's own content: the repr of its frozen model is deterministic."""
    return _checksum(repr(decision))


@dataclass(frozen=True, slots=True)
class ParsedDecisions:
    """A .dmn file read (and refused) before anything is written."""

    text: str
    file_checksum: str
    decisions: tuple[Decision, ...]

    def checksums(self) -> dict[str, str]:
        return {d.id: _decision_checksum(d) for d in self.decisions}


def parse_decisions(text: str) -> ParsedDecisions:
    parsed = tuple(read_dmn(text))
    file_checksum = _checksum(text)
    with _PARSED_LOCK:
        _PARSED[file_checksum] = {d.id: d for d in parsed}
    return ParsedDecisions(text, file_checksum, parsed)


def latest_decision(conn: Connection, decision_id: str) -> tuple[int, str] | None:
    """(version, checksum) of the newest deployed version of ``decision_id``."""
    row = conn.execute(
        select(decisions.c.version, decisions.c.checksum)
        .where(decisions.c.decision_id == decision_id)
        .order_by(decisions.c.version.desc())
        .limit(1)
    ).first()
    return None if row is None else (int(row.version), str(row.checksum))


def insert_decisions(
    conn: Connection, parsed: ParsedDecisions, now: datetime, deployment_key: int
) -> list[tuple[str, int]]:
    """A new version of every decision of the file, in ``deployment_key``."""
    out: list[tuple[str, int]] = []
    checksums = parsed.checksums()
    for decision in parsed.decisions:
        latest = latest_decision(conn, decision.id)
        version = 1 if latest is None else latest[0] + 1
        conn.execute(
            insert(decisions).values(
                decision_id=decision.id,
                version=version,
                name=decision.name,
                checksum=checksums[decision.id],
                source=parsed.text,
                dmn_checksum=parsed.file_checksum,
                deployed_at=now,
                deployment_key=deployment_key,
                version_tag=decision.version_tag,
            )
        )
        out.append((decision.id, version))
    return out


def uses_decisions(definition: ProcessDefinition) -> bool:
    """Whether a step of this process may evaluate a decision (cheap: a node scan)."""
    return any(n.decision_id is not None for n in definition.nodes.values())


def _binds(definition: ProcessDefinition) -> tuple[bool, bool]:
    """(needs the deployed processes, needs every decision version): a call activity
    binds its child; a decision bound by deployment needs the caller's deployment."""
    processes = versions = False
    for n in definition.nodes.values():
        if n.kind is NodeKind.CALL_ACTIVITY:
            processes = True
        if n.decision_id is not None and n.decision_binding != "latest":
            versions = True
            processes = processes or n.decision_binding == "deployment"
    return processes, versions


class DecisionCache:
    """The Store's ``Services`` with what is deployed, refreshed when a deployment is
    added: the latest decisions, every decision version and every process version
    (for bindings, ``engine_core/bindings.py``), each only for a process that needs
    it. One ``count(*)`` of ``deployments`` per such trigger: rows are only ever
    inserted and every deploy adds one, so an unchanged count is an unchanged set."""

    def __init__(self, base: Services) -> None:
        self.base = base
        self._lock = threading.Lock()
        self._seen: tuple[int, _Deployed] | None = None

    def services(self, conn: Connection, definition: ProcessDefinition) -> Services:
        needs_processes, needs_versions = _binds(definition)
        if not (needs_processes or needs_versions or uses_decisions(definition)):
            return self.base
        count = int(conn.execute(select(func.count()).select_from(deployments)).scalar_one())
        seen = self._seen
        if seen is None or seen[0] != count:
            deployed = _Deployed(_latest(conn), _decision_versions(conn), _process_versions(conn))
            with self._lock:
                if self._seen is None or count >= self._seen[0]:
                    self._seen = (count, deployed)
        else:
            deployed = seen[1]
        return dataclasses.replace(
            self.base,
            decisions=deployed.latest,
            decision_versions=deployed.versions if needs_versions else {},
            processes=deployed.processes if needs_processes else None,
        )


@dataclass(frozen=True, slots=True)
class _Deployed:
    latest: dict[str, Decision]
    versions: dict[str, tuple[DecisionVersion, ...]]
    processes: dict[str, tuple[ProcessVersion, ...]]


def _process_versions(conn: Connection) -> dict[str, tuple[ProcessVersion, ...]]:
    """Every deployed process version as a binding sees it (no model is parsed)."""
    out: dict[str, list[ProcessVersion]] = {}
    rows = conn.execute(
        select(
            definitions.c.key,
            definitions.c.version,
            definitions.c.deployment_key,
            definitions.c.version_tag,
            definitions.c.starts,
        )
    )
    for row in rows:
        out.setdefault(row.key, []).append(
            ProcessVersion(
                int(row.version),
                None if row.deployment_key is None else int(row.deployment_key),
                row.version_tag,
                bool((row.starts or {}).get("none", True)),
            )
        )
    return {key: tuple(versions) for key, versions in out.items()}


def _parsed_file(
    conn: Connection, checksum: str, decision_id: str, version: int
) -> dict[str, Decision]:
    parsed = _PARSED.get(checksum)
    if parsed is None:
        source = conn.execute(
            select(decisions.c.source).where(
                decisions.c.decision_id == decision_id, decisions.c.version == version
            )
        ).scalar_one()
        parsed = {d.id: d for d in read_dmn(source)}
        with _PARSED_LOCK:
            _PARSED[checksum] = parsed
    return parsed


def _decision_versions(conn: Connection) -> dict[str, tuple[DecisionVersion, ...]]:
    """Every decision version with its own file's decisions; each file parsed once."""
    out: dict[str, list[DecisionVersion]] = {}
    rows = conn.execute(
        select(
            decisions.c.decision_id,
            decisions.c.version,
            decisions.c.dmn_checksum,
            decisions.c.deployment_key,
            decisions.c.version_tag,
        )
    )
    for row in rows:
        drg = _parsed_file(conn, row.dmn_checksum, row.decision_id, int(row.version))
        out.setdefault(row.decision_id, []).append(
            DecisionVersion(
                int(row.version),
                None if row.deployment_key is None else int(row.deployment_key),
                row.version_tag,
                drg,
            )
        )
    return {key: tuple(versions) for key, versions in out.items()}


def _latest(conn: Connection) -> dict[str, Decision]:
    """The latest version of every decision; each file is parsed once per process."""
    newest = (
        select(decisions.c.decision_id, func.max(decisions.c.version).label("version"))
        .group_by(decisions.c.decision_id)
        .subquery()
    )
    rows = conn.execute(
        select(decisions.c.decision_id, decisions.c.version, decisions.c.dmn_checksum).join(
            newest,
            (decisions.c.decision_id == newest.c.decision_id)
            & (decisions.c.version == newest.c.version),
        )
    ).all()
    return {
        row.decision_id: _parsed_file(conn, row.dmn_checksum, row.decision_id, int(row.version))[
            row.decision_id
        ]
        for row in rows
    }


def file_versions(conn: Connection, decision_id: str, version: int) -> dict[str, int]:
    """The version of each decision deployed from the same file as ``decision_id``
    ``version`` (the newest deployment of that file): the decisions it requires are
    evaluated as deployed with it, and each has its own version count."""
    checksum = (
        select(decisions.c.dmn_checksum)
        .where(decisions.c.decision_id == decision_id, decisions.c.version == version)
        .scalar_subquery()
    )
    rows = conn.execute(
        select(decisions.c.decision_id, func.max(decisions.c.version))
        .where(decisions.c.dmn_checksum == checksum)
        .group_by(decisions.c.decision_id)
    )
    found = {str(row[0]): int(row[1]) for row in rows}
    found[decision_id] = version
    return found


def deployed_decision(
    conn: Connection, decision_id: str, version: int | None = None
) -> tuple[int, dict[str, Decision]] | None:
    """A deployed decision's version (the latest when None) and the decisions of its
    own file (what it requires is evaluated as deployed with it); None when there is
    none. What the REST API's decision evaluation reads (docs/camunda-api.md)."""
    query = select(decisions.c.version, decisions.c.dmn_checksum).where(
        decisions.c.decision_id == decision_id
    )
    if version is not None:
        query = query.where(decisions.c.version == version)
    row = conn.execute(query.order_by(decisions.c.version.desc()).limit(1)).first()
    if row is None:
        return None
    found = int(row.version)
    return found, _parsed_file(conn, str(row.dmn_checksum), decision_id, found)

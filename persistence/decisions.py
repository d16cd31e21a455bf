"""DMN decisions in the database: deploy them, and lend the latest ones to the core.

``deploy_decisions`` stores each decision of a .dmn file as a new version when its own
content changed (a redeploy of identical content bumps nothing, like a BPMN deploy).
``DecisionCache`` builds the ``Services`` a step runs with: the latest version of every
decision, parsed once per file checksum. Only a process that has a business rule task
calling a decision pays for it, and then one ``count(*)`` per trigger: rows are only
ever inserted, so an unchanged count means an unchanged set, and a new deployment (by
any process on any machine) is seen by the next trigger -- which is what lets an
incident retry after ``dormant deploy FILE.dmn`` succeed with no restart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from datetime import datetime

from sqlalchemy import Connection, func, insert, select

from engine_core.dmn import Decision, read_dmn
from engine_core.engine import Services
from engine_core.model import ProcessDefinition
from persistence.tables import decisions

__all__ = ["DecisionCache", "deploy_decisions", "uses_decisions"]

# Parsed .dmn files shared by every Store in the process: file checksum -> id -> decision.
_PARSED: dict[str, dict[str, Decision]] = {}
_PARSED_LOCK = threading.Lock()


def _checksum(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _decision_checksum(decision: Decision) -> str:
    """The decision's own content: the repr of its frozen model is deterministic."""
    return _checksum(repr(decision))


def deploy_decisions(conn: Connection, text: str, now: datetime) -> list[tuple[str, int, bool]]:
    """(decision id, version, created) for every decision of ``text``, in the caller's
    transaction. The file is read (and refused) before anything is written."""
    parsed = read_dmn(text)
    file_checksum = _checksum(text)
    with _PARSED_LOCK:
        _PARSED[file_checksum] = {d.id: d for d in parsed}
    out: list[tuple[str, int, bool]] = []
    for decision in parsed:
        checksum = _decision_checksum(decision)
        latest = conn.execute(
            select(decisions.c.version, decisions.c.checksum)
            .where(decisions.c.decision_id == decision.id)
            .order_by(decisions.c.version.desc())
            .limit(1)
        ).first()
        if latest is not None and latest.checksum == checksum:
            out.append((decision.id, int(latest.version), False))
            continue
        version = 1 if latest is None else int(latest.version) + 1
        conn.execute(
            insert(decisions).values(
                decision_id=decision.id,
                version=version,
                name=decision.name,
                checksum=checksum,
                source=text,
                dmn_checksum=file_checksum,
                deployed_at=now,
            )
        )
        out.append((decision.id, version, True))
    return out


def uses_decisions(definition: ProcessDefinition) -> bool:
    """Whether a step of this process may evaluate a decision (cheap: a node scan)."""
    return any(n.decision_id is not None for n in definition.nodes.values())


class DecisionCache:
    """The Store's ``Services`` with the latest decisions, refreshed when rows appear."""

    def __init__(self, base: Services) -> None:
        self.base = base
        self._lock = threading.Lock()
        self._seen: tuple[int, Services] = (0, base)

    def services(self, conn: Connection, definition: ProcessDefinition) -> Services:
        if not uses_decisions(definition):
            return self.base
        count = int(conn.execute(select(func.count()).select_from(decisions)).scalar_one())
        seen_count, services = self._seen
        if count == seen_count:
            return services
        loaded = dataclasses.replace(self.base, decisions=_latest(conn))
        with self._lock:
            if count >= self._seen[0]:
                self._seen = (count, loaded)
        return loaded


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
    out: dict[str, Decision] = {}
    for row in rows:
        parsed = _PARSED.get(row.dmn_checksum)
        if parsed is None:
            source = conn.execute(
                select(decisions.c.source).where(
                    decisions.c.decision_id == row.decision_id,
                    decisions.c.version == row.version,
                )
            ).scalar_one()
            parsed = {d.id: d for d in read_dmn(source)}
            with _PARSED_LOCK:
                _PARSED[row.dmn_checksum] = parsed
        out[row.decision_id] = parsed[row.decision_id]
    return out

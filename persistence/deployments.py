"""Deploying processes and decisions, and finding the deployed model an instance is
pinned to. A mixin of the Store: the same engine and transactions, kept apart because
deployment changes definitions, never instances.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, insert, select

from engine_core.errors import UnknownProcess
from engine_core.model import ProcessDefinition
from persistence.decisions import deploy_decisions
from persistence.start_timers import replace_start_timers
from persistence.tables import definitions

__all__ = ["Deployment", "Deployments"]

log = logging.getLogger("dormant.store")

# Parsed definitions shared by every Store in the process: (checksum, key) -> model.
# Parsing is deterministic in the source, so the checksum is a safe key.
_PARSED: dict[tuple[str, str], ProcessDefinition] = {}
_PARSED_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class Deployment:
    key: str
    version: int
    created: bool


def _starts_of(definition: ProcessDefinition) -> dict[str, dict[str, list[str]]]:
    """Message/signal start names -> node ids, kept on the row for routing."""
    out: dict[str, dict[str, list[str]]] = {"message": {}, "signal": {}}
    for node in definition.message_starts():
        if node.event.message_name:
            out["message"].setdefault(node.event.message_name, []).append(node.id)
    for node in definition.signal_starts():
        if node.event.signal_name:
            out["signal"].setdefault(node.event.signal_name, []).append(node.id)
    return out


class Deployments:
    """Definitions and decisions: deploy, look up, route starts."""

    _definitions: dict[tuple[str, int], ProcessDefinition]

    def transaction(self) -> AbstractContextManager[Connection]:  # pragma: no cover - Store's
        raise NotImplementedError

    def read(self) -> AbstractContextManager[Connection]:  # pragma: no cover - Store's
        raise NotImplementedError

    def deploy(self, source: str | bytes, now: datetime) -> list[Deployment]:
        """Deploy every executable process in ``source``, or every decision of a DMN
        document (told apart by the root element's namespace, never the file name).

        Identical content for a key does not bump its version, so re-running a deploy
        script is harmless; changed content gets version + 1, and running instances
        stay pinned to the version they started on. Decisions are not pinned: a
        business rule task evaluates the latest version (Camunda 8).
        """
        from engine_core.bpmn import read_bpmn  # the reader validates and refuses first
        from engine_core.dmn import is_dmn
        from engine_core.xml_input import model_text

        text = model_text(source)  # bytes decoded as their XML declaration says
        if is_dmn(text):
            return self._deploy_decisions(text, now)
        parsed = read_bpmn(text)
        checksum = hashlib.sha256(text.encode("utf-8")).hexdigest()
        out: list[Deployment] = []
        with self.transaction() as conn:
            for definition in parsed:
                latest = conn.execute(
                    select(definitions.c.version, definitions.c.checksum)
                    .where(definitions.c.key == definition.key)
                    .order_by(definitions.c.version.desc())
                    .limit(1)
                ).first()
                if latest is not None and latest.checksum == checksum:
                    out.append(Deployment(definition.key, latest.version, False))
                    continue
                version = 1 if latest is None else latest.version + 1
                conn.execute(
                    insert(definitions).values(
                        key=definition.key,
                        version=version,
                        checksum=checksum,
                        source=text,
                        deployed_at=now,
                        starts=_starts_of(definition),
                    )
                )
                with _PARSED_LOCK:
                    _PARSED[(checksum, definition.key)] = definition
                # The new version's timer starts replace the old version's, in this
                # same transaction: a deploy never leaves both (or neither) armed.
                replace_start_timers(conn, definition, version, now)
                out.append(Deployment(definition.key, version, True))
        for d in out:
            log.info("deployed %s v%d%s", d.key, d.version, "" if d.created else " (unchanged)")
        return out

    def _deploy_decisions(self, text: str, now: datetime) -> list[Deployment]:
        with self.transaction() as conn:
            out = [Deployment(d, v, c) for d, v, c in deploy_decisions(conn, text, now)]
        for d in out:
            log.info(
                "deployed decision %s v%d%s", d.key, d.version, "" if d.created else " (unchanged)"
            )
        return out

    def definition(
        self, key: str, version: int | None = None, *, conn: Connection | None = None
    ) -> tuple[ProcessDefinition, int]:
        """The deployed model (latest when ``version`` is None) and its version."""
        if version is not None and (key, version) in self._definitions:
            return self._definitions[(key, version)], version
        if conn is None:
            with self.read() as c:
                return self.definition(key, version, conn=c)
        q = select(definitions.c.version, definitions.c.checksum).where(definitions.c.key == key)
        q = q.where(definitions.c.version == version) if version is not None else q
        row = conn.execute(q.order_by(definitions.c.version.desc()).limit(1)).first()
        if row is None:
            raise self._unknown_process(conn, key, version)
        cached = _PARSED.get((row.checksum, key))
        if cached is None:
            from engine_core.bpmn import read_bpmn

            source = conn.execute(
                select(definitions.c.source).where(
                    definitions.c.key == key, definitions.c.version == row.version
                )
            ).scalar_one()
            with _PARSED_LOCK:
                for d in read_bpmn(source):
                    _PARSED[(row.checksum, d.key)] = d
            cached = _PARSED[(row.checksum, key)]
        self._definitions[(key, row.version)] = cached
        return cached, int(row.version)

    def _unknown_process(self, conn: Connection, key: str, version: int | None) -> UnknownProcess:
        versions = [
            v
            for (v,) in conn.execute(
                select(definitions.c.version)
                .where(definitions.c.key == key)
                .order_by(definitions.c.version)
            )
        ]
        if versions:
            listed = ", ".join(str(v) for v in versions)
            return UnknownProcess(
                f"process {key!r} has no version {version}; deployed versions: {listed}"
            )
        keys = [
            k
            for (k,) in conn.execute(
                select(definitions.c.key).distinct().order_by(definitions.c.key)
            )
        ]
        return UnknownProcess(
            f"no process {key!r} is deployed; deployed: {', '.join(keys) if keys else '(none)'}"
        )

    def latest_starts(self, kind: str, name: str) -> list[tuple[str, int, list[str]]]:
        """(key, latest version, start node ids) of processes started by ``kind`` ``name``."""
        latest = (
            select(definitions.c.key, func.max(definitions.c.version).label("version"))
            .group_by(definitions.c.key)
            .subquery()
        )
        q = select(definitions.c.key, definitions.c.version, definitions.c.starts).join(
            latest,
            (definitions.c.key == latest.c.key) & (definitions.c.version == latest.c.version),
        )
        out = []
        with self.read() as conn:
            for row in conn.execute(q.order_by(definitions.c.key)):
                nodes = (row.starts or {}).get(kind, {}).get(name)
                if nodes:
                    out.append((row.key, int(row.version), list(nodes)))
        return out

    def _tagged_version(self, conn: Connection, key: str, tag: str) -> int:
        """The newest deployed version of ``key`` whose model carries ``tag``."""
        rows = conn.execute(
            select(definitions.c.version)
            .where(definitions.c.key == key)
            .order_by(definitions.c.version.desc())
        )
        versions = [int(r.version) for r in rows]
        for version in versions:
            if self.definition(key, version, conn=conn)[0].version_tag == tag:
                return version
        if not versions:
            raise self._unknown_process(conn, key, None)
        raise UnknownProcess(
            f"no deployed version of process {key!r} has version tag {tag!r} "
            f"(versions: {', '.join(map(str, sorted(versions)))}); deploy one with "
            f'<zeebe:versionTag value="{tag}"/>'
        )

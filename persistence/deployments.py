"""Deploying processes and decisions, and finding the deployed model an instance is
pinned to. The Store's part ``store.deployments``: its transactions, kept apart because
deployment changes definitions, never instances.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, bindparam, func, insert, select, update

from dormant.engine_core.bpmn import read_bpmn  # the reader validates and refuses first
from dormant.engine_core.dmn import is_dmn
from dormant.engine_core.errors import InvalidModel, UnknownDeployment, UnknownProcess
from dormant.engine_core.model import ProcessDefinition
from dormant.engine_core.tenants import DEFAULT_TENANT
from dormant.engine_core.xml_input import model_text
from dormant.persistence import audit, round_trips, savepoints
from dormant.persistence.db import Transactions
from dormant.persistence.decisions import (
    ParsedDecisions,
    insert_decisions,
    latest_decision,
    parse_decisions,
)
from dormant.persistence.forms import ParsedForm, insert_form, is_form, latest_form, parse_form
from dormant.persistence.start_timers import replace_start_timers
from dormant.persistence.tables import definitions, deployments

__all__ = [
    "Deployment",
    "DeploymentRecord",
    "Deployments",
    "Resource",
    "deployments_count_column",
]

log = logging.getLogger("dormant.store")

# Parsed definitions shared by every Store in the process: (checksum, key) -> model.
# Parsing is deterministic in the source, so the checksum is a safe key.
_PARSED: dict[tuple[str, str], ProcessDefinition] = {}
_PARSED_LOCK = threading.Lock()

# A start's definition lookup, built once per process (bound parameters): building a
# statement and its cache key at every start cost about 90 microseconds.
_LATEST_DEFINITION = (
    select(definitions.c.version, definitions.c.checksum, definitions.c.tenant_id)
    .where(definitions.c.key == bindparam("key"))
    .order_by(definitions.c.version.desc())
    .limit(1)
)
_DEFINITION_VERSION = select(
    definitions.c.version, definitions.c.checksum, definitions.c.tenant_id
).where(definitions.c.key == bindparam("key"), definitions.c.version == bindparam("version"))


@dataclass(frozen=True, slots=True)
class Resource:
    """One resource of a deployment: a process (``id`` is its key), a decision or a
    form (``id``: the form's id)."""

    kind: str  # "process" | "decision" | "form"
    id: str
    version: int
    # False: unchanged, so this deployment made no new version; ``version`` is the
    # latest one, made by an earlier deployment.
    created: bool
    name: str | None = None  # the file it came from, when deployed from a file


@dataclass(frozen=True, slots=True)
class Deployment:
    """What a deploy returns: one resource (``key``/``version``: the process key or
    decision id and its version, as before deployments were records), the key of the
    deployment it came out of, and every resource of that deployment."""

    key: str
    version: int
    created: bool
    deployment_key: int | None = None
    resources: tuple[Resource, ...] = ()
    kind: str = "process"


@dataclass(frozen=True, slots=True)
class DeploymentRecord:
    """A row of ``deployments``: the set of resources deployed together."""

    key: int
    deployed_at: datetime
    resources: tuple[Resource, ...]
    tenant: str = DEFAULT_TENANT


@dataclass(frozen=True, slots=True)
class _Parsed:
    """One document of a deployment, read (and refused) before anything is written."""

    name: str | None
    text: str
    checksum: str
    processes: tuple[ProcessDefinition, ...] = ()
    decisions: ParsedDecisions | None = None
    form: ParsedForm | None = None


def deployments_count_column() -> Any:
    """How many deployments there are: the version of ``latest_starts``' index, as a
    scalar subquery another statement can carry as one of its columns."""
    return select(func.count()).select_from(deployments).scalar_subquery()


def _starts_of(definition: ProcessDefinition) -> dict[str, Any]:
    """Start names -> node ids, kept on the row for routing, and whether the process
    has a none start event (a call activity can start only that)."""
    out: dict[str, Any] = {"message": {}, "signal": {}}
    for node in definition.message_starts():
        if node.event.message_name:
            out["message"].setdefault(node.event.message_name, []).append(node.id)
    for node in definition.signal_starts():
        if node.event.signal_name:
            out["signal"].setdefault(node.event.signal_name, []).append(node.id)
    out["none"] = bool(definition.none_starts(None))
    return out


def _parse(source: str | bytes, name: str | None) -> _Parsed:
    text = model_text(source)  # bytes decoded as their XML declaration says
    checksum = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if is_form(text):  # a Camunda Form (JSON): told apart by content, as DMN is
        return _Parsed(name, text, checksum, form=parse_form(text, name))
    if is_dmn(text):  # told apart by the root element's namespace, never the file name
        return _Parsed(name, text, checksum, decisions=parse_decisions(text))
    return _Parsed(name, text, checksum, processes=tuple(read_bpmn(text)))


def _resources(payload: Any) -> tuple[Resource, ...]:
    return tuple(
        Resource(r["kind"], r["id"], int(r["version"]), bool(r["created"]), r.get("name"))
        for r in payload or ()
    )


# (kind, tenant, name) -> (process key, latest version, start node ids)
_StartsIndex = dict[tuple[str, str, str], list[tuple[str, int, list[str]]]]


def _starts_index(conn: Connection) -> _StartsIndex:
    latest = (
        select(definitions.c.key, func.max(definitions.c.version).label("version"))
        .group_by(definitions.c.key)
        .subquery()
    )
    q = select(
        definitions.c.key, definitions.c.version, definitions.c.starts, definitions.c.tenant_id
    ).join(
        latest,
        (definitions.c.key == latest.c.key) & (definitions.c.version == latest.c.version),
    )
    out: _StartsIndex = {}
    for row in conn.execute(q.order_by(definitions.c.key)):
        for kind in ("message", "signal"):
            for name, nodes in ((row.starts or {}).get(kind) or {}).items():
                if nodes:
                    out.setdefault((kind, row.tenant_id, name), []).append(
                        (row.key, int(row.version), list(nodes))
                    )
    return out


class Deployments:
    """Definitions and decisions: deploy, look up, route starts (``store.deployments``).

    Holds this process's cache of parsed definitions: a deployed version never
    changes, so a definition is parsed once per process."""

    def __init__(self, db: Transactions) -> None:
        self._db = db
        self._definitions: dict[tuple[str, int], ProcessDefinition] = {}
        # The latest version of each key this process has looked up (a guess for a
        # start to come: ``Store.may_run_a_job_first``).
        self._latest_seen: dict[str, ProcessDefinition] = {}
        # Process key -> the tenant that owns it, read with its definition: a key's
        # tenant never changes (``_owned``), so it is cached as the model is.
        self._tenants: dict[str, str] = {}
        # (count of deployments, (kind, tenant, name) -> the processes it starts).
        self._starts_index: tuple[int, _StartsIndex] | None = None

    def seen(self, key: str, version: int | None) -> ProcessDefinition | None:
        """The definition of ``key`` this process has already parsed: ``version``'s,
        else (no version asked, or not parsed) the latest it has looked up; None when
        it has parsed none. A guess for a start to come, never a lookup."""
        known = self._definitions.get((key, version)) if version is not None else None
        return known if known is not None else self._latest_seen.get(key)

    def deploy(
        self, source: str | bytes, now: datetime, *, tenant: str = DEFAULT_TENANT
    ) -> list[Deployment]:
        """Deploy every executable process in ``source``, or every decision of a DMN
        document: one deployment; one ``Deployment`` per resource."""
        return self.deploy_many([source], now, tenant=tenant)

    def deploy_many(
        self,
        sources: Sequence[str | bytes],
        now: datetime,
        names: Sequence[str | None] | None = None,
        *,
        tenant: str = DEFAULT_TENANT,
        audited: Mapping[str, Any] | None = None,
    ) -> list[Deployment]:
        """Deploy several documents (BPMN and DMN) as ONE deployment, in one
        transaction; every document is read and refused before anything is written.
        ``audited``: the operator's command, whose ``done`` row (persistence/audit.py)
        commits with the deployment, naming its key and resources.

        Identical content bumps no version, so re-running a deploy script is harmless
        (it still records a deployment, naming the versions it found). When any
        resource of the deployment is new or changed, every resource of it gets a new
        version in this deployment (as Zeebe does since bindings): a call activity or
        business rule task bound by ``deployment`` then finds its target beside it.
        Running instances stay pinned to the version they started on; decisions are
        not pinned (a business rule task binds when it runs).
        """
        names = list(names) if names is not None else [None] * len(sources)
        parsed = [_parse(source, name) for source, name in zip(sources, names, strict=True)]
        if not any(
            p.processes or p.form or (p.decisions and p.decisions.decisions) for p in parsed
        ):
            return []
        with self._db.transaction() as conn:
            self._owned(conn, parsed, tenant)
            resources, changed = self._unchanged(conn, parsed)
            key = int(
                conn.execute(
                    insert(deployments)
                    .values(deployed_at=now, resources=[], tenant_id=tenant)
                    .returning(deployments.c.key)
                ).scalar_one()
            )
            if changed:
                resources = self._insert_all(conn, parsed, key, now, tenant)
            conn.execute(
                update(deployments)
                .where(deployments.c.key == key)
                .values(resources=[dataclasses.asdict(r) for r in resources])
            )
            if audited is not None:
                names_deployed = [f"{r.id} v{r.version}" for r in resources]
                row = audit.done_row(
                    audited, now, target=str(key), more={"resources": names_deployed}
                )
                audit.record(conn, [row])
        everything = tuple(resources)
        out = [Deployment(r.id, r.version, r.created, key, everything, r.kind) for r in everything]
        for d in out:
            log.info(
                "deployed %s %s v%d in deployment %d%s",
                d.kind,
                d.key,
                d.version,
                key,
                "" if d.created else " (unchanged)",
            )
        return out

    @staticmethod
    def _owned(conn: Connection, parsed: list[_Parsed], tenant: str) -> None:
        """A process id belongs to the tenant that deployed it first: every version of
        a key has one tenant, so a start, a message start and a call activity resolve
        a key to one tenant's model (docs/tenants.md). Another tenant's deploy of that
        id is refused before anything is written."""
        keys = sorted({d.key for doc in parsed for d in doc.processes})
        if not keys:
            return
        owners = conn.execute(
            select(definitions.c.key, definitions.c.tenant_id)
            .where(definitions.c.key.in_(keys), definitions.c.tenant_id != tenant)
            .limit(1)
        ).first()
        if owners is not None:
            raise InvalidModel(
                f"process id {owners.key!r} is deployed for another tenant; a process id "
                f"belongs to one tenant, deploy it for tenant {tenant!r} under another id"
            )

    def _unchanged(self, conn: Connection, parsed: list[_Parsed]) -> tuple[list[Resource], bool]:
        """Each resource at its latest version, and whether any is new or changed."""
        out: list[Resource] = []
        changed = False
        for doc in parsed:
            for definition in doc.processes:
                latest = conn.execute(
                    select(definitions.c.version, definitions.c.checksum)
                    .where(definitions.c.key == definition.key)
                    .order_by(definitions.c.version.desc())
                    .limit(1)
                ).first()
                if latest is None or latest.checksum != doc.checksum:
                    changed = True
                    continue
                out.append(
                    Resource("process", definition.key, int(latest.version), False, doc.name)
                )
            if doc.form is not None:
                found_form = latest_form(conn, doc.form.form_id)
                if found_form is None or found_form[1] != doc.form.checksum:
                    changed = True
                else:
                    out.append(Resource("form", doc.form.form_id, found_form[0], False, doc.name))
            if doc.decisions is not None:
                for decision_id, checksum in doc.decisions.checksums().items():
                    found = latest_decision(conn, decision_id)
                    if found is None or found[1] != checksum:
                        changed = True
                        continue
                    out.append(Resource("decision", decision_id, found[0], False, doc.name))
        return out, changed

    def _insert_all(
        self, conn: Connection, parsed: list[_Parsed], key: int, now: datetime, tenant: str
    ) -> list[Resource]:
        out: list[Resource] = []
        for doc in parsed:
            for definition in doc.processes:
                latest = conn.execute(
                    select(func.max(definitions.c.version)).where(
                        definitions.c.key == definition.key
                    )
                ).scalar()
                version = 1 if latest is None else int(latest) + 1
                conn.execute(
                    insert(definitions).values(
                        key=definition.key,
                        version=version,
                        checksum=doc.checksum,
                        source=doc.text,
                        deployed_at=now,
                        starts=_starts_of(definition),
                        deployment_key=key,
                        version_tag=definition.version_tag,
                        tenant_id=tenant,
                    )
                )
                with _PARSED_LOCK:
                    _PARSED[(doc.checksum, definition.key)] = definition
                # The new version's timer starts replace the old version's, in this
                # same transaction: a deploy never leaves both (or neither) armed.
                replace_start_timers(conn, definition, version, now)
                out.append(Resource("process", definition.key, version, True, doc.name))
            if doc.form is not None:
                version = insert_form(conn, doc.form, now, key)
                out.append(Resource("form", doc.form.form_id, version, True, doc.name))
            if doc.decisions is not None:
                for decision_id, version in insert_decisions(conn, doc.decisions, now, key):
                    out.append(Resource("decision", decision_id, version, True, doc.name))
        return out

    def records(self, limit: int = 100, *, tenant: str | None = None) -> list[DeploymentRecord]:
        """The newest deployments first (of ``tenant`` only, when given)."""
        q = select(deployments).order_by(deployments.c.key.desc()).limit(limit)
        if tenant is not None:
            q = q.where(deployments.c.tenant_id == tenant)
        with self._db.read() as conn:
            rows = conn.execute(q).all()
        return [
            DeploymentRecord(int(r.key), r.deployed_at, _resources(r.resources), r.tenant_id)
            for r in rows
        ]

    def record(self, key: int) -> DeploymentRecord:
        with self._db.read() as conn:
            row = conn.execute(select(deployments).where(deployments.c.key == key)).first()
        if row is None:
            raise UnknownDeployment(f"no deployment {key}; `dormant deployments list` lists them")
        return DeploymentRecord(
            int(row.key), row.deployed_at, _resources(row.resources), row.tenant_id
        )

    def definition(
        self, key: str, version: int | None = None, *, conn: Connection | None = None
    ) -> tuple[ProcessDefinition, int]:
        """The deployed model (latest when ``version`` is None) and its version."""
        if version is not None and (key, version) in self._definitions:
            return self._definitions[(key, version)], version
        if conn is None:
            with self._db.read() as c:
                return self.definition(key, version, conn=c)
        batch = savepoints.memo(conn) if version is None else None
        if batch is not None and (key, "latest") in batch:
            return cast(tuple[ProcessDefinition, int], batch[(key, "latest")])
        found = self._read_definition(key, version, conn)
        if batch is not None:
            batch[(key, "latest")] = found
        return found

    def _read_definition(
        self, key: str, version: int | None, conn: Connection
    ) -> tuple[ProcessDefinition, int]:
        # A start's first statement: with its transaction's BEGIN (round_trips.first).
        rows = (
            round_trips.first(conn, _LATEST_DEFINITION, {"key": key})
            if version is None
            else round_trips.first(conn, _DEFINITION_VERSION, {"key": key, "version": version})
        )
        row = rows[0] if rows else None
        if row is None:
            raise self._unknown_process(conn, key, version)
        cached = _PARSED.get((row.checksum, key))
        if cached is None:
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
        self._tenants[key] = row.tenant_id
        if version is None:
            self._latest_seen[key] = cached
        return cached, int(row.version)

    def tenant(self, key: str, *, conn: Connection | None = None) -> str:
        """The tenant that owns process ``key`` (``UnknownProcess`` if none is
        deployed): read with its latest definition once per process, then cached."""
        found = self._tenants.get(key)
        if found is None:
            self.definition(key, conn=conn)
            found = self._tenants[key]
        return found

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

    def latest_starts(
        self,
        kind: str,
        name: str,
        *,
        tenant: str = DEFAULT_TENANT,
        conn: Connection | None = None,
        deployments_count: int | None = None,
    ) -> list[tuple[str, int, list[str]]]:
        """(key, latest version, start node ids) of ``tenant``'s processes started by
        ``kind`` ``name``.

        Read through an index of every latest version's starts, rebuilt when the count
        of deployments changes (rows are only inserted, and every deploy adds one in
        the transaction that adds its definitions): a message costs one ``count(*)``,
        not a scan of every definition's starts. A caller that read the count in a
        statement of its own (``deployments_count_column()``) passes it and saves the trip."""
        if conn is None:
            with self._db.read() as c:
                return self.latest_starts(
                    kind, name, tenant=tenant, conn=c, deployments_count=deployments_count
                )
        count = (
            deployments_count
            if deployments_count is not None
            else int(conn.execute(select(deployments_count_column())).scalar_one())
        )
        seen = self._starts_index
        if seen is None or seen[0] != count:
            seen = (count, _starts_index(conn))
            self._starts_index = seen
        return [(k, v, list(nodes)) for k, v, nodes in seen[1].get((kind, tenant, name), ())]

    def tagged_version(self, conn: Connection, key: str, tag: str) -> int:
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

"""Resource bindings: which deployed version a call activity starts and which version
of a decision a business rule task evaluates (Camunda 8's ``bindingType``).

* ``latest``: the newest deployed version when the element is activated;
* ``deployment``: the version deployed in the same deployment as the running version
  of the calling process (a deployment is the set of resources deployed together);
* ``versionTag``: the newest deployed version whose ``zeebe:versionTag`` is the
  element's ``versionTag``.

The shell lends what is deployed as plain data (``Services.processes``,
``Services.decision_versions``) and the choice is made here, before the element arms
anything: a binding that finds nothing is a ``TechnicalFailure`` (an incident at the
element, as in Zeebe), which a retry after deploying the missing resource heals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from dormant.engine_core.dmn import Decision
from dormant.engine_core.expressions import TechnicalFailure

__all__ = [
    "Binding",
    "DecisionVersion",
    "ProcessVersion",
    "bind_decision",
    "bind_process",
    "deployment_of",
]

_V = TypeVar("_V", "ProcessVersion", "DecisionVersion")


class Binding(StrEnum):
    LATEST = "latest"
    DEPLOYMENT = "deployment"
    VERSION_TAG = "versionTag"


@dataclass(frozen=True, slots=True)
class ProcessVersion:
    """One deployed version of a process, as a binding sees it."""

    version: int
    deployment: int | None  # the deployment key; None for rows deployed before them
    version_tag: str | None = None
    # A call activity starts its child at the none start event (Zeebe ignores the
    # others): a version without one cannot be called.
    none_start: bool = True


@dataclass(frozen=True, slots=True)
class DecisionVersion:
    """One deployed version of a decision, with the decisions of its own file (the
    decisions it requires are evaluated from the same deployment)."""

    version: int
    deployment: int | None
    version_tag: str | None = None
    drg: Mapping[str, Decision] = field(default_factory=dict)


def deployment_of(
    processes: Mapping[str, Sequence[ProcessVersion]], key: str, version: int
) -> int | None:
    """The deployment that holds version ``version`` of process ``key``, if known."""
    for candidate in processes.get(key, ()):
        if candidate.version == version:
            return candidate.deployment
    return None


def _pick(
    versions: Sequence[_V],
    binding: Binding,
    version_tag: str | None,
    deployment: int | None,
) -> _V | None:
    ordered = sorted(versions, key=lambda v: v.version, reverse=True)
    if binding is Binding.LATEST:
        return ordered[0] if ordered else None
    if binding is Binding.VERSION_TAG:
        return next((v for v in ordered if v.version_tag == version_tag), None)
    if deployment is None:
        return None
    return next((v for v in ordered if v.deployment == deployment), None)


def _describe(binding: Binding, version_tag: str | None, deployment: int | None) -> str:
    if binding is Binding.VERSION_TAG:
        return f"with version tag {version_tag!r}"
    if binding is Binding.DEPLOYMENT:
        where = f"deployment {deployment}" if deployment is not None else "no known deployment"
        return f"in the calling process's deployment ({where})"
    return "at all"


def bind_process(
    processes: Mapping[str, Sequence[ProcessVersion]],
    key: str,
    binding: Binding,
    *,
    version_tag: str | None,
    deployment: int | None,
    where: str,
) -> int:
    """The version of process ``key`` a call activity starts, or ``TechnicalFailure``
    (cause ``UnknownProcess``) naming what was asked for and what is deployed."""
    versions = processes.get(key, ())
    chosen = _pick(versions, binding, version_tag, deployment)
    if chosen is None:
        deployed = ", ".join(str(v.version) for v in sorted(versions, key=lambda v: v.version))
        raise TechnicalFailure(
            f"{where}: no version of process {key!r} is deployed "
            f"{_describe(binding, version_tag, deployment)} "
            f"(deployed versions: {deployed or 'none'}); deploy it, then retry the incident",
            "UnknownProcess",
        )
    if not chosen.none_start:
        raise TechnicalFailure(
            f"{where}: version {chosen.version} of process {key!r} has no none start event, "
            "so a call activity cannot start it",
            "UnknownProcess",
        )
    return chosen.version


def bind_decision(
    versions: Mapping[str, Sequence[DecisionVersion]],
    decision_id: str,
    binding: Binding,
    *,
    version_tag: str | None,
    deployment: int | None,
    where: str,
) -> Mapping[str, Decision]:
    """The decisions a business rule task bound by ``deployment`` / ``versionTag``
    evaluates against: the chosen version's own file. ``TechnicalFailure`` (cause
    ``DecisionNotDeployed``) when none matches."""
    candidates = versions.get(decision_id, ())
    chosen = _pick(candidates, binding, version_tag, deployment)
    if chosen is None:
        deployed = ", ".join(str(v.version) for v in sorted(candidates, key=lambda v: v.version))
        raise TechnicalFailure(
            f"{where}: no version of decision {decision_id!r} is deployed "
            f"{_describe(binding, version_tag, deployment)} "
            f"(deployed versions: {deployed or 'none'}); deploy it, then retry the incident",
            "DecisionNotDeployed",
        )
    return chosen.drg

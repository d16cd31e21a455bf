"""A step's facts as one ``facts`` row, and the rows read back as the facts they hold.

A trigger records several facts (a message trigger: the message taken, the node left,
the end reached, the instance completed) at one revision and one time. Written one row
each, they were half of every trigger's rows (bench/README.md, "On paper"). So the
facts of one step that share a revision and a time go into ONE row of kind
``STEP_KIND``, whose details list them in order, each as ``[kind, details]`` (or
``[kind]`` when it has none): a fact's two key names, repeated in every fact of every
step, were a fifth of the row. Rows written before that hold ``{"facts": [{"kind",
"details"}, ...]}`` and are read as they are. A step with a single fact, and the rows
other writers add one at a time (the scheduler's, a failed trigger's), keep the plain
form: every reader goes through ``fact_views``, which gives back the facts themselves,
in the order they were recorded, with their revision and time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from dormant.engine_core.effects import Fact
from dormant.engine_core.views import FactView

__all__ = ["STEP_KIND", "fact_rows", "fact_views"]

# The kind of a row that holds several facts of one step (no fact has this kind).
STEP_KIND = "Step"


def fact_rows(
    instance_id: str, facts_at: Sequence[tuple[int, datetime, Fact]]
) -> list[dict[str, Any]]:
    """The ``facts`` rows for ``facts_at`` (each fact at its revision and time): one
    row per run of facts sharing a revision and a time, in order."""
    rows: list[dict[str, Any]] = []
    group: list[Fact] = []
    key: tuple[int, datetime] | None = None

    def close() -> None:
        if key is None or not group:
            return
        revision, at = key
        details: dict[str, Any] | list[list[Any]]
        if len(group) == 1:
            kind, details = group[0].kind, dict(group[0].details)
        else:
            kind = STEP_KIND
            details = [[f.kind, dict(f.details)] if f.details else [f.kind] for f in group]
        rows.append(
            {
                "instance_id": instance_id,
                "revision": revision,
                "at": at,
                "kind": kind,
                "details": details,
            }
        )

    for revision, at, fact in facts_at:
        if (revision, at) != key:
            close()
            group, key = [], (revision, at)
        group.append(fact)
    close()
    return rows


def fact_views(rows: Iterable[Any]) -> list[FactView]:
    """The facts held by ``facts`` rows (read in id order), one view per fact."""
    views: list[FactView] = []
    for r in rows:
        details: Any = r.details  # an object, or a step's list of pairs
        if r.kind == STEP_KIND and isinstance(details, list):
            views.extend(
                FactView(
                    at=r.at,
                    kind=pair[0],
                    details=dict(pair[1]) if len(pair) > 1 else {},
                    revision=r.revision,
                )
                for pair in details
            )
        elif r.kind == STEP_KIND:  # written before the pairs
            views.extend(
                FactView(at=r.at, kind=f["kind"], details=dict(f["details"]), revision=r.revision)
                for f in details["facts"]
            )
        else:
            views.append(FactView(at=r.at, kind=r.kind, details=dict(details), revision=r.revision))
    return views

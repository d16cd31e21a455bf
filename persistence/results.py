"""What a trigger task gets back from the layer below: one small protocol.

Every operation a trigger task calls (``Store.apply``/``start``, the Router's
``message``/``signal``, the scheduler's ``fire``) returns an object with the outbox
rows to publish after the commit, every committed step it applied, one word for what
it did (the metrics' ``outcome`` label) and a one-line summary for the task's log line,
so neither the task nor the metrics guess at attributes or know which operation ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dormant.engine_core.effects import Fact
from dormant.persistence.outbox_queue import OutboxRow

__all__ = ["Applied", "TriggerResult", "outcome_word", "raised_incidents"]


def raised_incidents(step: Applied) -> list[dict[str, Any]]:
    """The incidents a committed step raised (their facts' details: ids, node, class)."""
    return [
        dict(f.details)
        for f in step.facts
        if f.kind == "Incident" and f.details.get("action") == "raised"
    ]


def outcome_word(
    steps: Sequence[Applied],
    *,
    duplicate: bool = False,
    skipped: bool = False,
    failed: bool = False,
) -> str:
    """One word for what an operation did, from its steps and its own verdict:
    ``failed`` (a deadline fire kept and backed off), ``incident``, ``applied``,
    ``duplicate``, ``skipped``, ``stale`` (looked at, nothing to do) or ``none``."""
    if failed:
        return "failed"
    if any(raised_incidents(a) for a in steps):
        return "incident"
    if any(a.changed for a in steps):
        return "applied"
    if duplicate or any(a.duplicate for a in steps):
        return "duplicate"
    if skipped or any(a.skipped for a in steps):
        return "skipped"
    return "stale" if steps else "none"


@dataclass(frozen=True, slots=True)
class Applied:
    """What one transaction did. ``outbox``: the rows it wrote, to publish after commit
    (returned by the write itself, never read back)."""

    instance_id: str
    revision: int
    status: str
    changed: bool
    duplicate: bool = False
    outbox: list[OutboxRow] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    # The caller's precondition failed under the lock: nothing was applied.
    skipped: bool = False
    # The process key, for metrics and trace attributes (bounded, unlike the id).
    key: str | None = None
    # The Client's inbox row was marked processed inside this transaction.
    inbox_marked: bool = False

    @property
    def outbox_ids(self) -> list[int]:
        return [row.id for row in self.outbox]

    @property
    def outbox_rows(self) -> list[OutboxRow]:
        return list(self.outbox)

    @property
    def steps(self) -> list[Applied]:
        return [self]

    @property
    def outcome(self) -> str:
        return outcome_word([self])

    def summary(self) -> str:
        extra = " duplicate" if self.duplicate else ""
        extra += " stale" if not self.changed and not extra else ""
        return f"instance={self.instance_id} revision={self.revision}{extra}"


class TriggerResult(Protocol):
    @property
    def outbox_ids(self) -> list[int]:
        """The ids of the outbox rows the transaction wrote."""
        ...

    @property
    def outbox_rows(self) -> list[OutboxRow]:
        """The outbox rows the transaction wrote (as it wrote them, not read back), to
        publish after its commit."""
        ...

    @property
    def inbox_marked(self) -> bool:
        """The Client's inbox row was marked processed inside the transaction."""
        ...

    @property
    def steps(self) -> list[Applied]:
        """Every committed step the operation applied (one, a fan-out's, or none)."""
        ...

    @property
    def outcome(self) -> str:
        """One word for what it did (``outcome_word``)."""
        ...

    def summary(self) -> str:
        """One line for the log: which instance(s), what happened; never a value."""
        ...

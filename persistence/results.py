"""What a trigger task gets back from the layer below: one small protocol.

Every operation a trigger task calls (``Store.apply``/``start``, the Router's
``message``/``signal``, the scheduler's ``fire``) returns an object with the outbox
rows to publish after the commit and a one-line summary for the task's log line, so
the task neither guesses at attributes nor knows which operation it ran.
"""

from __future__ import annotations

from typing import Protocol

from persistence.outbox_queue import OutboxRow

__all__ = ["TriggerResult"]


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

    def summary(self) -> str:
        """One line for the log: which instance(s), what happened; never a value."""
        ...

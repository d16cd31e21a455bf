"""What a trigger task gets back from the layer below: one small protocol.

Every operation a trigger task calls (``Store.apply``/``start``, the Router's
``message``/``signal``, the scheduler's ``fire``) returns an object with the outbox
rows to publish after the commit and a one-line summary for the task's log line, so
the task neither guesses at attributes nor knows which operation it ran.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["TriggerResult"]


class TriggerResult(Protocol):
    @property
    def outbox_ids(self) -> list[int]:
        """The outbox rows the transaction wrote, to publish after its commit."""
        ...

    def summary(self) -> str:
        """One line for the log: which instance(s), what happened; never a value."""
        ...

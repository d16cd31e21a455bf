"""What applying a trigger to its wait did: one small type instead of a string that
could also be empty or None.

A trigger either woke one token (its id goes into the ``Hydrated`` fact), acted on
the instance as a whole (a cancel, an event sub-process start), or found its wait
gone: stale, and ``apply`` changes nothing. A trigger refused by its wait's state (a
user task transition while another one runs) is stale too, with the reason the
``Stale`` fact records.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["INSTANCE", "STALE", "Wake", "WakeKind"]


class WakeKind(StrEnum):
    TOKEN = "token"
    INSTANCE = "instance"
    STALE = "stale"


@dataclass(frozen=True, slots=True)
class Wake:
    kind: WakeKind
    token_id: str | None = None
    reason: str | None = None

    @staticmethod
    def token(token_id: str) -> Wake:
        return Wake(WakeKind.TOKEN, token_id)

    @staticmethod
    def refused(reason: str) -> Wake:
        return Wake(WakeKind.STALE, reason=reason)

    @property
    def stale(self) -> bool:
        return self.kind is WakeKind.STALE


INSTANCE = Wake(WakeKind.INSTANCE)
STALE = Wake(WakeKind.STALE)

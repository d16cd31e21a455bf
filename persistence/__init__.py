"""persistence: the tables, the migrations and the Store (the one transaction).

Public names: ``Store``, ``Applied``, ``Deployment``, ``OutboxRow``, ``Settings``,
``Router`` and ``MessageOutcome``.
"""

from dormant.persistence.routing import MessageOutcome, Router, SignalOutcome
from dormant.persistence.settings import Settings
from dormant.persistence.store import Applied, Deployment, OutboxRow, StartKeyTaken, Store

__all__ = [
    "Applied",
    "Deployment",
    "MessageOutcome",
    "OutboxRow",
    "Router",
    "Settings",
    "SignalOutcome",
    "StartKeyTaken",
    "Store",
]

"""persistence: the tables, the migrations and the Store (the one transaction).

Public names: ``Store``, ``Applied``, ``Deployment``, ``OutboxRow``, ``Settings``,
``Router`` and ``MessageOutcome``.

The names are loaded on first use (PEP 562): importing one module of the package
(``dormant.persistence.clock``) runs this file first, and must not pay for the Store,
SQLAlchemy and the whole core it does not use (``dormant --help``, bench/bench_cli.py).
"""

from __future__ import annotations

import typing

from dormant.engine_core.lazy import lazy_names as _lazy_names

if typing.TYPE_CHECKING:
    from dormant.persistence.routing import MessageOutcome, Router, SignalOutcome
    from dormant.persistence.settings import Settings
    from dormant.persistence.store import Applied, Deployment, OutboxRow, StartKeyTaken, Store

_HOMES: dict[str, str] = {
    "MessageOutcome": "dormant.persistence.routing",
    "Router": "dormant.persistence.routing",
    "SignalOutcome": "dormant.persistence.routing",
    "Settings": "dormant.persistence.settings",
    "Applied": "dormant.persistence.store",
    "Deployment": "dormant.persistence.store",
    "OutboxRow": "dormant.persistence.store",
    "StartKeyTaken": "dormant.persistence.store",
    "Store": "dormant.persistence.store",
}

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


__getattr__, __dir__ = _lazy_names(__name__, _HOMES)

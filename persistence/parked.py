"""Parked sweep rows: an inbox or outbox row a sweep could not process, kept aside.

The sweeps (the outbox relay and the inbox re-send, tasks/sweeps.py) handle each row on
its own: a row that raises is parked here, on its own row, with its error and when, and
the sweep goes on with the next one. A parked row is left out of every later sweep until
an operator retries it (unparked: the next sweep processes it again) or drops it
(deleted; an inbox row is the producer's record of a trigger that will never be applied).
So one bad row never holds back the rows behind it (issue 24, head-of-line blocking),
and nothing a sweep failed on disappears without a trace.

A parked row is named ``inbox:<id>`` or ``outbox:<id>`` (``ParkedRow.ref``): the two
tables' ids are of different kinds, and the CLI takes one name for either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Engine, Table, delete, func, select, update

from dormant.engine_core.errors import UnknownFailedTrigger
from dormant.persistence import audit, clock
from dormant.persistence.tables import inbox, outbox

__all__ = ["ParkedRow", "count_parked", "drop", "park", "parked_rows", "retry"]

Source = Literal["inbox", "outbox"]
_TABLES: dict[str, Table] = {"inbox": inbox, "outbox": outbox}
# A parked error is one line of at most this many characters (the log has the rest).
ERROR_CHARS = 2000


@dataclass(frozen=True, slots=True)
class ParkedRow:
    source: Source
    id: str
    kind: str
    created_at: datetime
    parked_at: datetime
    error: str

    @property
    def ref(self) -> str:
        """The name an operator gives the CLI: ``inbox:<id>`` or ``outbox:<id>``."""
        return f"{self.source}:{self.id}"


def _key(table: Table, row_id: str) -> Any:
    return int(row_id) if table is outbox else row_id


def park(engine: Engine, source: Source, row_id: Any, error: str, now: datetime) -> None:
    """Park one row with ``error`` (its own transaction: the sweep's other rows go on)."""
    table = _TABLES[source]
    with engine.begin() as conn:
        conn.execute(
            update(table)
            .where(table.c.id == _key(table, str(row_id)))
            .values(parked_at=now, parked_error=error[:ERROR_CHARS])
        )


def parked_rows(engine: Engine, limit: int = 500) -> list[ParkedRow]:
    """Every parked row of both tables, the oldest parking first."""
    found: list[ParkedRow] = []
    with engine.connect() as conn:
        for table in _TABLES.values():
            rows = conn.execute(
                select(
                    table.c.id,
                    table.c.kind,
                    table.c.created_at,
                    table.c.parked_at,
                    table.c.parked_error,
                )
                .where(table.c.parked_at.is_not(None))
                .order_by(table.c.parked_at)
                .limit(limit)
            ).all()
            where: Source = "inbox" if table is inbox else "outbox"
            found += [
                ParkedRow(where, str(r.id), r.kind, r.created_at, r.parked_at, r.parked_error or "")
                for r in rows
            ]
    return sorted(found, key=lambda p: p.parked_at)[:limit]


def count_parked(conn: Any) -> dict[str, int]:
    """Parked rows per table (the ``dormant_sweep_rows_parked`` gauge, tasks/metrics.py)."""
    return {
        source: int(
            conn.execute(
                select(func.count()).select_from(table).where(table.c.parked_at.is_not(None))
            ).scalar_one()
        )
        for source, table in _TABLES.items()
    }


def _parse(ref: str) -> tuple[Table, Any]:
    source, _, row_id = ref.partition(":")
    table = _TABLES.get(source)
    if table is None or not row_id or (table is outbox and not row_id.isdigit()):
        raise UnknownFailedTrigger(
            f"no parked row {ref!r}: name one as inbox:<id> or outbox:<id> "
            "(`dormant triggers parked` lists them)"
        )
    return table, _key(table, row_id)


def retry(engine: Engine, ref: str, audited: Mapping[str, Any] | None = None) -> None:
    """Unpark ``ref``: the next sweep processes it again (an outbox row is published
    as if never sent; an inbox row is re-sent at once, its redelivery window reset).
    ``audited``: the operator's command, its ``done`` row in the same transaction."""
    table, key = _parse(ref)
    again: dict[str, Any] = {"parked_at": None, "parked_error": None}
    again |= {"published_at": None} if table is outbox else {"republished_at": None}
    with engine.begin() as conn:
        done = conn.execute(
            update(table).where(table.c.id == key, table.c.parked_at.is_not(None)).values(again)
        ).rowcount
        if done and audited is not None:
            audit.record(conn, [audit.done_row(audited, clock.now())])
    if not done:
        raise UnknownFailedTrigger(f"no parked row {ref!r} (`dormant triggers parked` lists them)")


def drop(engine: Engine, ref: str, audited: Mapping[str, Any] | None = None) -> None:
    """Delete parked row ``ref`` for good: what it held is never sent. ``audited``: the
    operator's command, its ``done`` row in the same transaction."""
    table, key = _parse(ref)
    with engine.begin() as conn:
        done = conn.execute(
            delete(table).where(table.c.id == key, table.c.parked_at.is_not(None))
        ).rowcount
        if done and audited is not None:
            audit.record(conn, [audit.done_row(audited, clock.now())])
    if not done:
        raise UnknownFailedTrigger(f"no parked row {ref!r} (`dormant triggers parked` lists them)")

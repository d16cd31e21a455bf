"""Messages that went nowhere, and what became of a message: the producer's receipt.

A message no instance waits for, that starts no process and has no TTL is dropped
(Zeebe's behaviour, persistence/routing.py step 4). So that the producer and the
operator can see it, the Router writes a row here in the transaction that drops it,
and trims the table in that same transaction: rows past ``unmatched_messages_kept``
(the newest are kept) and rows older than ``unmatched_messages_retention_seconds``
go, so the table never grows past its bound whatever the rate of drops
(docs/limits.md, "Unmatched messages"). There is nothing else to sweep.

The receipt reads the ``messages`` row, the message's outcome row: the Router writes
it last (in the last holder's transaction, or its own), so once it is there the
message is settled — buffered (a TTL), correlated to N processes, or dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, delete, insert, select

from dormant.engine_core.tenants import DEFAULT_TENANT
from dormant.persistence.tables import messages, unmatched_messages

__all__ = [
    "BUFFERED",
    "CORRELATED",
    "DROPPED",
    "PENDING",
    "MessageReceipt",
    "UnmatchedMessage",
    "read_receipt",
    "record_unmatched",
    "unmatched",
]

# The receipt's outcomes, one vocabulary for the Client, the CLI and docs/messages.md.
CORRELATED = "correlated"
BUFFERED = "buffered"
DROPPED = "dropped"
PENDING = "pending"


@dataclass(frozen=True, slots=True)
class UnmatchedMessage:
    """One message that went nowhere: its name, key, when, and the producer's id."""

    name: str
    correlation_key: str | None
    at: datetime
    message_id: str


@dataclass(frozen=True, slots=True)
class MessageReceipt:
    """What became of a message: ``outcome`` is ``correlated`` (to ``correlations``
    processes), ``buffered`` (a TTL: it waits until ``expires_at``, having reached
    ``correlations`` processes meanwhile), ``dropped`` (nobody waited; it is listed by
    ``dormant messages unmatched``) or ``pending`` (not settled within the wait)."""

    message_id: str
    outcome: str
    correlations: int = 0
    expires_at: datetime | None = None

    def __str__(self) -> str:
        if self.outcome == CORRELATED:
            n = self.correlations
            return f"{self.message_id}: correlated to {n} instance{'' if n == 1 else 's'}"
        if self.outcome == BUFFERED:
            return f"{self.message_id}: buffered until {self.expires_at:%Y-%m-%dT%H:%M:%S%z}"
        return f"{self.message_id}: {self.outcome}"


def record_unmatched(
    conn: Connection,
    message_id: str,
    name: str,
    correlation_key: str | None,
    now: datetime,
    *,
    tenant: str = DEFAULT_TENANT,
    kept: int,
    retention_seconds: float,
) -> None:
    """Record one dropped message and trim the table to its bound, in the caller's
    transaction (the one that drops the message). The count bound deletes by id (ids
    grow with inserts), the age bound by ``at``: both through an index."""
    new_id = conn.execute(
        insert(unmatched_messages)
        .values(
            message_id=message_id,
            name=name,
            correlation_key=correlation_key,
            at=now,
            tenant_id=tenant,
        )
        .returning(unmatched_messages.c.id)
    ).scalar_one()
    u = unmatched_messages.c
    conn.execute(delete(unmatched_messages).where(u.id <= int(new_id) - kept))
    conn.execute(
        delete(unmatched_messages).where(u.at < now - timedelta(seconds=retention_seconds))
    )


def unmatched(
    engine: Engine,
    now: datetime,
    retention_seconds: float,
    *,
    name: str | None = None,
    tenant: str | None = None,
    limit: int = 100,
) -> list[UnmatchedMessage]:
    """The most recent unmatched messages first (``name``: of that name only;
    ``tenant``: of that tenant only); a row past the retention is not shown even
    before the next drop trims it."""
    u = unmatched_messages.c
    q = select(u.name, u.correlation_key, u.at, u.message_id).where(
        u.at >= now - timedelta(seconds=retention_seconds)
    )
    if name is not None:
        q = q.where(u.name == name)
    if tenant is not None:
        q = q.where(u.tenant_id == tenant)
    with engine.connect() as conn:
        rows = conn.execute(q.order_by(u.id.desc()).limit(limit)).all()
    return [UnmatchedMessage(r.name, r.correlation_key, r.at, r.message_id) for r in rows]


def read_receipt(
    engine: Engine, message_id: str, tenant: str = DEFAULT_TENANT
) -> MessageReceipt | None:
    """The outcome of ``tenant``'s message once it is recorded; None while it is not
    (yet)."""
    m = messages.c
    with engine.connect() as conn:
        row = conn.execute(
            select(m.expires_at, m.consumed_by_instance, m.correlations).where(
                m.message_id == message_id, m.tenant_id == tenant
            )
        ).first()
    if row is None:
        return None
    # Rows written before migration 0019 hold no count: one taker at least, if any.
    n = row.correlations if row.correlations is not None else int(bool(row.consumed_by_instance))
    if row.expires_at is not None:
        return MessageReceipt(message_id, BUFFERED, n, row.expires_at)
    if n:
        return MessageReceipt(message_id, CORRELATED, n)
    return MessageReceipt(message_id, DROPPED)

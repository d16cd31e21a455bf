"""Processed trigger ids: kept while their trigger can come again, then swept.

The Store writes a trigger's id with the step it applied (``processed_triggers``), and
the next delivery of the same id is refused as a duplicate under the instance's lock.
A delivery of an applied trigger comes again only by a bounded path: the broker hands
an unacknowledged task to another worker after its visibility timeout (Redis) or when
the worker's connection drops (RabbitMQ), and the outbox relay re-sends a follow-up
trigger not yet consumed after ``outbox_redeliver_after_seconds``. So an id older than
``processed_trigger_retention_seconds`` (a day by default, at least ten times those
delays: persistence/settings.py) guards nothing, and keeping every id forever made the
table the largest an instance leaves behind. The beat's sweep deletes them in slices
(docs/limits.md, "Processed trigger ids").
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, select, text, tuple_

from dormant.persistence.tables import processed_triggers

__all__ = ["SWEEP_SLICE", "sweep_processed"]

# Rows one sweep statement deletes at most: a short transaction, whatever the backlog.
SWEEP_SLICE = 5000

# PostgreSQL: the slice's rows found by ``at`` (the BRIN index) and deleted by their
# physical address, a TID scan, never a scan of the whole table for the join.
_PG_SWEEP = text(
    "DELETE FROM processed_triggers WHERE ctid = ANY(ARRAY("
    "SELECT ctid FROM processed_triggers WHERE at < :before LIMIT :limit))"
)


def sweep_processed(
    engine: Engine, now: datetime, retention_seconds: float, limit: int = SWEEP_SLICE
) -> int:
    """Delete up to ``limit`` processed trigger ids recorded more than
    ``retention_seconds`` before ``now``; returns how many went (``limit``: call again)."""
    before = now - timedelta(seconds=retention_seconds)
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            result = conn.execute(_PG_SWEEP, {"before": before, "limit": limit})
        else:
            p = processed_triggers.c
            older = select(p.instance_id, p.trigger_id).where(p.at < before).limit(limit)
            result = conn.execute(
                delete(processed_triggers).where(tuple_(p.instance_id, p.trigger_id).in_(older))
            )
    return int(result.rowcount)

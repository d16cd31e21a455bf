"""The sweeps: each row on its own, and only the lost ones sent again.

Every sweep (the outbox relay and the inbox re-send here; the deadline scan,
tasks/timers.py; the batch sweep, tasks/operations.py) walks its rows with
``each_row``, the one home of these rules (issue 24, row 2):

- **One row never holds back the others.** A row whose handling raises is parked on its
  own row with its error (persistence/parked.py) and the sweep goes on with the next.
  A parked row is left out of later sweeps until an operator retries or drops it
  (``dormant triggers parked``); the ``dormant_sweep_rows_parked`` gauge counts them.
- **A fault of the whole sweep is not a fault of the row.** The broker or the database
  unreachable (``whole_sweep_fault``) fails every row alike: the sweep stops and its next tick
  starts again; nothing is parked for it.

And the inbox and outbox sweeps re-send only what the broker lost (issue 24, row 4;
docs/internals.md, "Re-send only the lost"). A trigger the sweep waits for (an
unprocessed inbox row, a follow-up published and not consumed) is either lost or still
held by the broker, ready or unacknowledged. The broker's own bookkeeping says how
many messages it holds (tasks/broker_holds.py), read BEFORE the rows; every trigger
written before that reading and still waiting after it is counted, so at least
``waiting - held`` of them are lost, and the sweep re-sends that many, oldest first.
A backlog still queued is never re-sent: it is all in ``held``. A row that was never
published at all (its publisher died after the commit) is always sent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy.exc import OperationalError

from dormant.persistence import clock, inbox, parked
from dormant.persistence.failed_triggers import one_line
from dormant.persistence.outbox_queue import OutboxRow
from dormant.tasks import app as app_module
from dormant.tasks import wire
from dormant.tasks.app import publish, store
from dormant.tasks.broker_holds import held_messages
from dormant.tasks.outbox import publish_row
from dormant.tasks.transient import is_transient

__all__ = ["SweepTally", "each_row", "relay", "whole_sweep_fault"]

log = logging.getLogger("dormant.sweeps")

T = TypeVar("T")


def whole_sweep_fault(exc: BaseException) -> bool:
    """A fault of the whole sweep, not of one row: whatever the one classifier calls
    transient (tasks/transient.py: the broker or the database unreachable, a lock or
    statement timeout), and any operational error of the database, which no row causes."""
    return is_transient(exc) or isinstance(exc, OperationalError)


# Rows one sweep looks at (each sweep's query is limited to this many).
SCAN_BATCH = 500


@dataclass
class SweepTally:
    """What one sweep did with its rows."""

    done: int = 0
    parked: int = 0
    stopped: bool = False


def each_row(
    sweep: str,
    rows: Iterable[T],
    handle: Callable[[T], None],
    park: Callable[[T, Exception], None] | None = None,
) -> SweepTally:
    """Handle every row on its own (module docstring). ``park`` keeps a failed row aside
    with its error; a sweep with nothing to park (its rows heal by their own claim
    expiry: deadlines, batches) passes ``None``, and the row is logged and skipped."""
    tally = SweepTally()
    for row in rows:
        try:
            handle(row)
            tally.done += 1
        except Exception as exc:
            if whole_sweep_fault(exc):
                log.info("%s: %s; the next tick goes on", sweep, type(exc).__name__)
                tally.stopped = True
                return tally
            tally.parked += 1
            if park is None:
                log.error("%s: row skipped (%s)", sweep, one_line(exc), exc_info=exc)
                continue
            try:
                park(row, exc)
                log.error("%s: row parked (%s)", sweep, one_line(exc), exc_info=exc)
            except Exception as park_exc:  # the database is gone: the next tick retries
                log.info("%s: row not parked (%s); next tick", sweep, one_line(park_exc))
                tally.stopped = True
                return tally
    return tally


def _parker(
    source: parked.Source, row_id: Callable[[Any], Any]
) -> Callable[[Any, Exception], None]:
    def park(row: Any, exc: Exception) -> None:
        parked.park(store().engine, source, row_id(row), one_line(exc), clock.now())

    return park


@dataclass(frozen=True, slots=True)
class _Lost:
    """A trigger the sweep may send again: an inbox row or a published follow-up."""

    since: datetime
    row: inbox.InboxRow | OutboxRow


def _resend(lost: _Lost, sent_inbox: list[str]) -> None:
    row = lost.row
    if isinstance(row, OutboxRow):
        publish_row(row)
        return
    # Its delivery's number (the first was 1; ``mark_republished`` counts this one once
    # it is sent): persistence/deliveries.py.
    number = {wire.DELIVERY_HEADER: row.redeliveries + 2}
    publish(row.task, row.routing_key, {**row.kwargs, "inbox_id": row.id}, headers=number)
    sent_inbox.append(row.id)


def _lost_budget(candidates: int, own: int) -> int:
    """How many waiting triggers the broker cannot be holding (module docstring); all
    of ``candidates`` when the broker's bookkeeping is not readable (the age rule).
    ``own``: the sweep's own message among the held ones (unacknowledged while it runs:
    dormant acknowledges late), which is no trigger it waits for."""
    if not candidates:
        return 0
    held = held_messages()  # first: every trigger written before it is counted below
    if held is None:
        return candidates
    written_by = clock.now()
    waiting = inbox.waiting(store().engine, written_by) + store().outbox.unconsumed(written_by)
    return max(0, waiting - max(0, held - own))


def relay(*, own_messages: int = 0) -> int:
    """Sweep: publish outbox rows their publisher left, and send again the triggers
    (inbox rows, published follow-ups) the broker lost; each row on its own.
    ``own_messages``: 1 when the sweep runs as a task a worker has not acknowledged."""
    settings = app_module.settings  # read now: ``configure`` may have replaced it
    after, again = settings.outbox_sweep_after_seconds, settings.outbox_redeliver_after_seconds
    try:
        rows = store().outbox.pending_outbox(after, SCAN_BATCH, redeliver_after_seconds=again)
        stuck = inbox.unprocessed(store().engine, after, SCAN_BATCH, redeliver_after_seconds=again)
    except OperationalError as exc:
        log.info("relay_outbox: database unavailable (%s); next tick retries", type(exc).__name__)
        return 0
    engine = store().engine
    unpublished = [r for r in rows if r.published_at is None]
    first = each_row("relay_outbox", unpublished, publish_row, _parker("outbox", lambda r: r.id))
    if first.stopped:
        return first.done
    candidates = [_Lost(r.published_at, r) for r in rows if r.published_at is not None]
    candidates += [_Lost(r.created_at, r) for r in stuck]
    candidates.sort(key=lambda c: c.since)
    try:
        budget = _lost_budget(len(candidates), own_messages)
    except Exception as exc:
        if not whole_sweep_fault(exc):
            raise
        log.info("relay_outbox: broker bookkeeping unreadable (%s); next tick", type(exc).__name__)
        return first.done
    sent: list[str] = []

    def row_id(c: _Lost) -> Any:
        return c.row.id

    def park(c: _Lost, exc: Exception) -> None:
        source: parked.Source = "outbox" if isinstance(c.row, OutboxRow) else "inbox"
        _parker(source, row_id)(c, exc)

    try:
        second = each_row("relay_outbox", candidates[:budget], lambda c: _resend(c, sent), park)
    finally:
        inbox.mark_republished(engine, sent)
    if first.done or second.done or first.parked or second.parked:
        log.info(
            "relay_outbox: published %s outbox row(s), re-sent %s lost trigger(s) of %s "
            "waiting (inbox %s), parked %s",
            first.done,
            second.done,
            len(candidates),
            len(sent),
            first.parked + second.parked,
        )
    return first.done + second.done

"""One home for the question "is this failure transient?" (issue 24, row 3).

A transient failure is one the same trigger would not hit a moment later: the database
connection was lost or ended by an administrator, a serialization failure or deadlock
chose this transaction as the victim, a lock or busy wait timed out ("database is
locked" on the embedded SQLite default), or the broker connection dropped. Those are
retried automatically, a bounded number of times, with exponential backoff and jitter
(so that many workers hit by the same fault do not come back in lock step). Everything
else is deterministic: the model's or its data's fault, or a bug; it goes to a person at
once as an incident or a failed trigger (DESIGN.md, "Trust boundaries": transient faults
are retried automatically, deterministic ones go to a person).

How many retries and how long between them are settings (``DORMANT_TRANSIENT_*``,
persistence/settings.py, docs/limits.md "Transient failures"), passed in by each caller
so that every path (trigger tasks, the batch of fires, job results) retries alike."""

from __future__ import annotations

import random
import sqlite3
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from billiard.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy.exc import DBAPIError, OperationalError, PendingRollbackError

from dormant.engine_core.errors import DatabaseUnavailable, DormantError
from dormant.persistence.settings import Settings

__all__ = [
    "INTERRUPTS",
    "RETRY_UNBOUNDED",
    "TRANSIENT_SQLSTATES",
    "TRANSIENT_SQLSTATE_CLASSES",
    "backoff",
    "interrupt_in_chain",
    "is_transient",
    "may_retry",
    "retry_database",
]

T = TypeVar("T")

RETRY_UNBOUNDED = sys.maxsize
"""``max_retries`` for ``Task.retry`` when dormant bounds the retries itself (with
``may_retry``) or wants none (a failed trigger that cannot be written yet). Celery reads
``max_retries=None`` as "the task's default", 3, after which the retry raises the
exception instead: a fourth transient failure ended the task there."""

TRANSIENT_SQLSTATES = frozenset(
    {
        "55P03",  # lock_not_available (lock_timeout)
        "55006",  # object_in_use
    }
)
"""PostgreSQL error codes that name a passing condition, beside the whole classes in
``TRANSIENT_SQLSTATE_CLASSES``."""

TRANSIENT_SQLSTATE_CLASSES = frozenset(
    {
        "08",  # connection exception
        "40",  # transaction rollback: serialization failure (40001), deadlock (40P01)
        "53",  # insufficient resources: too many connections, out of memory, disk full
        "57",  # operator intervention: admin shutdown (pg_terminate_backend),
        #        statement timeout (57014, docs/limits.md), server starting
        "58",  # system error: I/O error
    }
)


def _sqlstate(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", exc)
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return code if isinstance(code, str) else None


def _broker_connection_error(exc: BaseException) -> bool:
    """kombu files every transport's connection errors (AMQP, Redis) as its own
    ``OperationalError`` when it publishes; a Redis client error that escapes it unwrapped
    is recognised by its class name, so this module needs no Redis client installed."""
    if isinstance(exc, KombuOperationalError):
        return True
    return any(
        cls.__module__.startswith("redis") and cls.__name__ in {"ConnectionError", "TimeoutError"}
        for cls in type(exc).__mro__
    )


INTERRUPTS: tuple[type[BaseException], ...] = (
    SoftTimeLimitExceeded,
    TimeLimitExceeded,
    KeyboardInterrupt,
    SystemExit,
)
"""What stops work from outside, rather than fail it: the worker's time limits, an
interrupt, an exit. Not transient, wherever it sits in an exception's chain."""


def interrupt_in_chain(exc: BaseException) -> BaseException | None:
    """The interrupt behind ``exc``, if its cause/context chain holds one.

    An interrupt landing inside a library often surfaces as the library's own error:
    a soft time limit inside the Store's pipelined COMMIT (persistence/round_trips.py)
    leaves psycopg's pipeline busy, and psycopg raises "cannot exit pipeline mode while
    busy" in its place, an ``OperationalError`` with no SQLSTATE that alone would read as
    a passing fault. The time is up all the same, and the trigger is kept as failed
    like any soft limit (docs/limits.md, "Time limits")."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, INTERRUPTS):
            return current
        seen.add(id(current))
        # A SQLAlchemy error's driver error (``orig``) is its cause, raised ``from`` it.
        current = current.__cause__ or current.__context__ or getattr(current, "orig", None)
    return None


def is_transient(exc: BaseException) -> bool:
    """True when retrying the same work a moment later can succeed: never when an
    interrupt (``INTERRUPTS``) is anywhere in its chain."""
    if interrupt_in_chain(exc) is not None:
        return False
    if isinstance(exc, PendingRollbackError):
        # A connection invalidated inside its transaction (lost mid-transaction) and
        # used again before the rollback (sqlalchemy/engine/base.py
        # ``_invalid_transaction``): the lost connection is the cause, and a retry
        # opens a new transaction on a new connection.
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        code = _sqlstate(exc)
        if code is not None:
            return code in TRANSIENT_SQLSTATES or code[:2] in TRANSIENT_SQLSTATE_CLASSES
        # No code: SQLite ("database is locked", "disk I/O error") and drivers that
        # report a lost connection without one; SQLAlchemy files those as operational.
        return isinstance(exc, OperationalError)
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    if isinstance(exc, sqlite3.OperationalError):  # raised bare where SQLAlchemy wraps nothing
        return "locked" in str(exc) or "busy" in str(exc)
    return _broker_connection_error(exc)


def may_retry(exc: BaseException, retries: int, settings: Settings) -> bool:
    """True when ``exc`` is transient and ``retries`` (tries after the first so far)
    leave room for one more under ``DORMANT_TRANSIENT_RETRIES``."""
    return is_transient(exc) and retries < settings.transient_retries


def backoff(retries: int, settings: Settings, *, rng: random.Random | None = None) -> float:
    """Seconds before try ``retries + 1``: jitter over an exponential ceiling (the
    settings' base doubled per retry, up to their cap), so retries of many workers hit by
    the same fault spread out instead of arriving together."""
    base = settings.transient_backoff_seconds
    cap = settings.transient_backoff_max_seconds
    ceiling = min(cap, base * 2 ** min(max(0, retries), 64))
    return (rng or random).uniform(ceiling / 2, ceiling)


def retry_database(work: Callable[[], T], seconds: float, what: str, settings: Settings) -> T:
    """``work`` (a producer's database call, which writes all or nothing), tried again
    while it fails transiently, for about ``seconds`` in all; then ``DatabaseUnavailable``
    naming the cause, never the driver's own traceback. On the embedded SQLite default a
    producer waits for the one write lock behind the workers (issue 24, row 1: a raw
    "database is locked" reached ``Client.start``); a deterministic error is raised at
    once, as it is."""
    began = time.monotonic()
    tries = 0
    while True:
        try:
            return work()
        except DormantError:
            raise
        except Exception as exc:
            if not is_transient(exc):
                raise
            tries += 1
            pause = backoff(tries - 1, settings)
            spent = time.monotonic() - began
            if spent + pause > seconds:
                cause = str(getattr(exc, "orig", None) or exc).splitlines()[0][:200]
                raise DatabaseUnavailable(
                    f"{what}: the database stayed unavailable for {spent:.1f} s over {tries} "
                    f"tries ({type(getattr(exc, 'orig', None) or exc).__name__}: {cause}); "
                    "nothing was written, so sending it again later is safe. On the embedded "
                    "SQLite default the workers hold its one write lock; PostgreSQL serves "
                    'concurrent producers (docs/limits.md, "Time limits")'
                ) from exc
            time.sleep(pause)

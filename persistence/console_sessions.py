"""The console's signed-in sessions, kept in the database: the session cookie only names
one, so signing out ends it everywhere — in every console process behind the same
address, and for a copy of the cookie saved before (docs/console.md, "Sessions").

A row is the session's random id and when it ends; a sign-in deletes the ended rows, so
the table holds at most the sessions started within one session lifetime.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, insert, select

from dormant.persistence.db import read_only
from dormant.persistence.tables import console_sessions

__all__ = ["end", "is_live", "start"]


def start(engine: Engine, sid: str, now: datetime, lifetime: timedelta) -> None:
    with engine.begin() as conn:
        conn.execute(delete(console_sessions).where(console_sessions.c.ends_at <= now))
        conn.execute(
            insert(console_sessions).values(id=sid, started_at=now, ends_at=now + lifetime)
        )


def is_live(engine: Engine, sid: str, now: datetime) -> bool:
    with read_only(engine) as conn:
        ends_at = conn.execute(
            select(console_sessions.c.ends_at).where(console_sessions.c.id == sid)
        ).scalar_one_or_none()
    return ends_at is not None and ends_at > now


def end(engine: Engine, sid: str) -> None:
    with engine.begin() as conn:
        conn.execute(delete(console_sessions).where(console_sessions.c.id == sid))

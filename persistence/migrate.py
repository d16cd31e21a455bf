"""Schema migrations, run from code (``dormant db upgrade``, tests, the embedded default).

The embedded SQLite default migrates itself on first use, because nobody should have
to run a command before the demo works. PostgreSQL never auto-migrates: several
workers starting at once must not race to alter a shared production schema, so they
``check`` and refuse with ``NotMigrated`` naming the command to run.
"""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine
from sqlalchemy.exc import SQLAlchemyError

from dormant.engine_core.errors import NotMigrated
from dormant.persistence.settings import normalise_database_url

__all__ = ["check", "current_revision", "head_revision", "upgrade"]

_MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return cfg


@functools.cache
def head_revision() -> str:
    """The revision this code needs. Read once per process (the scripts do not change
    under it): reading them imports every migration module, about a tenth of a second,
    which a worker's replacement pool process paid before its first trigger while
    others queued for it (bench_hostile, a pool process killed by the hard limit); a
    pool process forked after the worker's own check inherits it."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def _engine(target: str | Engine) -> tuple[Engine, bool]:
    if isinstance(target, Engine):
        return target, False
    return create_engine(normalise_database_url(target)), True


def current_revision(target: str | Engine) -> str | None:
    """The revision the database is at (None: never migrated)."""
    engine, owned = _engine(target)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        if owned:
            engine.dispose()


def upgrade(target: str | Engine, revision: str = "head") -> None:
    """Bring the database to ``revision`` (idempotent)."""
    engine, owned = _engine(target)
    cfg = _config()
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    finally:
        if owned:
            engine.dispose()


def check(target: str | Engine) -> None:
    """Raise ``NotMigrated`` unless the database is at the revision this code needs."""
    engine, owned = _engine(target)
    try:
        at = current_revision(engine)
    except SQLAlchemyError as exc:
        raise NotMigrated(
            f"database at {_safe(engine)} cannot be inspected for its schema revision: {exc}"
        ) from exc
    finally:
        if owned:
            engine.dispose()
    need = head_revision()
    if at != need:
        raise NotMigrated(
            f"database at {_safe(engine)} is not migrated (at revision {at or 'none'}, "
            f"need {need}); run `dormant db upgrade`"
        )


def ensure_schema(engine: Engine) -> None:
    """Ready ``engine``'s schema for use: a PostgreSQL database is checked and never
    auto-migrated (it is shared: ``dormant db upgrade`` migrates it), the embedded
    default is migrated in place, so it just works."""
    if engine.dialect.name == "postgresql":
        check(engine)
    elif current_revision(engine) != head_revision():  # a run of alembic costs ~0.5 s
        upgrade(engine)


def _safe(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)

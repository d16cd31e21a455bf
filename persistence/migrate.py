"""Schema migrations, run from code (``dormant db upgrade``, tests, the embedded default).

The embedded SQLite default migrates itself on first use, because nobody should have
to run a command before the demo works. PostgreSQL never auto-migrates: several
workers starting at once must not race to alter a shared production schema, so they
``check`` and refuse with ``NotMigrated`` naming the command to run.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.exc import SQLAlchemyError

from dormant.engine_core.errors import NotMigrated
from dormant.persistence.settings import normalise_database_url

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["check", "current_revision", "head_revision", "upgrade"]

_MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# A migration's file is named after its revision, which is the one before it plus one:
# ``0024_json_text_documents.py`` is revision "0024" (tests/integration/test_store.py
# holds every file to it, against alembic's own reading of the scripts).
_REVISION_FILE = re.compile(r"^(\d{4})_\w+\.py$")
# Alembic's table of the revision a database is at (its default name).
_VERSION_TABLE = "alembic_version"


def _config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return cfg


@functools.cache
def head_revision() -> str:
    """The revision this code needs: the newest migration file's. Read from the file
    names, not through alembic, which imports itself and every migration module to
    find it: about a quarter of a second that every process checking its database
    paid at start (each CLI command, beat, a worker and a replacement pool process).
    Only an upgrade reads the scripts."""
    revisions = [
        match.group(1)
        for path in (_MIGRATIONS / "versions").iterdir()
        if (match := _REVISION_FILE.match(path.name))
    ]
    return max(revisions)


def _engine(target: str | Engine) -> tuple[Engine, bool]:
    if isinstance(target, Engine):
        return target, False
    return create_engine(normalise_database_url(target)), True


def current_revision(target: str | Engine) -> str | None:
    """The revision the database is at (None: never migrated)."""
    engine, owned = _engine(target)
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table(_VERSION_TABLE):
                return None
            # The version table holds one row on a linear history like dormant's.
            at = conn.execute(text(f"SELECT version_num FROM {_VERSION_TABLE}")).scalar()
            return None if at is None else str(at)
    finally:
        if owned:
            engine.dispose()


def upgrade(target: str | Engine, revision: str = "head") -> None:
    """Bring the database to ``revision`` (idempotent)."""
    from alembic import command

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


def ensure_schema(target: str | Engine) -> None:
    """Ready ``target``'s schema for use: a PostgreSQL database is checked and never
    auto-migrated (it is shared: ``dormant db upgrade`` migrates it), the embedded
    default is migrated in place, so it just works."""
    engine, owned = _engine(target)
    try:
        if engine.dialect.name == "postgresql":
            check(engine)
        elif current_revision(engine) != head_revision():  # a run of alembic costs ~0.5 s
            upgrade(engine)
    finally:
        if owned:
            engine.dispose()


def _safe(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)

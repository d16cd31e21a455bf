"""What the ``dormant`` commands (tasks/cli*.py) and the console's forms share: reading
``--var k=v`` pairs, ``--map old=new`` node pairs and ISO 8601 options, the ``--var``
option itself, and the one way a command gets its Client."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from dormant.engine_core.errors import InvalidField, InvalidOperation, InvalidVariables
from dormant.engine_core.tenants import check_tenant

if TYPE_CHECKING:
    from dormant.persistence.queries import EngineQueries

T = TypeVar("T")

__all__ = [
    "make_client",
    "named_actor",
    "named_tenant",
    "parse_node_pairs",
    "parse_vars",
    "parse_when",
    "read_database",
    "var_option",
]


def parse_vars(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``("a=1", "b=x")`` → ``{"a": 1, "b": "x"}``."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise InvalidVariables(f"--var {pair!r} is not of the form name=value")
        try:
            out[name] = json.loads(raw)
        except ValueError:
            out[name] = raw
        except RecursionError:
            raise InvalidVariables(
                f"--var {name[:60]}: the value is nested too deep to read "
                "(DORMANT_MAX_VARIABLES_DEPTH)"
            ) from None
    return out


def make_client() -> Any:
    """The command's Client, acting for ``dormant --as USER`` (else ``DORMANT_ACTOR``,
    else the operating system's user: ``default_actor``) from the CLI, as the audit
    trail records it (docs/audit.md)."""
    # Late on purpose: the Client brings Celery and kombu, which ``dormant --help`` and
    # the read-only lists never need (bench/bench_cli.py).
    from dormant.tasks.client import Client

    return Client(actor=named_actor(), source="cli", tenant=named_tenant())


def named_actor() -> str | None:
    """The top-level ``--as USER`` of the running command, if given."""
    ctx = click.get_current_context(silent=True)
    obj = None if ctx is None else ctx.find_root().obj
    actor = obj.get("actor") if isinstance(obj, dict) else None
    return actor if isinstance(actor, str) and actor else None


def named_tenant() -> str | None:
    """The top-level ``--tenant`` (or ``DORMANT_TENANT``) of the running command,
    checked: a bad one is a usage error naming the rule (engine_core/tenants.py)."""
    ctx = click.get_current_context(silent=True)
    obj = None if ctx is None else ctx.find_root().obj
    tenant = obj.get("tenant") if isinstance(obj, dict) else None
    if not isinstance(tenant, str) or not tenant:
        return None
    try:
        return check_tenant(tenant, "--tenant")
    except InvalidField as exc:
        raise click.BadParameter(str(exc), param_hint="--tenant") from exc


def read_database(reading: Callable[[EngineQueries], T]) -> T:
    """``reading`` over the database's reads alone, without the Store or the Client: the
    read-only lists need SQLAlchemy and the checkpoint documents, never Celery, kombu or
    the FEEL grammar.

    The schema is readied only when a read fails (an embedded database not made yet, a
    schema behind this code), as the Store readies it (persistence/migrate.py
    ``ensure_schema``): alembic alone costs a list more than the rest of its start-up.
    """
    # Late on purpose, as ``make_client``: SQLAlchemy and pydantic are for the
    # commands that read the database, not for ``dormant --help``.
    from sqlalchemy.exc import SQLAlchemyError

    from dormant.persistence.db import make_engine
    from dormant.persistence.queries import EngineQueries
    from dormant.persistence.settings import Settings

    settings = Settings.from_env()
    queries = EngineQueries(
        make_engine(
            settings.database_url,
            statement_timeout_seconds=settings.db_statement_timeout_seconds,
            idle_in_transaction_timeout_seconds=settings.db_idle_in_transaction_timeout_seconds,
        )
    )
    try:
        return reading(queries)
    except SQLAlchemyError:
        from dormant.persistence.migrate import ensure_schema

        ensure_schema(queries.engine)  # NotMigrated names the fix; else read again
        return reading(queries)


var_option = click.option(
    "--var", "vars_", multiple=True, metavar="K=V", help="a variable (JSON value or string)"
)


def parse_when(value: str | None) -> datetime | None:
    """An ISO 8601 option; a time without a zone is UTC."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InvalidOperation(f"{value!r} is not an ISO 8601 date-time") from exc
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def parse_node_pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    """``("a=b",)`` → ``{"a": "b"}``: the old and new node ids of ``--map``."""
    out: dict[str, str] = {}
    for pair in values:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise InvalidOperation(f"{option} {pair!r} is not of the form old_node=new_node")
        out[old] = new
    return out

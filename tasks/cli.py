"""The ``dormant`` command line: a thin skin over ``Client`` and the Celery app.

Every ``DormantError`` becomes one line on stderr and exit code 2, never a traceback:
the message already names the offending thing and the fix. ``--var k=v`` takes a JSON
value when ``v`` parses as JSON (``--var n=3``, ``--var ok=true``, ``--var 'x={"a":1}'``)
and the plain string otherwise (``--var name=Ada``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import TYPE_CHECKING, Any

import click

from dormant.engine_core.errors import (
    DormantError,
    InvalidField,
    InvalidVariables,
    UnknownInstance,
)
from dormant.engine_core.states import (
    AUDIT_OUTCOMES,
    AUDIT_SOURCES,
    INCIDENT_STATES,
    LISTED_STATUSES,
    QUEUED,
)
from dormant.persistence import clock
from dormant.tasks.cli_common import make_client as _client
from dormant.tasks.cli_common import named_tenant, parse_vars, parse_when, read_database
from dormant.tasks.cli_common import var_option as _var
from dormant.tasks.cli_deployments import register as register_deployments
from dormant.tasks.cli_flow import register as register_flow
from dormant.tasks.cli_operations import register as register_operations
from dormant.tasks.cli_process_tests import register as register_process_tests
from dormant.tasks.display import (
    audit_columns,
    failed_trigger_columns,
    history_lines,
    incident_columns,
    instance_columns,
    instance_lines,
    instance_summary,
    parked_row_columns,
    queued,
    task_columns,
    unmatched_message_columns,
    when,
)
from dormant.tasks.display import emit as _emit
from dormant.tasks.display import output_options as _output

__all__ = ["cli", "main"]

if TYPE_CHECKING:
    from dormant.persistence.audit import AuditFilter


@click.group()
@click.option(
    "--as",
    "actor",
    default=None,
    metavar="USER",
    help="who the audit trail records for operator actions (default: $DORMANT_ACTOR, "
    "else the OS user)",
)
@click.option(
    "--tenant",
    default=None,
    envvar="DORMANT_TENANT",
    metavar="TENANT",
    help="act for this tenant: deploy, start, send, signal and complete tasks for it, and "
    "list only its instances, tasks, incidents and deployments (default: $DORMANT_TENANT, "
    "else every tenant's lists and <default> for the rest; docs/tenants.md)",
)
@click.pass_context
def cli(ctx: click.Context, actor: str | None, tenant: str | None) -> None:
    """dormant: a BPMN process engine on Celery."""
    obj = ctx.ensure_object(dict)
    obj["actor"] = actor
    obj["tenant"] = tenant


# -- the audit trail (docs/audit.md) -------------------------------


@cli.group()
def audit() -> None:
    """The audit trail of operator actions."""


def _audit_filters(command: Any) -> Any:
    """The filters ``audit list`` and ``audit export`` share (docs/audit.md)."""
    for option in reversed(
        (
            click.option("--actor", default=None, help="actions by this user"),
            click.option(
                "--source", type=click.Choice(AUDIT_SOURCES), default=None, help="from here"
            ),
            click.option("--action", default=None, help="this action (cancel, incident_retry…)"),
            click.option("--instance", "instance_id", default=None, help="on this instance"),
            click.option(
                "--outcome", type=click.Choice(AUDIT_OUTCOMES), default=None, help="outcome"
            ),
            click.option("--since", default=None, metavar="T", help="at or after T (ISO 8601)"),
            click.option("--until", default=None, metavar="T", help="before T (ISO 8601)"),
        )
    ):
        command = option(command)
    return command


def _audit_filter(
    actor: str | None,
    source: str | None,
    action: str | None,
    instance_id: str | None,
    outcome: str | None,
    since: str | None,
    until: str | None,
) -> AuditFilter:
    from dormant.persistence.audit import AuditFilter  # the database: after --help

    return AuditFilter(
        actor=actor,
        source=source,
        action=action,
        instance_id=instance_id,
        outcome=outcome,
        since=parse_when(since),
        until=parse_when(until),
    )


@audit.command("list")
@_audit_filters
@click.option("--limit", type=click.IntRange(1, 10_000), default=200, show_default=True)
@_output
def audit_list(
    actor: str | None,
    source: str | None,
    action: str | None,
    instance_id: str | None,
    outcome: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    fmt: str,
    as_json: bool,
) -> None:
    """Operator actions, newest first: who, from where, what, on what, the outcome
    (variable values hidden)."""
    where = _audit_filter(actor, source, action, instance_id, outcome, since, until)
    rows = _client().audit_log(where=where, limit=limit)
    _emit(rows, audit_columns(clock.now()), fmt, as_json, lambda a: a.as_json(), "no audit entries")


@audit.command("export")
@_audit_filters
def audit_export(
    actor: str | None,
    source: str | None,
    action: str | None,
    instance_id: str | None,
    outcome: str | None,
    since: str | None,
    until: str | None,
) -> None:
    """Every matching action as JSON lines, oldest first, streamed (no row cap: the
    retention bounds it; docs/audit.md "Export")."""
    where = _audit_filter(actor, source, action, instance_id, outcome, since, until)
    for entry in _client().audit_export(where):
        click.echo(json.dumps(entry.as_json(), sort_keys=True))


# -- database ------------------------------------------------------------------------


@cli.group()
def db() -> None:
    """The database schema."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Apply the migrations to DORMANT_DATABASE_URL."""
    from dormant.persistence import migrate
    from dormant.persistence.settings import Settings

    url = Settings.from_env().database_url
    migrate.upgrade(url)
    click.echo(f"database at revision {migrate.head_revision()}")


# -- processes and triggers ----------------------------------------------------------


@cli.command()
@click.argument("key")
@_var
@click.option("--business-key", default=None)
def start(key: str, vars_: tuple[str, ...], business_key: str | None) -> None:
    """Start an instance of KEY; prints its id."""
    click.echo(_client().start(key, parse_vars(vars_), business_key=business_key))


@cli.command("send-message")
@click.argument("name")
@click.option("--key", "correlation_key", default=None, help="the correlation key")
@_var
@click.option("--ttl", type=float, default=None, help="buffer the message this many seconds")
@click.option("--id", "message_id", default=None, help="message id (redelivery is idempotent)")
@click.option(
    "--receipt",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="wait at most SECONDS for what became of it: correlated, buffered or dropped",
)
def send_message(
    name: str,
    correlation_key: str | None,
    vars_: tuple[str, ...],
    ttl: float | None,
    message_id: str | None,
    receipt: float | None,
) -> None:
    """Publish message NAME; prints the message id (with ``--receipt``, the id and
    what became of the message: ``correlated to N instances``, ``buffered until ...``,
    ``dropped`` or ``pending``)."""
    client = _client()
    variables = parse_vars(vars_)
    if receipt is None:
        click.echo(client.send_message(name, correlation_key, variables, message_id, ttl))
        return
    got = client.send_message(name, correlation_key, variables, message_id, ttl, receipt=receipt)
    click.echo(str(got))


@cli.group()
def messages() -> None:
    """Messages: the recent ones that went nowhere."""


@messages.command("unmatched")
@click.option("--name", default=None, help="only messages of this name")
@click.option(
    "--limit", type=click.IntRange(min=1), default=100, show_default=True, help="at most this many"
)
@_output
def messages_unmatched(name: str | None, limit: int, fmt: str, as_json: bool) -> None:
    """Recent messages no instance waited for, that started nothing and had no TTL
    (dropped, Zeebe's behaviour), newest first: name, key, when, the producer's id."""
    rows = _client().unmatched_messages(name=name, limit=limit)

    def as_dict(m: Any) -> dict[str, Any]:
        return {
            "name": m.name,
            "correlation_key": m.correlation_key,
            "at": m.at.isoformat(),
            "message_id": m.message_id,
        }

    _emit(
        rows, unmatched_message_columns(clock.now()), fmt, as_json, as_dict, "no unmatched messages"
    )


@cli.command()
@click.argument("name")
@_var
def signal(name: str, vars_: tuple[str, ...]) -> None:
    """Broadcast signal NAME; prints the signal id."""
    click.echo(_client().signal(name, parse_vars(vars_)))


# -- user tasks ----------------------------------------------------------------------


@cli.group()
def tasks() -> None:
    """User tasks."""


@tasks.command("list")
@click.option("--instance", "instance_id", default=None)
@click.option("--assignee", default=None, help="assigned to this user")
@click.option("--candidate-user", default=None, help="this user is a candidate")
@click.option(
    "--group",
    "--candidate-group",
    "candidate_group",
    default=None,
    help="this group is a candidate",
)
@click.option("--process", default=None, metavar="KEY", help="tasks of this process's instances")
@click.option("--due-before", default=None, metavar="T", help="due before T (ISO 8601)")
@_output
def tasks_list(
    instance_id: str | None,
    assignee: str | None,
    candidate_user: str | None,
    candidate_group: str | None,
    process: str | None,
    due_before: str | None,
    fmt: str,
    as_json: bool,
) -> None:
    """Open user tasks, most urgent first (the earliest due date, then the highest
    priority, then the oldest; the console's tasklist order): id, instance, process,
    node, name, assignee, candidates, due date, priority, state, age."""
    from dormant.engine_core.views import to_dict
    from dormant.persistence.console_queries import ConsoleQueries
    from dormant.tasks.tasklist_query import arrange

    client = _client()
    found = client.user_tasks(
        instance_id,
        assignee=assignee,
        candidate_user=candidate_user,
        candidate_group=candidate_group,
        due_before=parse_when(due_before),
    )
    keys = ConsoleQueries(client._store.engine).instance_processes([t.instance_id for t in found])
    listed = arrange(found, keys, process)

    def as_dict(task: Any) -> dict[str, Any]:
        key, version = keys.get(task.instance_id, (None, None))
        return to_dict(task) | {"process_key": key, "process_version": version}

    columns = task_columns(clock.now(), keys)
    _emit(listed, columns, fmt, as_json, as_dict, "no open user tasks")


@tasks.command("complete")
@click.argument("task_id")
@_var
@click.option(
    "--json",
    "json_file",
    default=None,
    metavar="FILE",
    help="the variables as one JSON object (- reads stdin); --var pairs override its keys",
)
@click.option(
    "--wait",
    "wait",
    type=float,
    default=None,
    metavar="SECONDS",
    help="wait for the outcome: a task listener's denial is an error naming its reason",
)
def tasks_complete(
    task_id: str, vars_: tuple[str, ...], json_file: str | None, wait: float | None
) -> None:
    """Complete TASK_ID with its variables (its complete listeners may still deny it)."""
    variables = _json_object(json_file, "--json") if json_file is not None else {}
    variables |= parse_vars(vars_)
    done = _client().complete_task(task_id, variables, wait=wait)
    click.echo(f"completed {task_id}" if done else f"completing {task_id}")


def _json_object(name: str, option: str) -> dict[str, Any]:
    """The file ``name`` (``-``: stdin) holding one JSON object, or the one-line
    refusal (InvalidVariables)."""
    try:
        if name == "-":
            value = json.load(sys.stdin)
        else:
            with open(name, encoding="utf-8") as source:
                value = json.load(source)
    except OSError as exc:
        raise InvalidVariables(f"{option} {name}: cannot be read ({exc.strerror})") from None
    except (ValueError, RecursionError) as exc:
        raise InvalidVariables(f"{option} {name}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise InvalidVariables(
            f"{option} {name}: the variables must be one JSON object, not {type(value).__name__}"
        )
    return value


@tasks.command("assign")
@click.argument("task_id")
@click.argument("user")
def tasks_assign(task_id: str, user: str) -> None:
    """Assign TASK_ID to USER, whoever holds it now."""
    _client().assign_task(task_id, user)
    click.echo(f"assigning {task_id} to {user}")


@tasks.command("claim")
@click.argument("task_id")
@click.argument("user", required=False)
@click.option("--as", "as_user", default=None, metavar="USER", help="who claims it")
def tasks_claim(task_id: str, user: str | None, as_user: str | None) -> None:
    """Assign TASK_ID to USER (``--as USER``); refused when someone else holds it."""
    if user is not None and as_user is not None and user != as_user:
        raise InvalidField(f"two claimants given ({user!r} and --as {as_user!r}); give one")
    who = as_user or user
    if not who:
        raise InvalidField("who claims the task? give --as USER")
    _client().claim_task(task_id, who)
    click.echo(f"claiming {task_id} for {who}")


@tasks.command("unclaim")
@click.argument("task_id")
def tasks_unclaim(task_id: str) -> None:
    """Take TASK_ID back from whoever holds it: anyone it is offered to may claim it."""
    _client().unassign_task(task_id)
    click.echo(f"unclaiming {task_id}")


@tasks.command("unassign", hidden=True)
@click.argument("task_id")
def tasks_unassign(task_id: str) -> None:
    """``unclaim``, under Camunda's name for it."""
    _client().unassign_task(task_id)
    click.echo(f"unassigning {task_id}")


@tasks.command("update")
@click.argument("task_id")
@click.option("--candidate-users", default=None, metavar="A,B", help="comma-separated")
@click.option("--candidate-groups", default=None, metavar="A,B", help="comma-separated")
@click.option("--due-date", default=None, metavar="T", help="ISO 8601 with a zone")
@click.option("--follow-up-date", default=None, metavar="T", help="ISO 8601 with a zone")
@click.option("--priority", type=int, default=None, help="0 to 100")
def tasks_update(
    task_id: str,
    candidate_users: str | None,
    candidate_groups: str | None,
    due_date: str | None,
    follow_up_date: str | None,
    priority: int | None,
) -> None:
    """Change TASK_ID's candidates, dates or priority (its update listeners run first)."""

    def names(raw: str) -> list[str]:
        return [n.strip() for n in raw.split(",") if n.strip()]

    changes: dict[str, Any] = {}
    if candidate_users is not None:
        changes["candidateUsers"] = names(candidate_users)
    if candidate_groups is not None:
        changes["candidateGroups"] = names(candidate_groups)
    if due_date is not None:
        changes["dueDate"] = due_date
    if follow_up_date is not None:
        changes["followUpDate"] = follow_up_date
    if priority is not None:
        changes["priority"] = priority
    _client().update_task(task_id, **changes)
    click.echo(f"updating {task_id}")


# -- instances -----------------------------------------------------------------------


@cli.group()
def instances() -> None:
    """Process instances."""


@instances.command("list")
@click.option(
    "--status",
    type=click.Choice(LISTED_STATUSES),
    default=None,
    help="queued: starts no worker has applied yet",
)
@click.option("--process", "key", default=None, metavar="KEY", help="only this process's")
@click.option("--version", type=int, default=None, help="only this version (with --process)")
@click.option("--business-key", default=None)
@click.option("--has-incident", is_flag=True, help="only instances with an open incident")
@click.option("--node", "waiting_at", default=None, metavar="NODE", help="a token is at NODE")
@click.option(
    "--started-after", default=None, metavar="WHEN", help="ISO time, or an age: 2h, 30m, 1d"
)
@click.option("--started-before", default=None, metavar="WHEN", help="ISO time, or an age")
@click.option("--limit", type=click.IntRange(1, 10000), default=100, show_default=True)
@click.option("--after", "cursor", default=None, metavar="CURSOR", help="the next page")
@_output
def instances_list(
    status: str | None,
    key: str | None,
    version: int | None,
    business_key: str | None,
    has_incident: bool,
    waiting_at: str | None,
    started_after: str | None,
    started_before: str | None,
    limit: int,
    cursor: str | None,
    fmt: str,
    as_json: bool,
) -> None:
    """Instances, newest first, filtered as the console filters them."""
    from dormant.persistence.console_queries import ConsoleQueries, InstanceFilter

    now = clock.now()
    selected = InstanceFilter(
        tenant=named_tenant(),
        key=key,
        version=version,
        status=status,
        business_key=business_key,
        has_open_incident=has_incident,
        waiting_at=waiting_at,
        started_from=when(started_after, now, "--started-after"),
        started_to=when(started_before, now, "--started-before"),
    )
    if status == QUEUED:
        _queued_list(key, limit, now, fmt, as_json)
        return
    page = read_database(lambda q: ConsoleQueries(q.engine).instance_page(selected, cursor, limit))
    rows = list(page.rows)
    suspended = read_database(lambda q: q.suspended_among([r.id for r in rows]))
    _emit(
        rows,
        instance_columns(now, suspended),
        fmt,
        as_json,
        lambda r: instance_summary(r, suspended),
        "no instances",
    )
    if page.next_cursor:
        click.echo(f"more: add --after {page.next_cursor}", err=True)


def _queued_list(key: str | None, limit: int, now: Any, fmt: str, as_json: bool) -> None:
    """``--status queued``: the starts the Client wrote that no worker has applied yet
    (they have no checkpoint, so no other list shows them)."""
    rows = _client().queued_starts(limit, key=key)
    _emit(rows, instance_columns(now), fmt, as_json, instance_summary, "no queued starts")


@instances.command("show")
@click.argument("instance_id")
@click.option("--json", "as_json", is_flag=True)
def instances_show(instance_id: str, as_json: bool) -> None:
    """One instance: status, where each token is and what it waits for, incidents, variables."""
    from dormant.engine_core.views import to_dict
    from dormant.persistence import inbox
    from dormant.tasks import wire

    client, now = _client(), clock.now()
    try:
        view = client.instance(instance_id)
    except UnknownInstance:
        queued_at = inbox.queued_start(client._store.engine, instance_id, wire.START)
        if queued_at is None:
            raise
        click.echo(queued(instance_id, queued_at, now, as_json))
        return
    if as_json:
        # The history as docs/incidents.md promises it: in business terms (the raw
        # facts: ``instances history ID --internal --json``).
        shown = to_dict(view) | {"history": _business(client.history(instance_id))}
        click.echo(json.dumps(shown, indent=2, sort_keys=True, default=str))
        return
    click.echo("\n".join(instance_lines(view, now)))


def _business(facts: Any) -> list[dict[str, Any]]:
    from dormant.engine_core.history import business_history
    from dormant.engine_core.views import to_dict

    return [to_dict(e) for e in business_history(facts)]


@instances.command("history")
@click.argument("instance_id")
@click.option("--json", "as_json", is_flag=True, help="a JSON array")
@click.option("--internal", is_flag=True, help="every fact as recorded, bookkeeping included")
def instances_history(instance_id: str, as_json: bool, internal: bool) -> None:
    """What happened to an instance, oldest first: elements reached, job attempts,
    messages, timers, incidents, operator actions, and the end event it ended at."""
    from dormant.engine_core.views import to_dict

    facts = _client().history(instance_id)
    rows = [to_dict(f) for f in facts] if internal else _business(facts)
    if as_json:
        click.echo(json.dumps(rows, indent=2, sort_keys=True, default=str))
        return
    for line in history_lines(rows, internal):
        click.echo(line)


# -- incidents -----------------------------------------------------------------------


@cli.group()
def incidents() -> None:
    """Incidents: list, inspect, retry, resolve, drop."""


@incidents.command("list")
@click.option("--instance", "instance_id", default=None, help="only this instance's")
@click.option("--process", "key", default=None, metavar="KEY", help="only this process's")
@click.option("--node", "node_id", default=None, metavar="NODE", help="only at this node id")
@click.option(
    "--state",
    type=click.Choice(INCIDENT_STATES),
    default=None,
    help="the incident's state",
)
@_output
def incidents_list(
    instance_id: str | None,
    key: str | None,
    node_id: str | None,
    state: str | None,
    fmt: str,
    as_json: bool,
) -> None:
    """One row per incident: id, instance, node, state, attempts, cause class, last failure."""
    from dormant.engine_core.views import to_dict

    columns = incident_columns(clock.now())
    tenant = named_tenant()
    found = read_database(
        lambda q: q.incidents(instance_id, state, key=key, node_id=node_id, tenant=tenant)
    )
    _emit(found, columns, fmt, as_json, to_dict, "no incidents")


@incidents.command("show")
@click.argument("incident_id")
def incidents_show(incident_id: str) -> None:
    """Every field as JSON: the cause, the snapshot (``data``), attempts and times."""
    from dormant.engine_core.views import to_dict

    click.echo(json.dumps(to_dict(_client().incident(incident_id)), indent=2, sort_keys=True))


# cancel, suspend, resume, migrate, set-variables, modify; incident retry/resolve/drop
# (one or in bulk); the batches group.
register_operations(cli, instances, incidents)
register_deployments(cli)
register_process_tests(cli)
register_flow(cli)


# -- failed triggers -----------------------------------------------------------------


@cli.group()
def triggers() -> None:
    """Failed triggers: kept when they could not be applied; list, retry, drop."""


@triggers.command("list")
@click.option("--failed", is_flag=True, default=True, help="the failed ones (the only kind kept)")
@click.option("--instance", "instance_id", default=None, help="only this instance's")
@_output
def triggers_list(failed: bool, instance_id: str | None, fmt: str, as_json: bool) -> None:
    """Failed triggers, oldest failure first: id, instance, task, error, attempts."""
    from dormant.engine_core.views import to_dict

    views = _client().failed_triggers(instance_id)
    _emit(views, failed_trigger_columns(clock.now()), fmt, as_json, to_dict, "no failed triggers")


@triggers.command("show")
@click.argument("failed_id")
def triggers_show(failed_id: str) -> None:
    """Every field as JSON, the whole body included."""
    from dormant.engine_core.views import to_dict

    view = _client()._store.failed.failed_trigger(failed_id)
    click.echo(json.dumps(to_dict(view), indent=2, sort_keys=True))


@triggers.command("parked")
@_output
def triggers_parked(fmt: str, as_json: bool) -> None:
    """Inbox and outbox rows a sweep could not process, parked with their error; each
    is retried or dropped by its name (``dormant triggers retry inbox:<id>``)."""
    from dormant.engine_core.views import to_dict

    rows = _client().parked_rows()

    def as_dict(p: Any) -> dict[str, Any]:
        return {"ref": p.ref, **to_dict(p)}

    _emit(rows, parked_row_columns(clock.now()), fmt, as_json, as_dict, "no parked sweep rows")


def _is_parked_ref(name: str) -> bool:
    """A parked sweep row is named ``inbox:<id>`` or ``outbox:<id>``; a failed
    trigger's id has no colon."""
    return name.startswith(("inbox:", "outbox:"))


@triggers.command("retry")
@click.argument("failed_id")
def triggers_retry(failed_id: str) -> None:
    """Send failed trigger FAILED_ID again (same trigger id: idempotent), or unpark a
    parked sweep row (``inbox:<id>`` / ``outbox:<id>``) for the next sweep."""
    if _is_parked_ref(failed_id):
        _client().retry_parked(failed_id)
    else:
        _client().retry_trigger(failed_id)
    click.echo(f"retry {failed_id}")


@triggers.command("drop")
@click.argument("failed_id")
def triggers_drop(failed_id: str) -> None:
    """Delete failed trigger FAILED_ID for good (the instance's history records it), or
    a parked sweep row (``inbox:<id>`` / ``outbox:<id>``)."""
    if _is_parked_ref(failed_id):
        _client().drop_parked(failed_id)
    else:
        _client().drop_trigger(failed_id)
    click.echo(f"drop {failed_id}")


# -- processes: worker, beat, dev, demo ----------------------------------------------


def _ensure_database() -> None:
    from dormant.tasks.app import ensure_database

    ensure_database()


def _stop_promptly_on_sigterm() -> None:
    """Make SIGTERM a cold shutdown with a grace period (``REMAP_SIGTERM=SIGQUIT``).

    Celery's SIGTERM is a warm shutdown that waits for running tasks with no bound: a
    trigger stuck on a lock kept ``dormant worker`` and ``dormant dev`` alive until a
    SIGKILL. Cold, the worker waits ``DORMANT_WORKER_SHUTDOWN_TIMEOUT_SECONDS``
    (``worker_soft_shutdown_timeout``), then stops what still runs without acknowledging
    it (acks late), so the broker delivers it again. billiard reads the variable when
    it is first imported, so this runs before anything imports Celery's worker.
    """
    os.environ.setdefault("REMAP_SIGTERM", "SIGQUIT")


def _warn_without_timers(queues: str | None) -> None:
    """A ``--queues`` list that names ``dormant`` but not ``dormant.timers``: say so.

    Before the timers had a queue of their own, ``--queues dormant,celery`` was the
    whole default; kept after an upgrade, such workers leave every timer fire queued
    unless another worker reads ``dormant.timers``. One line at start, not a refusal:
    a pool kept off the timers on purpose (they have a worker of their own) is fine.
    """
    from dormant.tasks.app import QUEUE, TIMER_QUEUE

    names = [q.strip() for q in (queues or "").split(",")]
    if QUEUE.name in names and TIMER_QUEUE.name not in names:
        click.echo(
            f"dormant worker: --queues {queues} reads {QUEUE.name!r} but not "
            f"{TIMER_QUEUE.name!r}: timers fire only if another worker reads "
            f"{TIMER_QUEUE.name!r} (docs/waits.md)",
            err=True,
        )


def _serve_metrics(port: int | None, host: str) -> None:
    """Serve /metrics from this (the worker's parent) process; see tasks/metrics.py.

    ``PROMETHEUS_MULTIPROC_DIR`` must be set before prometheus-client is first imported,
    so the pool children forked later write their values where this process reads them:
    an existing directory is emptied of a previous run's files, else a fresh one is made.
    """
    if port is None:
        return

    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if path:
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(path):
            if name.endswith(".db"):
                os.unlink(os.path.join(path, name))
    else:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="dormant-metrics-")
    from dormant.tasks.metrics import serve

    serve(port, host)


_metrics_port = click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    envvar="DORMANT_METRICS_PORT",
    help="serve Prometheus /metrics on this port (env DORMANT_METRICS_PORT)",
)
_metrics_host = click.option(
    "--metrics-host", default="0.0.0.0", envvar="DORMANT_METRICS_HOST", show_default=True
)


@cli.command()
@click.option("--include", "includes", multiple=True, help="a module with your job tasks")
@click.option("--concurrency", type=int, default=None)
@click.option(
    "--queues",
    default=None,
    help="comma-separated queues (default: dormant.timers,dormant,celery; "
    "a timer worker: --queues dormant.timers)",
)
@click.option(
    "--tenants",
    default=None,
    metavar="T1,T2",
    help="serve the jobs of these tenants only, from their own queues; <default> among "
    "them adds the usual queues (triggers and the default tenant's jobs); docs/tenants.md",
)
@click.option(
    "--lane",
    type=click.Choice(["all", "main", "quarantine"]),
    default=None,
    envvar="DORMANT_WORKER_LANE",
    help="all (default): every queue, full limits; main: the usual queues, a trigger past "
    "DORMANT_LANE_BUDGET_SECONDS of work or redelivered moves to the quarantine lane; "
    "quarantine: that lane only, at a lower CPU priority (docs/operations.md, 'Two lanes')",
)
@_metrics_port
@_metrics_host
@click.option("--events", "-E", is_flag=True, help="send task events (Flower's task list)")
@click.option(
    "--name",
    default=None,
    metavar="NAME",
    help="the worker's name in Flower and `celery inspect`: NAME@<host> "
    "(default celery@<host>; a NAME with @ is used as it is)",
)
@click.option("--loglevel", default="INFO", hidden=True)
@click.option("--pool", default=None, hidden=True)
def worker(
    includes: tuple[str, ...],
    concurrency: int | None,
    queues: str | None,
    tenants: str | None,
    lane: str | None,
    metrics_port: int | None,
    metrics_host: str,
    events: bool,
    name: str | None,
    loglevel: str,
    pool: str | None,
) -> None:
    """Run a worker: trigger tasks and the jobs of --include modules."""
    _stop_promptly_on_sigterm()
    lane_queues = _lane(lane)
    chosen = _tenant_queues(tenants, queues or lane_queues)
    _serve_metrics(metrics_port, metrics_host)
    _ensure_database()
    from dormant.tasks.app import app

    _warn_without_timers(queues or lane_queues)
    consumed = queues or lane_queues
    if chosen is not None:
        extra, consumed = chosen
        for queue in extra:  # their own exchange and key, not a missing queue's defaults
            app.amqp.queues.add(queue)
    argv = [
        "worker",
        f"--loglevel={loglevel}",
        "-Q",
        consumed,
        "--without-mingle",
        "--without-gossip",
    ]
    if includes:
        argv.append("--include=" + ",".join(includes))
    if concurrency:
        argv.append(f"--concurrency={concurrency}")
    if pool:
        argv.append(f"--pool={pool}")
    if events:
        argv.append("--task-events")
    if name:
        # Celery's node name: two workers on one host both default to celery@<host>,
        # and Flower then shows one worker where two run (issue 28).
        argv.append("--hostname=" + (name if "@" in name else f"{name}@%h"))
    _run_celery(argv)


def _run_celery(argv: list[str]) -> None:
    """Run Celery's own ``worker`` or ``beat`` command (``argv[0]``) with dormant's app,
    as ``app.worker_main`` and ``app.start`` run it, but through that one command.

    They go through Celery's whole command group, whose module imports every plugin's
    command (Flower's, the amqp shell's prompt toolkit): about a quarter of a second that each
    worker, beat and dev process paid at start for commands it never runs. The group's
    part that matters here is kept: the app in the command's context, and the app's
    user options on the command.
    """
    from celery.bin.base import CLIContext

    from dormant.tasks.app import app

    name, args = argv[0], argv[1:]
    if name == "worker":
        from celery.bin.worker import worker as command
    elif name == "beat":
        from celery.bin.beat import beat as command
    else:
        raise ValueError(f"not a Celery command dormant runs: {name!r}")
    command.params.extend(app.user_options.get(name, []))
    context = CLIContext(app=app, no_color=None, workdir=None, quiet=False)
    command.main(args=args, prog_name=f"celery {name}", obj=context, standalone_mode=False)


# How much lower the quarantine lane's CPU priority is (``nice``): under contention the
# main lane's pool processes get about ten times its share of a core.
QUARANTINE_NICENESS = 10


def _lane(lane: str | None) -> str:
    """The worker's lane (tasks/lanes.py) in this process and its pool processes, and
    the queues it reads. The quarantine lane runs at a lower CPU priority: what it
    runs is what proved expensive, and the main lane's triggers go first."""
    from dormant.persistence.settings import Settings
    from dormant.tasks import app as app_module

    if lane is not None and lane != app_module.settings.worker_lane:
        os.environ["DORMANT_WORKER_LANE"] = lane
        app_module.configure(Settings.from_env())
    chosen = app_module.settings.worker_lane
    if chosen == "quarantine":
        os.nice(QUARANTINE_NICENESS)
        return app_module.QUARANTINE_QUEUE.name
    if chosen == "main":
        click.echo(
            f"dormant worker: main lane: what it moves waits in "
            f"{app_module.QUARANTINE_QUEUE.name!r} for a worker with --lane quarantine "
            "(or without --lane) to apply it (docs/operations.md, 'Two lanes')",
            err=True,
        )
        return app_module.MAIN_LANE_QUEUES
    return app_module.WORKER_QUEUES


def _tenant_queues(tenants: str | None, queues: str | None) -> tuple[list[Any], str] | None:
    """``--tenants``: the tenants' queues to declare and the ``-Q`` list (with
    ``--queues`` too: those queues and the tenants'); a bad tenant id is a usage
    error naming the rule."""
    if tenants is None:
        return None
    from dormant.tasks.app import WORKER_QUEUES
    from dormant.tasks.tenant_queues import tenant_queue_names

    try:
        extra, names = tenant_queue_names(tenants.split(","), queues or WORKER_QUEUES)
    except InvalidField as exc:
        raise click.BadParameter(str(exc), param_hint="--tenants") from exc
    if queues:
        names = ",".join(dict.fromkeys([*queues.split(","), *names.split(",")]))
    return extra, names


@cli.command()
@click.option("--loglevel", default="INFO", hidden=True)
def beat(loglevel: str) -> None:
    """Run beat: the deadline scan every half second and the outbox/inbox sweep."""
    _ensure_database()
    _run_celery(["beat", f"--loglevel={loglevel}", "--scheduler=celery.beat:Scheduler"])


@cli.command()
@click.option("--include", "includes", multiple=True)
@click.option("--concurrency", type=int, default=4)
@_metrics_port
@_metrics_host
@click.option("--loglevel", default="INFO", hidden=True)
def dev(
    includes: tuple[str, ...],
    concurrency: int,
    metrics_port: int | None,
    metrics_host: str,
    loglevel: str,
) -> None:
    """Worker and beat in one process (embedded SQLite + broker unless URLs are set)."""
    _stop_promptly_on_sigterm()
    _serve_metrics(metrics_port, metrics_host)
    _ensure_database()
    from dormant.tasks.app import WORKER_QUEUES

    schedule = tempfile.mkdtemp(prefix="dormant-beat-") + "/schedule"
    argv = [
        "worker",
        f"--loglevel={loglevel}",
        "-Q",
        WORKER_QUEUES,
        # prefork, not threads: Celery enforces the trigger time limits and stops a
        # running task at shutdown only in pool processes (a thread cannot be stopped).
        "--pool=prefork",
        f"--concurrency={concurrency}",
        "--beat",
        f"--schedule={schedule}",
        "--without-mingle",
        "--without-gossip",
    ]
    if includes:
        argv.append("--include=" + ",".join(includes))
    _run_celery(argv)


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8080, show_default=True)
@click.option("--read-only", is_flag=True, help="pages only: every action is refused")
@click.option("--root-path", default="", help="the path prefix a reverse proxy serves it under")
def console(host: str, port: int, read_only: bool, root_path: str) -> None:
    """The web console (DORMANT_CONSOLE_AUTH=user:password or DORMANT_CONSOLE_TOKEN)."""
    from dormant.tasks.console.serve import serve

    serve(host=host, port=port, read_only=read_only, root_path=root_path)


@cli.command("hash-password")
@click.option(
    "--iterations",
    type=click.IntRange(1_000),
    default=600_000,
    show_default=True,
    help="PBKDF2 iterations (at least 1000)",
)
def hash_password_cmd(iterations: int) -> None:
    """A password's hash for DORMANT_CONSOLE_USERS (docs/console.md, "Users and roles"):
    the password is read from standard input, never from the command line."""
    from dormant.tasks.console.authorization import hash_password

    password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise click.UsageError("no password on standard input")
    click.echo(hash_password(password, iterations))


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8088, show_default=True)
def api(host: str, port: int) -> None:
    """The Camunda 8 REST API (v2) for Modeler, c8ctl and the SDKs (docs/camunda-api.md)."""
    _ensure_database()
    from dormant.tasks.api.serve import serve

    serve(host=host, port=port)


@cli.command()
@click.option("--instances", "count", type=int, default=3, help="how many orders to run")
@click.option("--timeout", type=float, default=60.0)
def demo(count: int, timeout: float) -> None:
    """Run the order example end to end on a fresh embedded database."""
    from dormant.tasks.demo import run

    sys.exit(run(count=count, timeout=timeout))


def main() -> None:
    """The console script: a DormantError is one line and exit code 2."""
    try:
        cli(standalone_mode=False)
    except DormantError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()

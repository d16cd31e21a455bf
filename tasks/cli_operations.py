"""The operations commands of ``dormant`` (registered onto the groups of tasks/cli.py).

One ID and no filter acts on that instance or incident directly, as before; several IDs
or a filter (``--process K`` and its refinements) make a batch, which the command
follows until it completes (progress on stderr) and reports honestly:
``batch B: selected 15, retried 12, refused 3: ...``. Exit code 3 when anything was
refused, 2 for a refused command, 0 otherwise.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from dormant.engine_core.states import LISTED_STATUSES, QUEUED
from dormant.tasks.cli_common import make_client as _client
from dormant.tasks.cli_common import parse_node_pairs as _pairs
from dormant.tasks.cli_common import parse_vars
from dormant.tasks.cli_common import parse_when as when

if TYPE_CHECKING:
    from dormant.persistence.batches import BatchView
    from dormant.persistence.selection import Selector

__all__ = ["register"]

# A batch acts on instances that have a checkpoint: a queued start has none yet.
SELECTABLE_STATUSES = tuple(s for s in LISTED_STATUSES if s != QUEUED)


def _common(kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The selection options: IDs, or --process with the filters of ``kind``."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        options = [
            click.argument("ids", nargs=-1),
            click.option("--process", "key", default=None, metavar="KEY", help="filter: process"),
            click.option("--version", type=int, default=None, help="filter: its version"),
            click.option("--node", default=None, metavar="NODE", help="filter: at this node"),
            click.option("--dry-run", is_flag=True, help="show what would be selected"),
            click.option("--no-wait", is_flag=True, help="start the batch and return"),
        ]
        if kind == "incident":
            options.append(click.option("--cause-class", default=None, help="filter: cause"))
        else:
            options += [
                click.option(
                    "--status",
                    type=click.Choice(SELECTABLE_STATUSES),
                    default=None,
                    help="filter (default: running)",
                ),
                click.option(
                    "--business-key-like", default=None, metavar="PATTERN", help="SQL LIKE"
                ),
                click.option("--started-before", default=None, metavar="ISO"),
                click.option("--started-after", default=None, metavar="ISO"),
            ]
        for option in reversed(options):
            f = option(f)
        return f

    return wrap


def _selector(ids: tuple[str, ...], key: str | None, **filters: Any) -> Selector:
    for name in ("started_before", "started_after"):
        if name in filters:
            filters[name] = when(filters[name])
    # Late on purpose: the selector's module brings SQLAlchemy, which only a bulk
    # command uses, never ``dormant --help`` (bench/bench_cli.py).
    from dormant.persistence.selection import Selector

    return Selector(ids=list(ids), key=key, **filters)


def _follow(client: Any, view: BatchView, no_wait: bool) -> None:
    click.echo(f"batch {view.id}: {view.operation}, {view.selected} selected")
    if not no_wait and view.state != "completed":
        seen = [-1]

        def progress(v: BatchView) -> None:
            if v.done != seen[0]:
                seen[0] = v.done
                click.echo(f"  {v.done}/{v.selected} done", err=True)

        view = client.wait_batch(view.id, progress=progress)
    click.echo(f"batch {view.id}: {view.report()}")
    if view.refused:
        sys.exit(3)


def _bulk(
    operation: str,
    selector: Selector,
    params: dict[str, Any],
    dry_run: bool,
    no_wait: bool,
) -> None:
    client = _client()
    if dry_run:
        targets = client.select(operation, selector)
        for t in targets:
            line = (
                t.target_id
                if t.instance_id in (None, t.target_id)
                else (f"{t.target_id}\t{t.instance_id}")
            )
            if operation == "migrate" and t.instance_id is not None:
                found = client.migration_problems(
                    t.instance_id, params["version"], params.get("mapping")
                )
                line += "\tok" if not found else "\trefused: " + "; ".join(found)
            click.echo(line)
        click.echo(f"would {operation.replace('_', ' ')}: {len(targets)} selected")
        return
    _follow(client, client.bulk(operation, selector, params), no_wait)


def _single(ids: tuple[str, ...], selector_args: dict[str, Any], dry_run: bool) -> bool:
    return len(ids) == 1 and not dry_run and all(v is None for v in selector_args.values())


def register(cli: click.Group, instances: click.Group, incidents: click.Group) -> None:
    """Add the operations commands to the ``dormant`` groups."""

    def incident_op(op: str) -> None:
        @incidents.command(
            op,
            help=f"{op.capitalize()} incidents: INCIDENT_ID..., or --process KEY with filters.",
        )
        @_common("incident")
        def command(
            ids: tuple[str, ...], key: str | None, dry_run: bool, no_wait: bool, **filters: Any
        ) -> None:
            if _single(ids, {"key": key, **filters}, dry_run):
                getattr(_client(), f"{op}_incident")(ids[0])
                click.echo(f"{op} {ids[0]}")
                return
            _bulk(f"incident_{op}", _selector(ids, key, **filters), {}, dry_run, no_wait)

    for op in ("retry", "resolve", "drop"):
        incident_op(op)

    def instance_op(op: str, verb: str) -> None:
        @instances.command(
            op, help=f"{op.capitalize()} instances: ID..., or --process KEY with filters."
        )
        @_common("instance")
        def command(
            ids: tuple[str, ...], key: str | None, dry_run: bool, no_wait: bool, **filters: Any
        ) -> None:
            if _single(ids, {"key": key, **filters}, dry_run):
                getattr(_client(), op)(ids[0])
                click.echo(f"{verb} {ids[0]}")
                return
            _bulk(op, _selector(ids, key, **filters), {}, dry_run, no_wait)

    for op, verb in (("cancel", "cancelling"), ("suspend", "suspending"), ("resume", "resuming")):
        instance_op(op, verb)

    @instances.command("migrate")
    # ``to_version``, not ``version``: ``--version`` is the selection filter of
    # ``_common`` (both once bound one parameter and the filter was lost, issue 28).
    @click.option("--to", "to_version", type=int, required=True, help="the target version")
    @click.option("--map", "maps", multiple=True, metavar="OLD=NEW", help="rename a node")
    @_common("instance")
    def instances_migrate(
        to_version: int,
        maps: tuple[str, ...],
        ids: tuple[str, ...],
        key: str | None,
        dry_run: bool,
        no_wait: bool,
        **filters: Any,
    ) -> None:
        """Move instances to version --to: ID..., or --process KEY with filters."""
        mapping = _pairs(maps, "--map")
        if _single(ids, {"key": key, **filters}, dry_run):
            _client().migrate(ids[0], to_version, mapping)
            click.echo(f"migrating {ids[0]} to v{to_version}")
            return
        params = {"version": to_version, "mapping": mapping}
        _bulk("migrate", _selector(ids, key, **filters), params, dry_run, no_wait)

    @instances.command("set-variables")
    @click.argument("instance_id")
    @click.option("--var", "vars_", multiple=True, metavar="K=V")
    @click.option("--unset", multiple=True, metavar="NAME")
    @click.option(
        "--scope",
        default=None,
        help="a scope id or sub-process node id (default: the instance's root scope)",
    )
    @click.option("--retry", is_flag=True, help="then retry the instance's open incidents")
    def instances_set_variables(
        instance_id: str,
        vars_: tuple[str, ...],
        unset: tuple[str, ...],
        scope: str | None,
        retry: bool,
    ) -> None:
        """Set or remove variables of an instance (validated as a start's are)."""
        variables = parse_vars(vars_)
        in_scope = {} if scope is None else {"scope": scope}  # else the Client's: the root
        _client().set_variables(instance_id, variables, unset, retry_incidents=retry, **in_scope)
        names = ", ".join([*variables, *(f"-{n}" for n in unset)])
        click.echo(f"setting {names} on {instance_id}" + (" and retrying" if retry else ""))

    @instances.command("modify")
    @click.argument("instance_id")
    @click.option("--cancel", "cancel_nodes", multiple=True, metavar="NODE")
    @click.option("--start-before", multiple=True, metavar="NODE")
    def instances_modify(
        instance_id: str, cancel_nodes: tuple[str, ...], start_before: tuple[str, ...]
    ) -> None:
        """Cancel the tokens at --cancel nodes and/or start a token before --start-before."""
        _client().modify(instance_id, cancel_nodes, start_before)
        click.echo(f"modifying {instance_id}")

    @cli.group()
    def jobs() -> None:
        """Job types: pause and resume their dispatch."""

    @jobs.command("pause")
    @click.argument("job_type")
    def jobs_pause(job_type: str) -> None:
        """Hold the jobs of JOB_TYPE instead of sending them."""
        _client().pause_job_type(job_type)
        click.echo(f"paused {job_type}")

    @jobs.command("resume")
    @click.argument("job_type")
    def jobs_resume(job_type: str) -> None:
        """Send the held jobs of JOB_TYPE and the ones that follow."""
        count = _client().resume_job_type(job_type)
        click.echo(f"resumed {job_type}: {count} held job(s) sent")

    @jobs.command("paused")
    def jobs_paused() -> None:
        """The paused job types and how many jobs each holds."""
        for job_type, held in _client().paused_job_types().items():
            click.echo(f"{job_type}\t{held} held")

    @cli.group()
    def batches() -> None:
        """Bulk operations: their progress and their report."""

    @batches.command("list")
    def batches_list() -> None:
        """Batches, newest first: id, operation, state and the report."""
        for b in _client().batches():
            click.echo(f"{b.id}\t{b.operation}\t{b.state}\t{b.report()}")

    @batches.command("show")
    @click.argument("batch_id")
    @click.option("--items", "show_items", is_flag=True, help="every target and its outcome")
    @click.option("--json", "as_json", is_flag=True)
    def batches_show(batch_id: str, show_items: bool, as_json: bool) -> None:
        """One batch: its selector and report; --items: every target and its outcome."""
        client = _client()
        view = client.batch(batch_id)
        if as_json:
            data = asdict(view) | {"report": view.report()}
            click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
            return
        click.echo(f"{view.id}  {view.operation}  {view.state}")
        click.echo(f"  selector: {json.dumps(view.selector, sort_keys=True, default=str)}")
        click.echo(f"  {view.report()}")
        if show_items:
            for item in client.batch_items(batch_id):
                click.echo(
                    f"  {item.seq}\t{item.target_id}\t{item.outcome or 'pending'}"
                    + (f"\t{item.reason}" if item.reason else "")
                )

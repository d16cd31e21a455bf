"""The flow-control commands of ``dormant`` (docs/flow-control.md): ``job-types list``
(per type and per key: running, waiting, limit, rate, paused until) and ``job-types
set-limit TYPE ...`` (an operator's limits at run time, audited; registered onto
tasks/cli.py's group)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import click

from dormant.persistence import clock
from dormant.tasks.cli_common import make_client as _client
from dormant.tasks.display import Column, iso
from dormant.tasks.display import emit as _emit
from dormant.tasks.display import output_options as _output

if TYPE_CHECKING:
    from datetime import datetime

    from dormant.engine_core.job_flow import FlowLimits
    from dormant.persistence.job_flow import FlowRow

__all__ = ["register"]

# set-limit's --remove choices: the limits one may take away (the key and the period
# are not limits: a key limit goes with its key, the period with its rates)
_REMOVABLE = ("concurrency", "key_concurrency", "rate", "key_rate", "key")


def _as_dict(row: FlowRow) -> dict[str, Any]:
    data = asdict(row)
    data["paused_until"] = iso(row.paused_until) if row.paused_until else None
    return data


def _limits_line(job_type: str, limits: FlowLimits) -> str:
    parts = [f"{k}={v}" for k, v in asdict(limits).items() if v is not None]
    return f"{job_type}: " + (", ".join(parts) if parts else "no limits")


def _left(row: FlowRow, now: datetime) -> str:
    if row.paused_until is None:
        return "-"
    return f"{(row.paused_until - now).total_seconds():.1f}s"


def register(cli: click.Group) -> None:
    @cli.group("job-types")
    def job_types() -> None:
        """Flow control of job types: concurrency and rate limits, per type and per key."""

    @job_types.command("list")
    @_output
    def job_types_list(fmt: str, as_json: bool) -> None:
        """Each limited type, then each of its keys with jobs out, waiting or paused."""
        now = clock.now()
        columns = [
            Column("JOB TYPE", lambda r: r.job_type),
            Column("KEY", lambda r: "(all)" if r.key is None else repr(r.key)),
            Column("RUNNING", lambda r: str(r.running)),
            Column("WAITING", lambda r: str(r.waiting)),
            Column("LIMIT", lambda r: "-" if r.limit is None else str(r.limit)),
            Column("RATE", lambda r: r.rate or "-"),
            Column(
                "PAUSED UNTIL",
                lambda r: (
                    f"{(r.paused_until - now).total_seconds():.1f}s" if r.paused_until else "-"
                ),
                lambda r: iso(r.paused_until) if r.paused_until else "",
            ),
        ]
        rows = _client().job_types()
        _emit(rows, columns, fmt, as_json, _as_dict, "no limited job types")

    @job_types.command("set-limit")
    @click.argument("job_type")
    @click.option("--concurrency", type=click.IntRange(min=1), help="jobs out at once, all keys")
    @click.option("--key", "key", help="FEEL over the job's variables, e.g. '=customerId'")
    @click.option("--key-concurrency", type=click.IntRange(min=1), help="jobs out per key")
    @click.option("--rate", type=click.IntRange(min=1), help="jobs started per period")
    @click.option("--key-rate", type=click.IntRange(min=1), help="per key, per period")
    @click.option("--period", type=click.FloatRange(min=0, min_open=True), help="seconds")
    @click.option(
        "--remove", multiple=True, type=click.Choice(_REMOVABLE), help="take a limit away"
    )
    @click.option("--reset", is_flag=True, help="back to DORMANT_JOB_TYPES")
    def job_types_set_limit(
        job_type: str,
        concurrency: int | None,
        key: str | None,
        key_concurrency: int | None,
        rate: int | None,
        key_rate: int | None,
        period: float | None,
        remove: tuple[str, ...],
        reset: bool,
    ) -> None:
        """Change JOB_TYPE's limits now (the options given; the rest stay). Workers
        apply them within a second; jobs waiting under a raised limit go at beat's next
        sweep. Recorded in the audit trail."""
        given = {
            "concurrency": concurrency,
            "key": key,
            "key_concurrency": key_concurrency,
            "rate": rate,
            "key_rate": key_rate,
            "rate_period_seconds": period,
        }
        changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        changes.update({name: None for name in remove})
        if reset and changes:
            raise click.UsageError("--reset takes no other limit option")
        if not reset and not changes:
            raise click.UsageError("nothing to change: give a limit option, --remove or --reset")
        limits = _client().set_job_type_limits(job_type, **changes)
        click.echo(_limits_line(job_type, limits))

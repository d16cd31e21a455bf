"""The deployment commands of ``dormant``: ``deploy FILE...`` (one deployment of every
file given) and ``deployments list|show`` (registered onto tasks/cli.py's group)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from dormant.engine_core.errors import DormantError
from dormant.persistence import clock
from dormant.tasks.cli_common import make_client as _client
from dormant.tasks.display import Column, ago, iso
from dormant.tasks.display import emit as _emit
from dormant.tasks.display import output_options as _output

if TYPE_CHECKING:
    from dormant.persistence.deployments import DeploymentRecord, Resource

__all__ = ["register"]


def _resources(record: DeploymentRecord) -> str:
    return ", ".join(
        f"{r.id} v{r.version}" + ("" if r.created else " (unchanged)") for r in record.resources
    )


def _as_dict(record: DeploymentRecord) -> dict[str, Any]:
    return {
        "key": record.key,
        "deployed_at": record.deployed_at.isoformat(),
        "resources": [_resource_dict(r) for r in record.resources],
    }


def _resource_dict(r: Resource) -> dict[str, Any]:
    return {"kind": r.kind, "id": r.id, "version": r.version, "created": r.created, "name": r.name}


def register(cli: click.Group) -> None:
    @cli.command()
    @click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
    def deploy(files: tuple[str, ...]) -> None:
        """Deploy FILE.bpmn / FILE.dmn / FILE.form ... as one deployment; prints each
        process key (decision id, form id) and version, then the deployment key on
        stderr."""
        from dormant.tasks.client import _read_source

        client = _client()
        store = client._store
        sources = []
        for file in files:
            try:
                sources.append(_read_source(file, store.settings.max_model_bytes))
            except DormantError as exc:
                click.echo(f"error: {file}: {exc}", err=True)
                sys.exit(2)
        try:
            deployments = store.deployments.deploy_many(
                sources, clock.now(), list(files), audited=client._command("deploy")
            )
        except DormantError as exc:
            where = files[0] if len(files) == 1 else ", ".join(files)
            click.echo(f"error: {where}: {exc}", err=True)
            sys.exit(2)
        for d in deployments:
            click.echo(f"{d.key} {d.version}")
        if deployments:
            click.echo(f"deployment {deployments[0].deployment_key}", err=True)

    @cli.group()
    def deployments() -> None:
        """Deployments: the sets of resources deployed together."""

    @deployments.command("list")
    @click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
    @_output
    def deployments_list(limit: int, fmt: str, as_json: bool) -> None:
        """Deployments, newest first: key, when, resources."""
        now = clock.now()
        columns = [
            Column("DEPLOYMENT", lambda d: str(d.key)),
            Column("DEPLOYED", lambda d: ago(d.deployed_at, now), lambda d: iso(d.deployed_at)),
            Column("RESOURCES", _resources),
        ]
        _emit(_client().deployments(limit), columns, fmt, as_json, _as_dict, "no deployments")

    @deployments.command("show")
    @click.argument("key", type=int)
    @click.option("--json", "as_json", is_flag=True, help="the deployment as JSON")
    def deployments_show(key: int, as_json: bool) -> None:
        """One deployment and every resource in it."""
        record = _client().deployment(key)
        if as_json:
            click.echo(json.dumps(_as_dict(record), indent=2, sort_keys=True))
            return
        click.echo(f"deployment {record.key}  deployed {iso(record.deployed_at)}")
        for r in record.resources:
            made = "new version" if r.created else "unchanged"
            source = f"  from {r.name}" if r.name else ""
            click.echo(f"  {r.kind:<8} {r.id} v{r.version}  ({made}){source}")

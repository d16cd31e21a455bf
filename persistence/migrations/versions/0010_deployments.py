"""Deployments as a record: the ``deployments`` table, and on every definition and
decision the deployment that created it and its ``zeebe:versionTag``.

Rows deployed before this revision are given one deployment per file deployed
(definitions sharing a checksum and a deployment time; decisions sharing a file
checksum and a deployment time), so a ``deployment`` binding and ``dormant
deployments list`` see them too. Their version tags and whether they have a none start
event are read from their stored source; a source this version of the reader refuses
keeps no tag (and is assumed to have a none start event: the call activity's child
start then says what is wrong).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import JsonDoc, UtcDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def _id() -> Any:
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "deployments",
        sa.Column("key", _id(), primary_key=True, autoincrement=True),
        sa.Column("deployed_at", UtcDateTime(), nullable=False),
        sa.Column("resources", JsonDoc(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_deployments"),
    )
    for table in ("definitions", "decisions"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("deployment_key", _id()))
            batch.add_column(sa.Column("version_tag", sa.String(255)))
        op.create_index(f"ix_{table}_deployment_key", table, ["deployment_key"])
    _backfill(op.get_bind())


def _backfill(conn: sa.Connection) -> None:
    from dormant.engine_core.bpmn import read_bpmn
    from dormant.engine_core.dmn import read_dmn

    meta = sa.MetaData()
    deployments = sa.Table("deployments", meta, autoload_with=conn)
    definitions = sa.Table("definitions", meta, autoload_with=conn)
    decisions = sa.Table("decisions", meta, autoload_with=conn)
    groups: dict[tuple[str, str, Any], list[Any]] = {}
    for row in conn.execute(sa.select(definitions).order_by(definitions.c.deployed_at)):
        groups.setdefault(("process", row.checksum, row.deployed_at), []).append(row)
    for row in conn.execute(sa.select(decisions).order_by(decisions.c.deployed_at)):
        groups.setdefault(("decision", row.dmn_checksum, row.deployed_at), []).append(row)
    for (kind, _checksum, deployed_at), rows in sorted(groups.items(), key=lambda g: g[0][2]):
        resources = []
        tags: dict[str, str | None] = {}
        none_starts: dict[str, bool] = {}
        try:
            if kind == "process":
                for d in read_bpmn(rows[0].source):
                    tags[d.key] = d.version_tag
                    none_starts[d.key] = bool(d.none_starts(None))
            else:
                tags = {d.id: d.version_tag for d in read_dmn(rows[0].source)}
        except Exception:  # a source this reader refuses keeps no tag
            pass
        for row in rows:
            ident = row.key if kind == "process" else row.decision_id
            resources.append(
                {"kind": kind, "id": ident, "version": row.version, "created": True, "name": None}
            )
        key = conn.execute(
            sa.insert(deployments)
            .values(deployed_at=deployed_at, resources=resources)
            .returning(deployments.c.key)
        ).scalar_one()
        for row in rows:
            if kind == "process":
                starts = dict(row.starts or {})
                starts.setdefault("none", none_starts.get(row.key, True))
                conn.execute(
                    sa.update(definitions)
                    .where(definitions.c.key == row.key, definitions.c.version == row.version)
                    .values(deployment_key=key, version_tag=tags.get(row.key), starts=starts)
                )
            else:
                conn.execute(
                    sa.update(decisions)
                    .where(
                        decisions.c.decision_id == row.decision_id,
                        decisions.c.version == row.version,
                    )
                    .values(deployment_key=key, version_tag=tags.get(row.decision_id))
                )


def downgrade() -> None:
    for table in ("decisions", "definitions"):
        op.drop_index(f"ix_{table}_deployment_key", table_name=table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("version_tag")
            batch.drop_column("deployment_key")
    op.drop_table("deployments")

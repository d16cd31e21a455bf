"""User tasks carry what Camunda users set: schedule, priority, form, lifecycle state,
and their candidate users and groups in a table of their own (one row per name), so
the candidate filters are index lookups. The comma-separated ``candidate_groups``
column is moved into it and dropped.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import UtcDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    candidates = op.create_table(
        "user_task_candidates",
        sa.Column("instance_id", sa.String(255), nullable=False),
        sa.Column("wait_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint(
            "instance_id", "wait_id", "kind", "name", name="pk_user_task_candidates"
        ),
    )
    op.create_index("ix_user_task_candidates_kind_name", "user_task_candidates", ["kind", "name"])
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT instance_id, wait_id, candidate_groups FROM user_tasks "
            "WHERE candidate_groups IS NOT NULL"
        )
    ).all()
    backfill: list[dict[str, str]] = []
    for row in rows:
        names: list[str] = []
        for name in str(row.candidate_groups).split(","):
            name = name.strip()[:255]
            if name and name not in names:
                names.append(name)
        backfill.extend(
            {"instance_id": row.instance_id, "wait_id": row.wait_id, "kind": "group", "name": n}
            for n in names
        )
    if backfill:
        op.bulk_insert(candidates, backfill)
    with op.batch_alter_table("user_tasks") as batch:
        batch.drop_column("candidate_groups")
        batch.add_column(sa.Column("due_date", UtcDateTime()))
        batch.add_column(sa.Column("follow_up_date", UtcDateTime()))
        batch.add_column(
            sa.Column("priority", sa.Integer(), nullable=False, server_default=sa.text("50"))
        )
        batch.add_column(sa.Column("form_key", sa.String(1024)))
        batch.add_column(sa.Column("form_id", sa.String(1024)))
        batch.add_column(sa.Column("external_reference", sa.String(1024)))
        batch.add_column(
            sa.Column("state", sa.String(16), nullable=False, server_default=sa.text("'created'"))
        )
        batch.add_column(sa.Column("denied_reason", sa.String(1024)))
    op.create_index("ix_user_tasks_assignee", "user_tasks", ["assignee"])
    op.create_index("ix_user_tasks_due_date", "user_tasks", ["due_date"])


def downgrade() -> None:
    op.drop_index("ix_user_tasks_due_date", table_name="user_tasks")
    op.drop_index("ix_user_tasks_assignee", table_name="user_tasks")
    with op.batch_alter_table("user_tasks") as batch:
        for column in (
            "denied_reason",
            "state",
            "external_reference",
            "form_id",
            "form_key",
            "priority",
            "follow_up_date",
            "due_date",
        ):
            batch.drop_column(column)
        batch.add_column(sa.Column("candidate_groups", sa.String(1024)))
    op.drop_index("ix_user_task_candidates_kind_name", table_name="user_task_candidates")
    op.drop_table("user_task_candidates")

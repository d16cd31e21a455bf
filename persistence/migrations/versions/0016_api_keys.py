"""The Camunda 8 REST API's numeric keys (``api_keys``) and the jobs of the job types
its workers serve (``api_jobs``): tasks/api, docs/camunda-api.md.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from dormant.persistence.tables import JsonDoc, UtcDateTime

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("key", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("dormant_id", sa.String(320), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_api_keys"),
        sa.UniqueConstraint("kind", "dormant_id", name="uq_api_keys_kind_dormant_id"),
    )
    op.create_table(
        "api_jobs",
        sa.Column("key", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("job_type", sa.String(255), nullable=False),
        sa.Column("instance_id", sa.String(255), nullable=False),
        sa.Column("wait_id", sa.String(255), nullable=False),
        sa.Column("node_id", sa.String(255), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("variables", JsonDoc(), nullable=False),
        sa.Column("headers", JsonDoc(), nullable=False),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("deadline", UtcDateTime(), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_api_jobs"),
    )
    op.create_index("ix_api_jobs_job_type_worker", "api_jobs", ["job_type", "worker"])
    op.create_index("ix_api_jobs_instance_id_wait_id", "api_jobs", ["instance_id", "wait_id"])


def downgrade() -> None:
    op.drop_table("api_jobs")
    op.drop_table("api_keys")

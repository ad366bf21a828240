"""retrain_jobs: aux-probe retrains requested by the leader and carried out by ``retrain`` workers

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 10:00:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "retrain_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("cycle", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("probe_id", sa.Integer(), nullable=True),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("state IN ('pending', 'done', 'skipped', 'failed')", name=op.f("ck_retrain_jobs_state")),
        sa.ForeignKeyConstraint(["probe_id"], ["probes.id"], name=op.f("fk_retrain_jobs_probe_id_probes"),
                                ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_retrain_jobs_run_id_runs"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_retrain_jobs")),
        sa.UniqueConstraint("name", name=op.f("uq_retrain_jobs_name")),
    )
    with op.batch_alter_table("retrain_jobs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_retrain_jobs_run_id"), ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("retrain_jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_retrain_jobs_run_id"))
    op.drop_table("retrain_jobs")

"""index solver trials by (solver, created_at) for the hourly spot-check budget

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 00:40:00
"""
from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("solver_trials", schema=None) as batch_op:
        batch_op.create_index("ix_solver_trials_solver_created", ["solver_id", "created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("solver_trials", schema=None) as batch_op:
        batch_op.drop_index("ix_solver_trials_solver_created")

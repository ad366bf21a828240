"""Exploration flags (issue #36): ``queue.explore`` marks a task served unfiltered (its message says
``"explore": true``), and ``labels.explore`` carries the flag onto the trainer's label of it, so the
unbiased labels can be told from the probe-selected ones. NULL on older rows (not explored).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27 03:00:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("queue", "labels"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("explore", sa.Boolean(), nullable=True))


def downgrade() -> None:
    for table in ("queue", "labels"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("explore")

"""widen provenance hash columns to 128 characters (prefixed digests such as ``sha256:<64 hex>``)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 00:45:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (("tasks", "adapter_hash", True), ("probes", "reference_fingerprint", False),
           ("generator_checkpoints", "adapter_hash", False))


def upgrade() -> None:
    for table, column, nullable in COLUMNS:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column(column, existing_type=sa.String(length=64), type_=sa.String(length=128),
                                  existing_nullable=nullable)


def downgrade() -> None:
    for table, column, nullable in COLUMNS:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column(column, existing_type=sa.String(length=128), type_=sa.String(length=64),
                                  existing_nullable=nullable)

"""probes.run_id: the active probe set is per run (two runs sharing a store no longer swap each
other's reward). Existing probes are assigned to the run whose name prefixes theirs (the daemon
names them ``<run>-primary-<i>`` and ``<run>-aux-c<cycle>``; the longest matching run name wins).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 11:30:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("probes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("run_id", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_probes_run_id"), ["run_id"], unique=False)
        batch_op.create_foreign_key(batch_op.f("fk_probes_run_id_runs"), "runs", ["run_id"], ["id"],
                                    ondelete="CASCADE")
    op.execute(
        "UPDATE probes SET run_id = (SELECT r.id FROM runs r WHERE substr(probes.name, 1, length(r.name) + 1) "
        "= r.name || '-' ORDER BY length(r.name) DESC LIMIT 1)")


def downgrade() -> None:
    with op.batch_alter_table("probes", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_probes_run_id_runs"), type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_probes_run_id"))
        batch_op.drop_column("run_id")

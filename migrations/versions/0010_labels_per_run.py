"""Labels per run: ``labels.run_id`` and the unique key (task, run, solver id, source) (#37).

Another run may replay a task (``propel tasks import``); before this revision both runs' trainer acks
of the same version wrote ONE label row, the second overwriting the first, and run A's probes trained
on run B's outcome. Every label now names the run that measured it.

Upgrade carries each existing label over to its task's run — exactly the run every reader attributed it
to before (they all scoped labels by ``tasks.run_id``); a label whose task has no run stays NULL.
Downgrade restores the old key; where several runs labelled one (task, solver id, source) it keeps the row
of the task's own run (what the old readers read), else the most recently written one, and logs how many
rows it dropped — the old schema cannot hold them.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 14:30:00
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")


def upgrade() -> None:
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.add_column(sa.Column("run_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(batch_op.f("fk_labels_run_id_runs"), "runs", ["run_id"], ["id"],
                                    ondelete="SET NULL")
        batch_op.create_index("ix_labels_run_name", ["run_id", "solver_name"], unique=False)
    op.execute(sa.text("UPDATE labels SET run_id = (SELECT tasks.run_id FROM tasks WHERE tasks.id = labels.task_id)"))
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.drop_constraint("uq_labels_task_id_solver_id_source", type_="unique")
        batch_op.create_unique_constraint(batch_op.f("uq_labels_task_id_run_id_solver_id_source"),
                                          ["task_id", "run_id", "solver_id", "source"])


def _drop_duplicates(conn: sa.Connection) -> int:
    """Keep one label per (task, solver id, source): the task's own run's, else the newest."""
    rows = conn.execute(sa.text(
        "SELECT l.id, l.task_id, l.solver_id, l.source, l.run_id, t.run_id AS task_run, l.updated_at "
        "FROM labels l JOIN tasks t ON t.id = l.task_id WHERE EXISTS (SELECT 1 FROM labels o WHERE "
        "o.task_id = l.task_id AND o.solver_id = l.solver_id AND o.source = l.source AND o.id <> l.id)")).all()
    groups: dict[tuple[int, str, str], list[sa.Row[tuple[object, ...]]]] = {}
    for r in rows:
        groups.setdefault((r.task_id, r.solver_id, r.source), []).append(r)
    drop = []
    for members in groups.values():
        keep = max(members, key=lambda r: (r.run_id is not None and r.run_id == r.task_run, str(r.updated_at), r.id))
        drop += [r.id for r in members if r.id != keep.id]
    for i in range(0, len(drop), 500):
        conn.execute(sa.text("DELETE FROM labels WHERE id IN :ids").bindparams(sa.bindparam("ids", expanding=True)),
                     {"ids": drop[i:i + 500]})
    return len(drop)


def downgrade() -> None:
    dropped = _drop_duplicates(op.get_bind())
    if dropped:
        log.warning("0010 downgrade: dropped %d labels of other runs that replayed the same task "
                    "(the pre-0010 key holds one label per task, solver id and source)", dropped)
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.drop_constraint("uq_labels_task_id_run_id_solver_id_source", type_="unique")
        batch_op.create_unique_constraint(batch_op.f("uq_labels_task_id_solver_id_source"),
                                          ["task_id", "solver_id", "source"])
        batch_op.drop_index("ix_labels_run_name")
        batch_op.drop_constraint("fk_labels_run_id_runs", type_="foreignkey")
        batch_op.drop_column("run_id")

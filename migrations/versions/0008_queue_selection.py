"""Queue selection columns and indexes: ``domain``, ``predicted_in_band`` and ``solver`` on queue
rows (a trainer may lease a mixture of domains or topics, a range of predicted in-band probability,
or tasks for one solver), and partial indexes over the open (ready or leased) rows of a run in enqueue
order, so a run-scoped ``SKIP LOCKED`` lease reads a few index entries instead of sorting the run.

A task is now queued once per run rather than once per store (``uq_queue_run_id_task_id``), so a
run's tasks can be replayed into another run; downgrading refuses while a task is queued twice.

Existing rows are filled from their task (domain) and their message (predicted probability, the
spot-check solver).

Revision ID: 0008
Revises: 0005
Create Date: 2026-11-23 10:10:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPEN = "state IN ('ready', 'leased')"
INDEXES = {"ix_queue_open_run": ["run_id", "enqueued_at", "id"],
           "ix_queue_open_run_domain": ["run_id", "domain", "enqueued_at", "id"],
           "ix_queue_open_run_topic": ["run_id", "topic", "enqueued_at", "id"]}


def upgrade() -> None:
    with op.batch_alter_table("queue", schema=None) as batch_op:
        batch_op.add_column(sa.Column("domain", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("predicted_in_band", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("solver", sa.String(length=256), nullable=True))
        batch_op.drop_constraint("uq_queue_task_id", type_="unique")
        batch_op.create_unique_constraint("uq_queue_run_id_task_id", ["run_id", "task_id"])
    op.execute("UPDATE queue SET domain = (SELECT t.domain FROM tasks t WHERE t.id = queue.task_id)")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE queue SET predicted_in_band = (message->>'predicted_in_band')::float, "
                   "solver = message->'spot_check'->>'solver'")
    else:
        op.execute("UPDATE queue SET predicted_in_band = json_extract(message, '$.predicted_in_band'), "
                   "solver = json_extract(message, '$.spot_check.solver')")
    for name, cols in INDEXES.items():
        op.create_index(name, "queue", cols, unique=False, postgresql_where=sa.text(OPEN), sqlite_where=sa.text(OPEN))


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name="queue")
    with op.batch_alter_table("queue", schema=None) as batch_op:
        batch_op.drop_constraint("uq_queue_run_id_task_id", type_="unique")
        batch_op.create_unique_constraint("uq_queue_task_id", ["task_id"])  # fails if a task was replayed
        batch_op.drop_column("solver")
        batch_op.drop_column("predicted_in_band")
        batch_op.drop_column("domain")

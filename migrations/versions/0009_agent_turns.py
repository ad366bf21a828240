"""Agent trajectories: ``agent_turns`` holds each model turn (text, tool calls, tool results) of a
SWE agent episode — a solver trial's, keyed like the trial, or the generator episode that wrote a task.

Revision ID: 0009
Revises: 0007
Create Date: 2026-11-23 19:20:00
"""
from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "agent_turns",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("agent_id", sa.String(length=256), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("turn", sa.Integer(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("tool_calls", sa.JSON(), nullable=False),
        sa.Column("tool_results", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("role IN ('solver', 'generator')", name=op.f("ck_agent_turns_role")),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name=op.f("fk_agent_turns_task_id_tasks"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_turns")),
        sa.UniqueConstraint("task_id", "role", "agent_id", "attempt", "turn",
                            name=op.f("uq_agent_turns_task_id_role_agent_id_attempt_turn")),
    )


def downgrade() -> None:
    op.drop_table("agent_turns")

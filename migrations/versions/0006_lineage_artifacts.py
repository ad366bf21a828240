"""Lineage and content-addressed artifacts.

* ``probe_ensembles``: the ensemble (combine rule, members, aux constraints, their artifact
  addresses) that produced a score. ``probe_scores`` and ``false_positives`` name it
  (``ensemble_id``) instead of the first primary probe. Existing rows get one ensemble per probe
  they named (key ``legacy-probe-<id>``, that probe as its only member).
* ``artifacts``: content-addressed blobs (sha256 → bytes), the default artifact store of a
  distributed deployment (workers need only the database and broker URLs).
* ``generator_checkpoints.path`` becomes ``artifact_uri`` (a ``cas://sha256/…`` checkpoint tree that
  drives resume on a machine without the run directory; older rows keep their local path).

Downgrade maps each score and false positive back to its ensemble's first member probe (the newest
row wins where two ensembles share that member; rows whose ensemble names no registered probe are
dropped — only rows written after this revision can be in either case).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 10:00:00
"""
from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SCORED = ("probe_scores", "false_positives")


def upgrade() -> None:
    op.create_table(
        "probe_ensembles",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("combine", sa.String(length=8), nullable=False),
        sa.Column("members", sa.JSON(), nullable=False),
        sa.Column("aux", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_probe_ensembles_run_id_runs"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_probe_ensembles")),
        sa.UniqueConstraint("run_id", "key", name=op.f("uq_probe_ensembles_run_id_key")),
    )
    with op.batch_alter_table("probe_ensembles", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_probe_ensembles_run_id"), ["run_id"], unique=False)
    op.create_table(
        "artifacts",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_artifacts")),
    )
    legacy = _legacy_ensembles()
    for table in _SCORED:
        _to_ensembles(table, legacy)
    with op.batch_alter_table("generator_checkpoints", schema=None) as batch_op:
        batch_op.alter_column("path", new_column_name="artifact_uri", existing_type=sa.Text(), existing_nullable=False)


def _legacy_ensembles() -> dict[int, int]:
    """One ensemble row per probe named by an existing score or false positive: probe id → ensemble id."""
    conn = op.get_bind()
    probe_ids = sorted({int(r[0]) for t in _SCORED for r in conn.execute(sa.text(f"SELECT DISTINCT probe_id FROM {t}"))})
    ensembles = sa.table("probe_ensembles", sa.column("id", sa.Integer()), sa.column("run_id", sa.Integer()),
                         sa.column("key", sa.String()), sa.column("combine", sa.String()),
                         sa.column("members", sa.JSON()), sa.column("aux", sa.JSON()),
                         sa.column("created_at"))  # untyped: copied as read (text on SQLite)
    out: dict[int, int] = {}
    for pid in probe_ids:
        row = conn.execute(sa.text("SELECT run_id, name, artifact_uri, created_at FROM probes WHERE id = :p"),
                           {"p": pid}).one()
        member = {"probe_id": pid, "name": row.name, "artifact_uri": row.artifact_uri, "sha256": None}
        conn.execute(ensembles.insert().values(run_id=row.run_id, key=f"legacy-probe-{pid}", combine="min",
                                               members=[member], aux=[], created_at=row.created_at))
        out[pid] = int(conn.execute(sa.text("SELECT id FROM probe_ensembles WHERE key = :k"),
                                    {"k": f"legacy-probe-{pid}"}).scalar_one())
    return out


def _to_ensembles(table: str, legacy: dict[int, int]) -> None:
    with op.batch_alter_table(table, schema=None) as batch_op:
        batch_op.add_column(sa.Column("ensemble_id", sa.Integer(), nullable=True))
    conn = op.get_bind()
    for pid, eid in legacy.items():
        conn.execute(sa.text(f"UPDATE {table} SET ensemble_id = :e WHERE probe_id = :p"), {"e": eid, "p": pid})
    with op.batch_alter_table(table, schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f(f"uq_{table}_task_id_probe_id"), type_="unique")
        batch_op.drop_index(batch_op.f(f"ix_{table}_probe_id"))
        batch_op.drop_constraint(batch_op.f(f"fk_{table}_probe_id_probes"), type_="foreignkey")
        batch_op.drop_column("probe_id")
        batch_op.alter_column("ensemble_id", existing_type=sa.Integer(), nullable=False)
        batch_op.create_foreign_key(batch_op.f(f"fk_{table}_ensemble_id_probe_ensembles"), "probe_ensembles",
                                    ["ensemble_id"], ["id"], ondelete="CASCADE")
        batch_op.create_index(batch_op.f(f"ix_{table}_ensemble_id"), ["ensemble_id"], unique=False)
        batch_op.create_unique_constraint(batch_op.f(f"uq_{table}_task_id_ensemble_id"), ["task_id", "ensemble_id"])


def downgrade() -> None:
    with op.batch_alter_table("generator_checkpoints", schema=None) as batch_op:
        batch_op.alter_column("artifact_uri", new_column_name="path", existing_type=sa.Text(), existing_nullable=False)
    first_member = _first_members()
    for table in _SCORED:
        _to_probes(table, first_member)
    op.drop_table("artifacts")
    with op.batch_alter_table("probe_ensembles", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_probe_ensembles_run_id"))
    op.drop_table("probe_ensembles")


def _first_members() -> dict[int, int | None]:
    """ensemble id → the probe id of its first member (None when it names no registered probe)."""
    conn = op.get_bind()
    out: dict[int, int | None] = {}
    for eid, members in conn.execute(sa.text("SELECT id, members FROM probe_ensembles")):
        parsed = json.loads(members) if isinstance(members, str) else members
        pid = parsed[0].get("probe_id") if parsed else None
        exists = pid is not None and conn.execute(sa.text("SELECT 1 FROM probes WHERE id = :p"), {"p": pid}).first()
        out[int(eid)] = int(pid) if exists else None
    return out


def _to_probes(table: str, first_member: dict[int, int | None]) -> None:
    with op.batch_alter_table(table, schema=None) as batch_op:
        batch_op.add_column(sa.Column("probe_id", sa.Integer(), nullable=True))
    conn = op.get_bind()
    for eid, pid in first_member.items():
        if pid is not None:
            conn.execute(sa.text(f"UPDATE {table} SET probe_id = :p WHERE ensemble_id = :e"), {"e": eid, "p": pid})
    conn.execute(sa.text(f"DELETE FROM {table} WHERE probe_id IS NULL"))
    conn.execute(sa.text(  # two ensembles with the same first member: keep the newest row per (task, probe)
        f"DELETE FROM {table} WHERE id NOT IN (SELECT max(id) FROM {table} GROUP BY task_id, probe_id)"))
    with op.batch_alter_table(table, schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f(f"uq_{table}_task_id_ensemble_id"), type_="unique")
        batch_op.drop_index(batch_op.f(f"ix_{table}_ensemble_id"))
        batch_op.drop_constraint(batch_op.f(f"fk_{table}_ensemble_id_probe_ensembles"), type_="foreignkey")
        batch_op.drop_column("ensemble_id")
        batch_op.alter_column("probe_id", existing_type=sa.Integer(), nullable=False)
        batch_op.create_foreign_key(batch_op.f(f"fk_{table}_probe_id_probes"), "probes", ["probe_id"], ["id"],
                                    ondelete="CASCADE")
        batch_op.create_index(batch_op.f(f"ix_{table}_probe_id"), ["probe_id"], unique=False)
        batch_op.create_unique_constraint(batch_op.f(f"uq_{table}_task_id_probe_id"), ["task_id", "probe_id"])

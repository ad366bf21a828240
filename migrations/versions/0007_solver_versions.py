"""Solver versions: ``solver_versions`` (name, version, order); every trial and label records
``solver_name`` + ``solver_version``; labels keep a trainer's ``errors`` and ``sampling``.

Existing rows are carried over with the version their stored solver id implies
(:func:`curriculum.store.solver_versions.split_solver_id`: ``policy@step-1200`` → ``policy`` /
``step-1200``; an id without ``@`` is the unversioned ``""``), and each (name, version) found is
registered with its derived order (NULL — unordered, never current — when the string implies none).
Downgrade drops the new columns and table; the rows themselves, keyed by ``solver_id``, stay intact.
The queue gains the ``stale`` state (downgrade turns stale rows into ``dead``: never served either).

Revision ID: 0007
Revises: 0008
Create Date: 2026-11-23 10:00:00
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("solver_trials", "labels")
# A migration is a snapshot: the two rules of curriculum.store.solver_versions it applies are copied here
# (split_solver_id, derive_order) so that later changes there cannot change what this revision did.
_DERIVABLE = re.compile(r"^(?:[A-Za-z]+[-_]?)?(\d{1,15})$")


def split_solver_id(solver_id: str) -> tuple[str, str]:
    name, sep, version = solver_id.rpartition("@")
    return (solver_id, "") if not sep or not name else (name, version)


def derive_order(version: str) -> int | None:
    if version == "":
        return -1
    match = _DERIVABLE.match(version)
    return int(match.group(1)) if match else None


def _backfill(conn: sa.Connection, table: str) -> set[tuple[str, str]]:
    ids = [r[0] for r in conn.execute(sa.text(f"SELECT DISTINCT solver_id FROM {table}"))]
    found = set()
    for solver_id in ids:
        name, version = split_solver_id(solver_id)
        found.add((name, version))
        conn.execute(sa.text(f"UPDATE {table} SET solver_name = :n, solver_version = :v WHERE solver_id = :s"),
                     {"n": name, "v": version, "s": solver_id})
    return found


def upgrade() -> None:
    op.create_table(
        "drift_measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("solver", sa.String(length=256), nullable=False),
        sa.Column("old_version", sa.String(length=128), nullable=False),
        sa.Column("new_version", sa.String(length=128), nullable=False),
        sa.Column("cycle", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("sample", sa.JSON(), nullable=False),
        sa.Column("matrix", sa.JSON(), nullable=False),
        sa.Column("measured", sa.Integer(), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("state IN ('measuring', 'done')", name=op.f("ck_drift_measurements_state")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_drift_measurements_run_id_runs"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_drift_measurements")),
        sa.UniqueConstraint("run_id", "solver", "new_version", name=op.f("uq_drift_measurements_run_id_solver_new_version")),
    )
    with op.batch_alter_table("drift_measurements", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_drift_measurements_run_id"), ["run_id"], unique=False)
    with op.batch_alter_table("queue", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("ck_queue_state"), type_="check")
        batch_op.create_check_constraint(batch_op.f("ck_queue_state"),
                                         "state IN ('ready', 'leased', 'acked', 'dead', 'stale')")
    op.create_table(
        "solver_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("solver", sa.String(length=256), nullable=False),
        sa.Column("version", sa.String(length=128), nullable=False),
        sa.Column("ordinal", sa.BigInteger(), nullable=True),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_solver_versions")),
        sa.UniqueConstraint("solver", "version", name=op.f("uq_solver_versions_solver_version")),
    )
    with op.batch_alter_table("solver_versions", schema=None) as batch_op:
        batch_op.create_index("ix_solver_versions_solver_ordinal", ["solver", "ordinal"], unique=False)
    for table in _TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("solver_name", sa.String(length=256), nullable=True))
            batch_op.add_column(sa.Column("solver_version", sa.String(length=128), nullable=True))
            if table == "labels":
                batch_op.add_column(sa.Column("errors", sa.Integer(), nullable=True))
                batch_op.add_column(sa.Column("sampling", sa.JSON(), nullable=True))
    conn = op.get_bind()
    found = _backfill(conn, "solver_trials") | _backfill(conn, "labels")
    conn.execute(sa.text("UPDATE labels SET errors = 0"))
    now = datetime.now(UTC)
    if conn.dialect.name == "sqlite":
        now = now.replace(tzinfo=None)  # the store keeps naive UTC on SQLite
    for name, version in sorted(found):
        conn.execute(sa.text("INSERT INTO solver_versions (solver, version, ordinal, source, created_at) "
                             "VALUES (:s, :v, :o, 'migration', :t)"),
                     {"s": name, "v": version, "o": derive_order(version), "t": now})
    for table in _TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.alter_column("solver_name", existing_type=sa.String(length=256), nullable=False)
            batch_op.alter_column("solver_version", existing_type=sa.String(length=128), nullable=False)
            if table == "labels":
                batch_op.alter_column("errors", existing_type=sa.Integer(), nullable=False)
                batch_op.create_index("ix_labels_name_version", ["solver_name", "solver_version"], unique=False)
            else:
                batch_op.create_index("ix_solver_trials_name_created", ["solver_name", "created_at"], unique=False)


def downgrade() -> None:
    op.execute("UPDATE queue SET state = 'dead' WHERE state = 'stale'")  # the older schema has no stale state
    with op.batch_alter_table("queue", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("ck_queue_state"), type_="check")
        batch_op.create_check_constraint(batch_op.f("ck_queue_state"), "state IN ('ready', 'leased', 'acked', 'dead')")
    for table in _TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            if table == "labels":
                batch_op.drop_index("ix_labels_name_version")
                batch_op.drop_column("sampling")
                batch_op.drop_column("errors")
            else:
                batch_op.drop_index("ix_solver_trials_name_created")
            batch_op.drop_column("solver_version")
            batch_op.drop_column("solver_name")
    with op.batch_alter_table("solver_versions", schema=None) as batch_op:
        batch_op.drop_index("ix_solver_versions_solver_ordinal")
    op.drop_table("solver_versions")
    with op.batch_alter_table("drift_measurements", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_drift_measurements_run_id"))
    op.drop_table("drift_measurements")

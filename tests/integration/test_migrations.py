"""Migrations round-trip (upgrade → downgrade base → upgrade) on both databases with no drift."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from curriculum.store.db import Store
from curriculum.store.models import Base
from migrations import downgrade, upgrade

pytestmark = pytest.mark.integration


def _drift(url: str) -> list[object]:
    store = Store(url)
    try:
        with store.engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(ctx, Base.metadata))
    finally:
        store.dispose()


def _tables(url: str) -> set[str]:
    store = Store(url)
    try:
        return set(inspect(store.engine).get_table_names()) - {"alembic_version"}
    finally:
        store.dispose()


def _round_trip(url: str) -> None:
    upgrade(url)
    assert _tables(url) == set(Base.metadata.tables)
    assert _drift(url) == []
    downgrade(url, "base")
    assert _tables(url) == set()
    upgrade(url)
    assert _drift(url) == []


def test_sqlite_round_trip(tmp_path: Path) -> None:
    _round_trip(f"sqlite:///{tmp_path / 'm.db'}")


def test_postgres_round_trip(pg_url: str) -> None:
    _round_trip(pg_url)


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_0005_assigns_existing_probes_to_their_run(db: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}" if db == "sqlite" else request.getfixturevalue("pg_url")
    if db == "postgresql":
        downgrade(url, "base")
    upgrade(url, "0004")
    store = Store(url)
    try:
        with store.engine.begin() as conn:
            conn.execute(text("INSERT INTO runs (id, name, config_hash, config, created_at) VALUES "
                              "(1, 'a', 'h', '{}', CURRENT_TIMESTAMP), (2, 'a-b', 'h', '{}', CURRENT_TIMESTAMP)"))
            conn.execute(text(
                "INSERT INTO probes (name, role, artifact_uri, reference_fingerprint, meta, active, created_at) VALUES "
                "('a-primary-0', 'primary', 'x', 'f', '{}', true, CURRENT_TIMESTAMP), "
                "('a-b-aux-c1', 'aux', 'x', 'f', '{}', true, CURRENT_TIMESTAMP), "
                "('hand-made', 'primary', 'x', 'f', '{}', false, CURRENT_TIMESTAMP)"))
        upgrade(url)
        with store.engine.connect() as conn:
            owners = dict(conn.execute(text("SELECT name, run_id FROM probes")).all())
    finally:
        store.dispose()
        if db == "postgresql":  # leave the session database as the other tests expect it
            downgrade(url, "base")
            upgrade(url)
    assert owners == {"a-primary-0": 1, "a-b-aux-c1": 2, "hand-made": None}


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_0008_fills_queue_selection_columns_and_round_trips(db: str, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}" if db == "sqlite" else request.getfixturevalue("pg_url")
    if db == "postgresql":
        downgrade(url, "base")
    upgrade(url, "0005")
    store = Store(url)
    msg = '{"id": 1, "domain": "arith", "predicted_in_band": 0.75, "spot_check": {"solver": "synthetic:x"}}'
    try:
        with store.engine.begin() as conn:
            conn.execute(text("INSERT INTO runs (id, name, config_hash, config, created_at) VALUES "
                              "(1, 'a', 'h', '{}', CURRENT_TIMESTAMP)"))
            conn.execute(text("INSERT INTO tasks (id, run_id, domain, content_hash, text, payload, valid, created_at) "
                              "VALUES (1, 1, 'arith', 'h1', '1+1', '{}', true, CURRENT_TIMESTAMP), "
                              "(2, 1, 'math', 'h2', 'x', '{}', true, CURRENT_TIMESTAMP)"))
            conn.execute(text("INSERT INTO queue (task_id, run_id, state, message, topic, attempts, enqueued_at) "
                              "VALUES (1, 1, 'ready', :m, 'add:1', 0, CURRENT_TIMESTAMP), "
                              "(2, 1, 'acked', '{\"id\": 2}', NULL, 1, CURRENT_TIMESTAMP)"), {"m": msg})
        upgrade(url, "0008")
        with store.engine.connect() as conn:
            rows = conn.execute(text("SELECT task_id, domain, predicted_in_band, solver, state FROM queue "
                                     "ORDER BY task_id")).all()
        downgrade(url, "0005")
        with store.engine.connect() as conn:
            kept = conn.execute(text("SELECT task_id, state, topic FROM queue ORDER BY task_id")).all()
    finally:
        store.dispose()
        if db == "postgresql":
            downgrade(url, "base")
            upgrade(url)
    assert [tuple(r) for r in rows] == [(1, "arith", 0.75, "synthetic:x", "ready"), (2, "math", None, None, "acked")]
    assert [tuple(r) for r in kept] == [(1, "ready", "add:1"), (2, "acked", None)]

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
def test_0007_carries_trials_and_labels_over_with_versions(db: str, tmp_path: Path,
                                                          request: pytest.FixtureRequest) -> None:
    """Existing trials and labels get the name/version their solver id implies; downgrade keeps them."""
    url = f"sqlite:///{tmp_path / 'm.db'}" if db == "sqlite" else request.getfixturevalue("pg_url")
    if db == "postgresql":
        downgrade(url, "base")
    upgrade(url, "0005")
    store = Store(url)
    ids = ("synthetic:arith(seed=0)", "policy@step-1200", "policy@v1.2.10")
    try:
        with store.engine.begin() as conn:
            conn.execute(text("INSERT INTO tasks (id, domain, content_hash, text, payload, valid, created_at) "
                              "VALUES (1, 'arith', 'h1', '1+1', '{}', true, CURRENT_TIMESTAMP)"))
            for i, sid in enumerate(ids):
                conn.execute(text("INSERT INTO solver_trials (task_id, solver_id, attempt, outcome, latency_s, "
                                  "created_at) VALUES (1, :s, 0, 'pass', 0.1, CURRENT_TIMESTAMP)"), {"s": sid})
                conn.execute(text("INSERT INTO labels (task_id, solver_id, source, k, solved, valid_trials, band_lo, "
                                  "band_hi, in_band, updated_at) VALUES (1, :s, :src, 8, :n, 8, 1, 3, true, "
                                  "CURRENT_TIMESTAMP)"), {"s": sid, "src": ("spotcheck", "consumer")[i % 2], "n": i})
        upgrade(url)
        with store.engine.connect() as conn:
            trials = set(conn.execute(text("SELECT solver_id, solver_name, solver_version FROM solver_trials")).all())
            labels = set(conn.execute(text("SELECT solver_id, solver_name, solver_version, errors, solved "
                                           "FROM labels")).all())
            versions = set(conn.execute(text("SELECT solver, version, ordinal, source FROM solver_versions")).all())
        downgrade(url, "0005")
        with store.engine.connect() as conn:
            after_down = set(conn.execute(text("SELECT solver_id, solved FROM labels")).all())
            trials_down = {r[0] for r in conn.execute(text("SELECT solver_id FROM solver_trials"))}
        upgrade(url)
        with store.engine.connect() as conn:
            again = set(conn.execute(text("SELECT solver_id, solver_name, solver_version FROM solver_trials")).all())
    finally:
        store.dispose()
        if db == "postgresql":
            downgrade(url, "base")
            upgrade(url)
    assert trials == {("synthetic:arith(seed=0)", "synthetic:arith(seed=0)", ""),
                      ("policy@step-1200", "policy", "step-1200"), ("policy@v1.2.10", "policy", "v1.2.10")}
    by_id = sorted(trials, key=lambda t: ids.index(t[0]))
    assert labels == {(sid, name, ver, 0, i) for i, (sid, name, ver) in enumerate(by_id)}
    assert versions == {("synthetic:arith(seed=0)", "", -1, "migration"), ("policy", "step-1200", 1200, "migration"),
                        ("policy", "v1.2.10", None, "migration")}
    assert after_down == {(sid, i) for i, sid in enumerate(ids)} and trials_down == set(ids)
    assert again == trials


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_0007_queue_accepts_stale_and_downgrade_turns_it_dead(db: str, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}" if db == "sqlite" else request.getfixturevalue("pg_url")
    if db == "postgresql":
        downgrade(url, "base")
    upgrade(url)
    store = Store(url)
    insert = ("INSERT INTO queue (task_id, state, message, attempts, enqueued_at) "
              "VALUES (:t, :s, '{}', 0, CURRENT_TIMESTAMP)")
    try:
        with store.engine.begin() as conn:
            conn.execute(text("INSERT INTO tasks (id, domain, content_hash, text, payload, valid, created_at) VALUES "
                              "(1, 'arith', 'h1', '1', '{}', true, CURRENT_TIMESTAMP), "
                              "(2, 'arith', 'h2', '2', '{}', true, CURRENT_TIMESTAMP), "
                              "(3, 'arith', 'h3', '3', '{}', true, CURRENT_TIMESTAMP)"))
            conn.execute(text(insert), [{"t": 1, "s": "stale"}, {"t": 2, "s": "ready"}])
        with pytest.raises(Exception, match=r"(?i)check"), store.engine.begin() as conn:
            conn.execute(text(insert), {"t": 3, "s": "bogus"})
        downgrade(url, "0005")
        with store.engine.connect() as conn:
            states = dict(conn.execute(text("SELECT task_id, state FROM queue")).all())
        with pytest.raises(Exception, match=r"(?i)check"), store.engine.begin() as conn:
            conn.execute(text(insert), {"t": 3, "s": "stale"})
    finally:
        store.dispose()
        if db == "postgresql":
            downgrade(url, "base")
            upgrade(url)
    assert states == {1: "dead", 2: "ready"}

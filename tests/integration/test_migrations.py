"""Migrations round-trip (upgrade → downgrade base → upgrade) on both databases with no drift."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from curriculum.store.db import Store
from curriculum.store.models import Base
from migrations import downgrade, upgrade
from tests.conftest import _clean

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


@pytest.fixture
def emptied_pg_url(pg_url: str) -> str:
    """The session database without rows left by earlier tests (a downgrade must not trip over them)."""
    store = Store(pg_url)
    try:
        _clean(store)
    finally:
        store.dispose()
    return pg_url


def test_postgres_round_trip(emptied_pg_url: str) -> None:
    _round_trip(emptied_pg_url)


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_0005_assigns_existing_probes_to_their_run(db: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}" if db == "sqlite" else request.getfixturevalue("emptied_pg_url")
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


def _seed_0005(conn: Any) -> None:
    conn.execute(text("INSERT INTO runs (id, name, config_hash, config, created_at) VALUES "
                      "(1, 'a', 'h', '{}', CURRENT_TIMESTAMP)"))
    conn.execute(text("INSERT INTO tasks (id, run_id, domain, content_hash, text, payload, valid, created_at) VALUES "
                      "(1, 1, 'arith', 'h1', '1+2', '{}', true, CURRENT_TIMESTAMP), "
                      "(2, 1, 'arith', 'h2', '3*4', '{}', true, CURRENT_TIMESTAMP)"))
    conn.execute(text(
        "INSERT INTO probes (id, run_id, name, role, artifact_uri, reference_fingerprint, meta, active, created_at) "
        "VALUES (1, 1, 'a-primary-0', 'primary', '/p0', 'f', '{}', true, CURRENT_TIMESTAMP), "
        "(2, 1, 'a-primary-1', 'primary', '/p1', 'f', '{}', false, CURRENT_TIMESTAMP)"))
    conn.execute(text("INSERT INTO probe_scores (task_id, probe_id, logit, probability, created_at) VALUES "
                      "(1, 1, 1.5, 0.8, CURRENT_TIMESTAMP), (2, 1, -1.0, 0.3, CURRENT_TIMESTAMP), "
                      "(1, 2, 0.5, 0.6, CURRENT_TIMESTAMP)"))
    conn.execute(text("INSERT INTO false_positives (task_id, probe_id, side, solved, k, score, consumed, created_at) "
                      "VALUES (1, 1, 'too_easy', 8, 8, 0.8, false, CURRENT_TIMESTAMP)"))
    conn.execute(text("INSERT INTO generator_checkpoints (run_id, step, adapter_hash, path, created_at) VALUES "
                      "(1, 10, 'adapter-x', '/ck/10', CURRENT_TIMESTAMP)"))


_SCORES_0005 = "SELECT task_id, probe_id, logit, probability FROM probe_scores ORDER BY task_id, probe_id"


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_0006_carries_scores_over_to_ensembles_and_back(db: str, tmp_path: Path,
                                                       request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}" if db == "sqlite" else request.getfixturevalue("emptied_pg_url")
    if db == "postgresql":
        downgrade(url, "base")
    upgrade(url, "0005")
    store = Store(url)
    try:
        with store.engine.begin() as conn:
            _seed_0005(conn)
            before = conn.execute(text(_SCORES_0005)).all()
        upgrade(url, "0006")
        with store.engine.connect() as conn:
            ensembles = {r.id: r for r in conn.execute(text("SELECT id, run_id, key, members FROM probe_ensembles"))}
            scores = conn.execute(text("SELECT task_id, ensemble_id, logit, probability FROM probe_scores")).all()
            fps = conn.execute(text("SELECT task_id, ensemble_id, side FROM false_positives")).all()
            ck = conn.execute(text("SELECT step, artifact_uri FROM generator_checkpoints")).one()
        by_key = {e.key: e for e in ensembles.values()}
        assert set(by_key) == {"legacy-probe-1", "legacy-probe-2"} and by_key["legacy-probe-1"].run_id == 1
        members = by_key["legacy-probe-1"].members
        members = json.loads(members) if isinstance(members, str) else members
        assert members == [{"probe_id": 1, "name": "a-primary-0", "artifact_uri": "/p0", "sha256": None}]
        assert sorted((t, ensembles[e].key, lg, p) for t, e, lg, p in scores) == [
            (1, "legacy-probe-1", 1.5, 0.8), (1, "legacy-probe-2", 0.5, 0.6), (2, "legacy-probe-1", -1.0, 0.3)]
        assert [(t, ensembles[e].key, side) for t, e, side in fps] == [(1, "legacy-probe-1", "too_easy")]
        assert tuple(ck) == (10, "/ck/10")
        downgrade(url, "0005")
        with store.engine.connect() as conn:
            after = conn.execute(text(_SCORES_0005)).all()
            fps_back = conn.execute(text("SELECT task_id, probe_id, side FROM false_positives")).all()
            path = conn.execute(text("SELECT path FROM generator_checkpoints")).scalar_one()
        assert after == before and [tuple(r) for r in fps_back] == [(1, 1, "too_easy")] and path == "/ck/10"
    finally:
        store.dispose()
        if db == "postgresql":
            downgrade(url, "base")
            upgrade(url)


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_0008_fills_queue_selection_columns_and_round_trips(db: str, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}" if db == "sqlite" else request.getfixturevalue("emptied_pg_url")
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



@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_0007_carries_trials_and_labels_over_with_versions(db: str, tmp_path: Path,
                                                          request: pytest.FixtureRequest) -> None:
    """Existing trials and labels get the name/version their solver id implies; downgrade keeps them."""
    url = f"sqlite:///{tmp_path / 'm.db'}" if db == "sqlite" else request.getfixturevalue("emptied_pg_url")
    if db == "postgresql":
        downgrade(url, "base")
    upgrade(url, "0008")
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
        downgrade(url, "0008")
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
    url = f"sqlite:///{tmp_path / 'm.db'}" if db == "sqlite" else request.getfixturevalue("emptied_pg_url")
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
        downgrade(url, "0008")
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


_LABEL_0009 = ("INSERT INTO labels (task_id, solver_id, solver_name, solver_version, source, k, solved, valid_trials, "
               "errors, band_lo, band_hi, in_band, updated_at) VALUES (:t, 'p@1', 'p', '1', 'consumer', 8, :n, 8, 0, "
               "1, 3, true, :at)")


@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_0010_keys_labels_by_run_and_downgrade_keeps_the_tasks_own(db: str, tmp_path: Path,
                                                                   request: pytest.FixtureRequest) -> None:
    """Upgrade gives each label its task's run; afterwards two runs hold one label each for the same (task,
    solver, source); downgrade keeps the task's own run's label (what the pre-0010 readers read)."""
    url = f"sqlite:///{tmp_path / 'm.db'}" if db == "sqlite" else request.getfixturevalue("emptied_pg_url")
    if db == "postgresql":
        downgrade(url, "base")
    upgrade(url, "0009")
    store = Store(url)
    try:
        with store.engine.begin() as conn:
            conn.execute(text("INSERT INTO runs (id, name, config_hash, config, created_at) VALUES "
                              "(1, 'a', 'h', '{}', CURRENT_TIMESTAMP), (2, 'b', 'h', '{}', CURRENT_TIMESTAMP)"))
            conn.execute(text("INSERT INTO tasks (id, run_id, domain, content_hash, text, payload, valid, created_at) "
                              "VALUES (1, 1, 'arith', 'h1', '1+1', '{}', true, CURRENT_TIMESTAMP), "
                              "(2, NULL, 'arith', 'h2', '2+2', '{}', true, CURRENT_TIMESTAMP)"))
            conn.execute(text(_LABEL_0009), [{"t": 1, "n": 2, "at": "2026-01-01 00:00:00"},
                                             {"t": 2, "n": 5, "at": "2026-01-01 00:00:00"}])
            with pytest.raises(Exception, match=r"(?i)unique"), conn.begin_nested():
                conn.execute(text(_LABEL_0009), {"t": 1, "n": 8, "at": "2026-01-02 00:00:00"})
        upgrade(url, "0010")
        with store.engine.begin() as conn:
            carried = set(conn.execute(text("SELECT task_id, run_id, solved FROM labels")).all())
            # run B replays task 1 later and acks it as the same version: a second row, not an overwrite
            conn.execute(text(_LABEL_0009.replace("(task_id,", "(run_id, task_id,").replace("(:t,", "(2, :t,")),
                         {"t": 1, "n": 8, "at": "2026-01-02 00:00:00"})
            both = set(conn.execute(text("SELECT task_id, run_id, solved FROM labels")).all())
        downgrade(url, "0009")
        with store.engine.connect() as conn:
            kept = set(conn.execute(text("SELECT task_id, solved FROM labels")).all())
        upgrade(url)
        with store.engine.connect() as conn:
            again = set(conn.execute(text("SELECT task_id, run_id, solved FROM labels")).all())
    finally:
        store.dispose()
        if db == "postgresql":
            downgrade(url, "base")
            upgrade(url)
    assert carried == {(1, 1, 2), (2, None, 5)}
    assert both == {(1, 1, 2), (1, 2, 8), (2, None, 5)}
    assert kept == {(1, 2), (2, 5)}  # the task's own run's label; run B's newer one cannot be kept
    assert again == carried

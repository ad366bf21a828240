"""Generator rollback to a pinned healthy checkpoint (#34): pinned rows survive pruning, and a rollback
makes that checkpoint the latest in the run directory and in the store (so a restart keeps it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from curriculum.rl.checkpoint_rows import record_checkpoint, restore_checkpoint, rollback_checkpoint
from curriculum.rl.checkpoints import CheckpointStore
from curriculum.store import repo
from curriculum.store.artifacts import open_artifacts
from curriculum.store.db import Store
from curriculum.store.models import GeneratorCheckpoint

pytestmark = pytest.mark.integration


def _commit(local: CheckpointStore, step: int) -> Path:
    staged = local.new_staging_dir()
    (staged / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (staged / "adapter_model.safetensors").write_bytes(step.to_bytes(4, "little") * 64)
    return local.commit(staged, {"step": step})


def test_a_pinned_checkpoint_survives_pruning_and_is_rolled_back_to(sqlite_store: Store, tmp_path: Path) -> None:
    with sqlite_store.session() as s:
        run_id = repo.get_or_create_run(s, "rb", "h", {})
    artifacts = open_artifacts("db", sqlite_store, tmp_path / "cache")
    root = tmp_path / "generator"
    local = CheckpointStore(root, keep=2)
    for step in (10, 20, 30, 40, 50):
        record_checkpoint(sqlite_store, run_id, artifacts, step, f"a{step}", _commit(local, step), keep=2,
                          pinned=[20])
    with sqlite_store.session() as s:
        assert sorted(s.scalars(select(GeneratorCheckpoint.step))) == [20, 40, 50]
    assert [p.name for p in local.checkpoints()] == ["checkpoint-40", "checkpoint-50"]  # pruned locally

    assert rollback_checkpoint(sqlite_store, run_id, artifacts, root, 25) == 20  # the newest at or before 25
    assert local.global_step() == 20 and [p.name for p in local.checkpoints()] == ["checkpoint-20"]
    adapter = (root / "checkpoint-20" / "adapter_model.safetensors").read_bytes()
    assert adapter == (20).to_bytes(4, "little") * 64
    with sqlite_store.session() as s:
        assert sorted(s.scalars(select(GeneratorCheckpoint.step))) == [20]
    assert restore_checkpoint(sqlite_store, run_id, artifacts, root) is None  # a restart keeps step 20
    _commit(local, 30)  # training goes on from step 20 without clashing with the removed step 30
    assert local.global_step() == 30
    assert rollback_checkpoint(sqlite_store, run_id, artifacts, root, 5) is None  # nothing that old: unchanged
    assert local.global_step() == 30

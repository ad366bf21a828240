"""Checkpoint store (atomic commit, LATEST, pruning) and config validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from curriculum.rl import CheckpointError, CheckpointStore, GeneratorRLConfig, cpu_profile
from curriculum.rl.config import grpo_arguments


def _stage(store: CheckpointStore, step: int) -> Path:
    staged = store.new_staging_dir() / f"checkpoint-{step}"
    staged.mkdir()
    (staged / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return staged


def test_commit_is_ordered_pruned_and_refuses_overwrite(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    assert store.latest() is None and store.global_step() == 0
    for step in (3, 5, 8):
        store.commit(_stage(store, step), {"step": step})
    assert store.global_step() == 8 and store.latest() == tmp_path / "checkpoint-8"
    assert [p.name for p in store.checkpoints()] == ["checkpoint-5", "checkpoint-8"]
    assert store.chunk_meta()["step"] == 8
    with pytest.raises(CheckpointError, match="already exists"):
        store.commit(_stage(store, 8), {})
    assert store.global_step() == 8


def test_uncommitted_staging_is_ignored(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.commit(_stage(store, 2), {})
    _stage(store, 4)  # a crash after writing, before commit
    assert CheckpointStore(tmp_path).global_step() == 2


def test_latest_pointing_to_missing_checkpoint_raises(tmp_path: Path) -> None:
    (tmp_path / "LATEST").write_text("checkpoint-9")
    with pytest.raises(CheckpointError, match="checkpoint-9"):
        CheckpointStore(tmp_path).latest()


def test_config_checks_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="divisible by num_generations"):
        cpu_profile("g", "r", per_device_train_batch_size=6, num_generations=4)
    with pytest.raises(ValueError, match="bf16=False"):
        GeneratorRLConfig("g", "r", use_cpu=True, bf16=True)
    cfg = cpu_profile("gen", "ref")
    assert cfg.generator == "gen" and cfg.reference == "ref"
    assert cfg.config_hash() == cpu_profile("gen", "ref").config_hash()
    args = grpo_arguments(cfg, str(tmp_path), max_steps=7)
    assert args.use_cpu and not args.bf16 and not args.activation_checkpointing
    assert args.max_steps == 7 and args.learning_rate == pytest.approx(1e-3) and args.beta == cfg.beta
    assert args.lr_scheduler_type == "constant"

"""The database artifact store (the distributed default) on PostgreSQL and SQLite, and generator
checkpoint rows that drive resume: recorded in the store, pruned with their per-step files, installed
on a machine whose run directory lacks them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from curriculum.rl.checkpoint_rows import record_checkpoint, restore_checkpoint
from curriculum.rl.checkpoints import CheckpointStore
from curriculum.store import repo
from curriculum.store.artifacts import ArtifactError, open_artifacts
from curriculum.store.db import Store
from curriculum.store.models import Artifact, GeneratorCheckpoint

pytestmark = pytest.mark.integration


def _checkpoint(root: Path, step: int) -> Path:
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (path / "adapter_model.safetensors").write_bytes(step.to_bytes(4, "little") * 256)
    (path / "optimizer.pt").write_bytes(b"opt" + step.to_bytes(4, "little"))
    (path / "tokenizer.json").write_text('{"same": "in every checkpoint"}')
    return path


def test_database_blobs_round_trip_and_refuse_tampering(store: Store, tmp_path: Path) -> None:
    leader = open_artifacts("db", store, tmp_path / "leader-cache")
    uri = leader.put_tree(_checkpoint(tmp_path / "src", 3))
    worker = open_artifacts("db", store, tmp_path / "worker-cache")  # another machine: only the database
    got = worker.fetch_tree(uri)
    assert json.loads((got / "trainer_state.json").read_text()) == {"global_step": 3}
    assert leader.put_tree(tmp_path / "src" / "checkpoint-3") == uri  # idempotent
    with store.session() as s:
        assert s.execute(select(func.count()).select_from(Artifact)).scalar_one() == 5  # 4 files + manifest
        [entry] = [e for e in worker.manifest(uri) if e.path == "optimizer.pt"]
        row = s.get(Artifact, entry.sha256)
        assert row is not None
        row.data = b"forged"
    with pytest.raises(ArtifactError, match="corrupt"):
        open_artifacts("db", store, tmp_path / "third-cache").fetch_tree(uri)


def test_checkpoint_rows_drive_resume_and_are_pruned(store: Store, tmp_path: Path) -> None:
    with store.session() as s:
        run_id = repo.get_or_create_run(s, "ck", "h", {})
    artifacts = open_artifacts("db", store, tmp_path / "cache")
    for step in (10, 20, 30):
        record_checkpoint(store, run_id, artifacts, step, f"adapter-{step}", _checkpoint(tmp_path / "run", step),
                          keep=2)
    with store.session() as s:
        rows = s.scalars(select(GeneratorCheckpoint).order_by(GeneratorCheckpoint.step)).all()
        assert [r.step for r in rows] == [20, 30] and all(artifacts.has_tree(r.artifact_uri) for r in rows)
        shared = s.execute(select(func.count()).select_from(Artifact)).scalar_one()
    assert shared == 2 * 4 + 1, "two checkpoints' per-step files and manifests, one shared tokenizer file"
    fresh = tmp_path / "other-machine" / "generator"  # a standby elsewhere: no run directory
    assert restore_checkpoint(store, run_id, open_artifacts("db", store, tmp_path / "c2"), fresh) == 30
    local = CheckpointStore(fresh)
    assert local.global_step() == 30 and (local.latest() or fresh).name == "checkpoint-30"
    assert (fresh / "checkpoint-30" / "tokenizer.json").read_text() == '{"same": "in every checkpoint"}'
    assert restore_checkpoint(store, run_id, artifacts, fresh) is None  # local is current: left alone

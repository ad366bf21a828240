"""Generator checkpoints recorded in the store: ``generator_checkpoints`` rows whose ``artifact_uri`` is
the committed checkpoint directory (adapter, optimizer, scheduler, RNG, trainer state) in the
content-addressed artifact store.

The rows drive resume: a leader whose run directory lacks the newest checkpoint (another machine
after a failover, a lost disk) installs it from the store before building its trainer
(:func:`restore_checkpoint`). Only the newest ``keep`` rows are kept, and the per-step files of the
pruned ones are deleted from the store (:func:`record_checkpoint`), so neither rows nor the store
grow without bound and no row points at something that is gone.
"""

from __future__ import annotations

import shutil
from collections.abc import Collection
from pathlib import Path

from sqlalchemy import delete, select

from curriculum.rl.checkpoints import CheckpointStore
from curriculum.store import repo
from curriculum.store.artifacts import ArtifactStore, is_cas_uri, parse_cas_uri
from curriculum.store.db import Store
from curriculum.store.models import GeneratorCheckpoint

# files that differ at every step (a pruned checkpoint's other files — configs, tokenizer — may be
# shared with other artifacts and are left in place)
PER_STEP_FILES = ("adapter_model.safetensors", "adapter_model.bin", "optimizer.pt", "scheduler.pt",
                  "trainer_state.json", "propel_chunk.json", "rng_state.pth")


def record_checkpoint(store: Store, run_id: int, artifacts: ArtifactStore, step: int, adapter_hash: str,
                      directory: str | Path, keep: int, pinned: Collection[int] = ()) -> str:
    """Put a committed checkpoint into the store, record its row, prune rows beyond the newest ``keep``
    (rows of the ``pinned`` steps — the daemon's last healthy generator — are kept too)."""
    uri = artifacts.put_tree(directory)
    with store.session() as s:
        repo.add_checkpoint(s, run_id, step, adapter_hash, uri)
    prune_checkpoints(store, run_id, artifacts, keep, pinned)
    return uri


def prune_checkpoints(store: Store, run_id: int, artifacts: ArtifactStore, keep: int,
                      pinned: Collection[int] = ()) -> int:
    """Delete rows older than the newest ``keep`` (except ``pinned`` steps) and their per-step blobs;
    returns rows deleted."""
    with store.session() as s:
        rows = list(s.scalars(select(GeneratorCheckpoint).where(GeneratorCheckpoint.run_id == run_id)
                              .order_by(GeneratorCheckpoint.step.desc())))
        kept = rows[:max(1, keep)] + [r for r in rows[max(1, keep):] if r.step in pinned]
        old = [(r.id, r.artifact_uri) for r in rows if r not in kept]
        kept_uris = [r.artifact_uri for r in kept]
    if not old:
        return 0
    protected = {e.sha256 for uri in kept_uris if is_cas_uri(uri) for e in artifacts.manifest(uri)}
    for _, uri in old:
        if not is_cas_uri(uri) or not artifacts.has_tree(uri):
            continue
        for entry in artifacts.manifest(uri):
            if Path(entry.path).name in PER_STEP_FILES and entry.sha256 not in protected:
                artifacts.blobs.delete(entry.sha256)
        artifacts.blobs.delete(parse_cas_uri(uri))
    with store.session() as s:
        s.execute(delete(GeneratorCheckpoint).where(GeneratorCheckpoint.id.in_([i for i, _ in old])))
    return len(old)


def restore_checkpoint(store: Store, run_id: int, artifacts: ArtifactStore, root: Path) -> int | None:
    """Install the run's newest recorded checkpoint into ``root`` when the local ones are older;
    returns the step restored (None when the local checkpoints are current)."""
    with store.session() as s:
        row = repo.latest_checkpoint(s, run_id)
        step, uri = (row.step, row.artifact_uri) if row is not None else (0, "")
    if not is_cas_uri(uri):
        return None
    local = CheckpointStore(root)
    if local.global_step() >= step:
        return None
    local.install(artifacts.fetch_tree(uri))
    return int(step)


def rollback_checkpoint(store: Store, run_id: int, artifacts: ArtifactStore, root: Path, step: int) -> int | None:
    """Make the newest recorded checkpoint at or before ``step`` the run's latest, here and in the store:
    installed into ``root`` (newer local checkpoints removed, so the next chunk's commit does not clash)
    and newer rows deleted (so a restart does not restore what was rolled back). Returns the step
    restored, or None when no such checkpoint is recorded (nothing changes)."""
    with store.session() as s:
        row = s.scalars(select(GeneratorCheckpoint).where(GeneratorCheckpoint.run_id == run_id,
                                                          GeneratorCheckpoint.step <= step)
                        .order_by(GeneratorCheckpoint.step.desc())).first()
        target, uri = (int(row.step), row.artifact_uri) if row is not None else (0, "")
    if not is_cas_uri(uri):
        return None
    fetched = artifacts.fetch_tree(uri)
    local = CheckpointStore(root)
    for newer in local.checkpoints():
        if int(newer.name.removeprefix("checkpoint-")) > target:
            shutil.rmtree(newer)
    local.install(fetched)
    with store.session() as s:
        s.execute(delete(GeneratorCheckpoint).where(GeneratorCheckpoint.run_id == run_id,
                                                    GeneratorCheckpoint.step > target))
    return target

"""Stage 3 — the checkpoint store: atomic, ordered, resumable.

Layout under ``root``::

    checkpoint-<global_step>/   adapter, optimizer, scheduler, RNG state, trainer_state.json (TRL/HF)
    checkpoint-<step>/propel_chunk.json   our provenance: adapter hash, config hash, reward id, stats
    LATEST                      the name of the newest committed checkpoint (replaced atomically)
    staging/                    where a running chunk writes; never read by resume

A chunk writes its checkpoint into a fresh directory under ``staging/``; :meth:`commit` renames it
into place (``os.rename`` within one filesystem is atomic) and then swaps ``LATEST`` with
``os.replace``. A crash at any point leaves either the old or the new checkpoint as ``LATEST`` —
never a half-written one. Leftover staging directories are removed on the next run.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from curriculum.common.fsutil import atomic_write

LATEST = "LATEST"
PREFIX = "checkpoint-"
CHUNK_FILE = "propel_chunk.json"


class CheckpointError(RuntimeError):
    """The store is inconsistent (LATEST names a missing checkpoint, a commit target exists, …)."""


class CheckpointStore:
    """Committed checkpoints of one generator run (see the module docstring)."""

    def __init__(self, root: str | Path, keep: int = 2) -> None:
        self.root = Path(root)
        self.keep = keep
        self.root.mkdir(parents=True, exist_ok=True)

    @property
    def staging_root(self) -> Path:
        return self.root / "staging"

    def new_staging_dir(self) -> Path:
        """A fresh empty directory for a chunk's trainer ``output_dir`` (old leftovers removed)."""
        if self.staging_root.exists():
            shutil.rmtree(self.staging_root)
        path = self.staging_root / uuid.uuid4().hex[:12]
        path.mkdir(parents=True)
        return path

    def latest(self) -> Path | None:
        """The newest committed checkpoint, or ``None`` for a fresh run."""
        marker = self.root / LATEST
        if not marker.exists():
            return None
        path = self.root / marker.read_text().strip()
        if not (path / "trainer_state.json").exists():
            raise CheckpointError(f"{marker} names {path.name}, which has no trainer_state.json")
        return path

    def global_step(self) -> int:
        latest = self.latest()
        if latest is None:
            return 0
        state = json.loads((latest / "trainer_state.json").read_text())
        return int(state["global_step"])

    def commit(self, staged: Path, meta: dict[str, Any]) -> Path:
        """Write ``meta`` into ``staged``, rename it to ``checkpoint-<step>``, point LATEST at it."""
        step = int(json.loads((staged / "trainer_state.json").read_text())["global_step"])
        target = self.root / f"{PREFIX}{step}"
        if target.exists():
            raise CheckpointError(f"{target} already exists; refusing to overwrite a committed checkpoint")
        atomic_write(staged / CHUNK_FILE, json.dumps(meta, indent=2, sort_keys=True, default=str))
        os.rename(staged, target)
        atomic_write(self.root / LATEST, target.name)
        self._prune()
        return target

    def install(self, source: Path) -> Path:
        """Copy a committed checkpoint from elsewhere (e.g. fetched from the artifact store) into place
        and point LATEST at it; atomic like :meth:`commit`."""
        staged = self.new_staging_dir() / "install"
        shutil.copytree(source, staged)
        step = int(json.loads((staged / "trainer_state.json").read_text())["global_step"])
        target = self.root / f"{PREFIX}{step}"
        if target.exists():
            shutil.rmtree(target)  # an older or partial copy of the same step: the fetched one is verified
        os.rename(staged, target)
        atomic_write(self.root / LATEST, target.name)
        self._prune()
        return target

    def checkpoints(self) -> list[Path]:
        """Committed checkpoints, oldest first."""
        found = [p for p in self.root.glob(f"{PREFIX}*") if p.is_dir() and p.name[len(PREFIX):].isdigit()]
        return sorted(found, key=lambda p: int(p.name[len(PREFIX):]))

    def chunk_meta(self, checkpoint: Path | None = None) -> dict[str, Any]:
        """The provenance record written with ``checkpoint`` (default: the latest)."""
        path = checkpoint or self.latest()
        if path is None:
            raise CheckpointError(f"no committed checkpoint in {self.root}")
        return dict(json.loads((path / CHUNK_FILE).read_text()))

    def _prune(self) -> None:
        for old in self.checkpoints()[: -self.keep]:
            shutil.rmtree(old)

"""Feature cache: pooled vectors keyed by (reference fingerprint, extraction settings, feature, text).

An in-memory LRU (bounded by entry count) in front of an optional on-disk directory (one ``.npy``
per vector, written atomically with a rename, so a crash never leaves a half-written entry that
a later run would read). Re-scoring the same texts, and sweeping many heads over one corpus,
then costs no forward pass. The settings tag is part of the key because ``max_length`` and the
truncation side change what the model reads.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np


class FeatureCacheError(RuntimeError):
    """A cache file exists but cannot be read back (names the file)."""


@dataclass(frozen=True)
class CacheKey:
    reference: str
    settings: str
    layer: int
    pooling: str
    turn_pooling: str | None
    text_hash: str

    def digest(self) -> str:
        raw = "\0".join(
            [self.reference, self.settings, str(self.layer), self.pooling, str(self.turn_pooling), self.text_hash]
        )
        return hashlib.sha256(raw.encode()).hexdigest()


class FeatureCache:
    """LRU of ``max_entries`` vectors, optionally backed by ``directory`` (created if missing)."""

    def __init__(self, max_entries: int = 100_000, directory: str | Path | None = None) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be ≥ 1, got {max_entries}")
        self.max_entries = max_entries
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self._memory: OrderedDict[str, np.ndarray] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._memory)

    def _path(self, key: CacheKey, digest: str) -> Path:
        assert self.directory is not None
        ref = hashlib.sha256(key.reference.encode()).hexdigest()[:16]
        return self.directory / ref / digest[:2] / f"{digest}.npy"

    def get(self, key: CacheKey) -> np.ndarray | None:
        digest = key.digest()
        vector = self._memory.get(digest)
        if vector is not None:
            self._memory.move_to_end(digest)
            self.hits += 1
            return vector
        if self.directory is not None:
            path = self._path(key, digest)
            if path.exists():
                try:
                    vector = np.load(path, allow_pickle=False)
                except (OSError, ValueError) as exc:
                    raise FeatureCacheError(f"cannot read cached feature {path}: {exc}; delete the file") from exc
                self._remember(digest, vector)
                self.hits += 1
                return vector
        self.misses += 1
        return None

    def put(self, key: CacheKey, vector: np.ndarray) -> None:
        digest = key.digest()
        vector = np.ascontiguousarray(vector, dtype=np.float32)
        self._remember(digest, vector)
        if self.directory is not None:
            path = self._path(key, digest)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                np.save(handle, vector, allow_pickle=False)
            os.replace(tmp, path)

    def _remember(self, digest: str, vector: np.ndarray) -> None:
        self._memory[digest] = vector
        self._memory.move_to_end(digest)
        while len(self._memory) > self.max_entries:
            self._memory.popitem(last=False)

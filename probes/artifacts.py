"""Probe artifacts: a directory with ``probe.safetensors`` (head weights) and ``probe.json`` (metadata).

``probe.json`` (``format_version`` 1)::

    {"format": "propel-probe", "format_version": 1, "name": ..., "created_at": ISO-8601 UTC,
     "reference": {"model_id": ..., "fingerprint": "sha256:...", "hidden_size": H},
     "feature": {"layer": L, "pooling": ..., "turn_pooling": null | ...},
     "architecture": {"arch": "linear|mlp|deep_mlp", "hidden_dim": ..., "dropout": ...},
     "input_dim": D, "label": {"band": [lo, hi], "k": k},
     "training": {...summary...}, "metrics": {...},
     "weights": {"file": "probe.safetensors", "sha256": ..., "bytes": ...}}

:func:`load_probe` raises :class:`ProbeArtifactError` naming the cause for: a missing directory
or file, metadata that is not JSON or lacks fields, weights whose size or sha256 differ from the
metadata (truncated / corrupt), tensors that do not fit the declared input size, a reference
fingerprint different from the expected one, or an input size different from the expected one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from probes.heads import ProbeHead, sigmoid
from probes.inputs import FeatureSpec

FORMAT = "propel-probe"
FORMAT_VERSION = 1
WEIGHTS_FILE = "probe.safetensors"
METADATA_FILE = "probe.json"
_REQUIRED = ("format", "format_version", "reference", "feature", "architecture", "input_dim", "label", "weights")


class ProbeArtifactError(ValueError):
    """A probe artifact cannot be used; the message names the file and the cause."""


@dataclass
class Probe:
    """A trained head plus everything needed to use it safely: which features, from which reference."""

    head: ProbeHead
    spec: FeatureSpec
    reference_id: str
    reference_fingerprint: str
    hidden_size: int
    band: tuple[int, int]
    k: int
    name: str = "probe"
    training: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    @property
    def input_dim(self) -> int:
        return self.head.input_dim

    def logits(self, features: dict[FeatureSpec, np.ndarray]) -> np.ndarray:
        """Raw logits from a feature dict as returned by ``FeatureExtractor.extract``."""
        if self.spec not in features:
            raise KeyError(f"probe {self.name} needs feature {self.spec.name}, which was not extracted")
        return self.head.logits(features[self.spec])

    def probabilities(self, features: dict[FeatureSpec, np.ndarray]) -> np.ndarray:
        return sigmoid(self.logits(features))

    def metadata(self, weights_sha256: str, weights_bytes: int) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "created_at": self.created_at,
            "reference": {
                "model_id": self.reference_id,
                "fingerprint": self.reference_fingerprint,
                "hidden_size": self.hidden_size,
            },
            "feature": self.spec.to_dict(),
            "architecture": {"arch": self.head.arch, "hidden_dim": self.head.hidden_dim, "dropout": self.head.dropout},
            "input_dim": self.input_dim,
            "label": {"band": list(self.band), "k": self.k},
            "training": self.training,
            "metrics": self.metrics,
            "weights": {"file": WEIGHTS_FILE, "sha256": weights_sha256, "bytes": weights_bytes},
        }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def save_probe(probe: Probe, directory: str | Path) -> Path:
    """Write ``probe.safetensors`` then ``probe.json`` into ``directory`` (created if missing)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = directory / WEIGHTS_FILE
    state = {k: v.detach().cpu().contiguous() for k, v in probe.head.state_dict().items()}
    save_file(state, str(weights), metadata={"format": FORMAT})
    meta = probe.metadata(_sha256(weights), weights.stat().st_size)
    (directory / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True, default=_json_default) + "\n")
    return directory


def _json_default(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__} in probe metadata")


def read_metadata(directory: str | Path) -> dict[str, Any]:
    """Parse and structurally check ``probe.json``; raises :class:`ProbeArtifactError`."""
    directory = Path(directory)
    path = directory / METADATA_FILE
    if not directory.is_dir():
        raise ProbeArtifactError(f"probe artifact {directory}: missing directory")
    if not path.is_file():
        raise ProbeArtifactError(f"probe artifact {directory}: missing file {METADATA_FILE}")
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProbeArtifactError(f"probe artifact {directory}: {METADATA_FILE} is not valid JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise ProbeArtifactError(f"probe artifact {directory}: {METADATA_FILE} must hold a JSON object")
    missing = [key for key in _REQUIRED if key not in meta]
    if missing:
        raise ProbeArtifactError(f"probe artifact {directory}: {METADATA_FILE} lacks fields {', '.join(missing)}")
    if meta["format"] != FORMAT or meta["format_version"] != FORMAT_VERSION:
        raise ProbeArtifactError(
            f"probe artifact {directory}: format {meta['format']!r} v{meta['format_version']} "
            f"is not {FORMAT} v{FORMAT_VERSION}"
        )
    return meta


def _load_weights(directory: Path, meta: dict[str, Any]) -> dict[str, Any]:
    path = directory / WEIGHTS_FILE
    if not path.is_file():
        raise ProbeArtifactError(f"probe artifact {directory}: missing file {WEIGHTS_FILE}")
    expected = meta["weights"]
    size = path.stat().st_size
    if size != expected.get("bytes"):
        raise ProbeArtifactError(
            f"probe artifact {directory}: {WEIGHTS_FILE} is truncated or corrupt "
            f"({size} bytes, metadata says {expected.get('bytes')})"
        )
    if _sha256(path) != expected.get("sha256"):
        raise ProbeArtifactError(
            f"probe artifact {directory}: {WEIGHTS_FILE} is corrupt (sha256 differs from metadata)"
        )
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise ProbeArtifactError(f"probe artifact {directory}: cannot read {WEIGHTS_FILE} ({exc})") from exc


def load_probe(
    directory: str | Path, expected_fingerprint: str | None = None, expected_input_dim: int | None = None
) -> Probe:
    """Load and verify a probe; pass the reference fingerprint / input size you will use it with."""
    directory = Path(directory)
    meta = read_metadata(directory)
    ref = meta["reference"]
    if expected_fingerprint is not None and ref.get("fingerprint") != expected_fingerprint:
        raise ProbeArtifactError(
            f"probe artifact {directory}: reference model mismatch — trained on {ref.get('model_id')} "
            f"({ref.get('fingerprint')}), but the reference in use is {expected_fingerprint}"
        )
    input_dim = int(meta["input_dim"])
    if expected_input_dim is not None and input_dim != expected_input_dim:
        raise ProbeArtifactError(
            f"probe artifact {directory}: wrong input size — probe takes {input_dim}, "
            f"features here are {expected_input_dim}"
        )
    state = _load_weights(directory, meta)
    arch = meta["architecture"]
    try:
        head = ProbeHead(
            str(arch["arch"]), input_dim, hidden_dim=int(arch["hidden_dim"]), dropout=float(arch["dropout"])
        )
        head.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError) as exc:
        raise ProbeArtifactError(
            f"probe artifact {directory}: weights do not match input size {input_dim} / {arch} ({exc})"
        ) from exc
    head.eval()
    label = meta["label"]
    return Probe(
        head=head,
        spec=FeatureSpec.from_dict(meta["feature"]),
        reference_id=str(ref.get("model_id")),
        reference_fingerprint=str(ref.get("fingerprint")),
        hidden_size=int(ref.get("hidden_size", 0)),
        band=(int(label["band"][0]), int(label["band"][1])),
        k=int(label["k"]),
        name=str(meta.get("name", directory.name)),
        training=dict(meta.get("training", {})),
        metrics=dict(meta.get("metrics", {})),
        created_at=str(meta.get("created_at", "")),
    )

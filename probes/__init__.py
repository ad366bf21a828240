"""Activation probes: frozen-reference features → probe heads → metrics, selection, ensembles, artifacts.

Public API (see ``docs/PROBES.md``)::

    from probes import FrozenReference, FeatureExtractor, FeatureSpec, ProbeScorer, load_probe

Names are imported on first use (``probes.band``, the band rule, is read by the CLI and the store: it
must not pull torch in with the probe heads).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from probes.artifacts import Probe, ProbeArtifactError, load_probe, read_metadata, save_probe
    from probes.band import Band, Side
    from probes.cache import CacheKey, FeatureCache, FeatureCacheError
    from probes.data import DatasetError, LabelledText, group_split, grouped_kfold, load_jsonl, random_split
    from probes.ensemble import ProbeEnsemble, ProbeScorer, Scores, check_compatible
    from probes.extraction import ExtractionConfig, FeatureExtractor
    from probes.fingerprint import model_fingerprint
    from probes.heads import ARCHITECTURES, ProbeHead, sigmoid
    from probes.inputs import FeatureSpec, TextInput, Trajectory
    from probes.metrics import ProbeMetrics, evaluate, expected_calibration_error, rvp, rvp_of
    from probes.pooling import POOLINGS, TURN_POOLINGS, pool, pool_sequence, pooled_dim
    from probes.reference import FrozenReference, ReferenceChangedError
    from probes.report import save_sweep
    from probes.sweep import SweepConfig, SweepResult, SweepRow, run_sweep, select
    from probes.training import BALANCES, TrainConfig, TrainResult, train_probe

#: public name -> the module that defines it (imported on first use: see ``__getattr__``)
_LAZY = {
    "ARCHITECTURES": "probes.heads",
    "BALANCES": "probes.training",
    "Band": "probes.band",
    "CacheKey": "probes.cache",
    "DatasetError": "probes.data",
    "ExtractionConfig": "probes.extraction",
    "FeatureCache": "probes.cache",
    "FeatureCacheError": "probes.cache",
    "FeatureExtractor": "probes.extraction",
    "FeatureSpec": "probes.inputs",
    "FrozenReference": "probes.reference",
    "LabelledText": "probes.data",
    "POOLINGS": "probes.pooling",
    "Probe": "probes.artifacts",
    "ProbeArtifactError": "probes.artifacts",
    "ProbeEnsemble": "probes.ensemble",
    "ProbeHead": "probes.heads",
    "ProbeMetrics": "probes.metrics",
    "ProbeScorer": "probes.ensemble",
    "ReferenceChangedError": "probes.reference",
    "Scores": "probes.ensemble",
    "Side": "probes.band",
    "SweepConfig": "probes.sweep",
    "SweepResult": "probes.sweep",
    "SweepRow": "probes.sweep",
    "TURN_POOLINGS": "probes.pooling",
    "TextInput": "probes.inputs",
    "TrainConfig": "probes.training",
    "TrainResult": "probes.training",
    "Trajectory": "probes.inputs",
    "check_compatible": "probes.ensemble",
    "evaluate": "probes.metrics",
    "expected_calibration_error": "probes.metrics",
    "group_split": "probes.data",
    "grouped_kfold": "probes.data",
    "load_jsonl": "probes.data",
    "load_probe": "probes.artifacts",
    "model_fingerprint": "probes.fingerprint",
    "pool": "probes.pooling",
    "pool_sequence": "probes.pooling",
    "pooled_dim": "probes.pooling",
    "random_split": "probes.data",
    "read_metadata": "probes.artifacts",
    "run_sweep": "probes.sweep",
    "rvp": "probes.metrics",
    "rvp_of": "probes.metrics",
    "save_probe": "probes.artifacts",
    "save_sweep": "probes.report",
    "select": "probes.sweep",
    "sigmoid": "probes.heads",
    "train_probe": "probes.training",
}

__all__ = [
    "ARCHITECTURES",
    "BALANCES",
    "POOLINGS",
    "TURN_POOLINGS",
    "Band",
    "CacheKey",
    "DatasetError",
    "ExtractionConfig",
    "FeatureCache",
    "FeatureCacheError",
    "FeatureExtractor",
    "FeatureSpec",
    "FrozenReference",
    "LabelledText",
    "Probe",
    "ProbeArtifactError",
    "ProbeEnsemble",
    "ProbeHead",
    "ProbeMetrics",
    "ProbeScorer",
    "ReferenceChangedError",
    "Scores",
    "Side",
    "SweepConfig",
    "SweepResult",
    "SweepRow",
    "TextInput",
    "TrainConfig",
    "TrainResult",
    "Trajectory",
    "check_compatible",
    "evaluate",
    "expected_calibration_error",
    "group_split",
    "grouped_kfold",
    "load_jsonl",
    "load_probe",
    "model_fingerprint",
    "pool",
    "pool_sequence",
    "pooled_dim",
    "random_split",
    "read_metadata",
    "run_sweep",
    "rvp",
    "rvp_of",
    "save_probe",
    "save_sweep",
    "select",
    "sigmoid",
    "train_probe",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'probes' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

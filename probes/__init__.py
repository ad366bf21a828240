"""Activation probes: frozen-reference features → probe heads → metrics, selection, ensembles, artifacts.

Public API (see ``docs/PROBES.md``)::

    from probes import FrozenReference, FeatureExtractor, FeatureSpec, ProbeScorer, load_probe
"""

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

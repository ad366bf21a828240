"""Ensembles (WCO = member minimum, or mean) and auxiliary-probe constraints, plus ``ProbeScorer``.

Everything combines **logits** (the RL reward signal); probabilities are ``sigmoid`` of the
combined logit. Because sigmoid is monotone, the WCO probability equals the minimum member
probability; for ``mean`` it is the sigmoid of the mean logit, not the mean probability.

:class:`ProbeScorer` ties a :class:`~probes.reference.FrozenReference`, a
:class:`~probes.extraction.FeatureExtractor` and an ensemble together: ``score(texts)`` runs one
reference forward pass per batch, however many members and constraints there are.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from probes.artifacts import Probe, ProbeArtifactError, load_probe
from probes.cache import FeatureCache
from probes.extraction import ExtractionConfig, FeatureExtractor, ProgressFn
from probes.heads import sigmoid
from probes.inputs import FeatureSpec, TextInput
from probes.reference import FrozenReference

Combine = Literal["min", "mean"]


class ProbeEnsemble:
    """``combine(members)``, then ``min`` with every constraint: ``min(primary, aux_1, …)``."""

    def __init__(self, members: Sequence[Probe], combine: Combine = "min", constraints: Sequence[Probe] = ()) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one member probe")
        if combine not in ("min", "mean"):
            raise ValueError(f"unknown combine {combine!r}; choose 'min' (WCO) or 'mean'")
        self.members = list(members)
        self.combine = combine
        self.constraints = list(constraints)
        prints = {p.reference_fingerprint for p in self.probes}
        if len(prints) > 1:
            raise ValueError(f"ensemble mixes probes trained on different reference models: {sorted(prints)}")

    @property
    def probes(self) -> list[Probe]:
        return self.members + self.constraints

    @property
    def specs(self) -> list[FeatureSpec]:
        """The distinct features all members and constraints need (extracted together)."""
        return list(dict.fromkeys(p.spec for p in self.probes))

    @property
    def reference_fingerprint(self) -> str:
        return self.members[0].reference_fingerprint

    @property
    def ensemble_id(self) -> str:
        """Stable id over combine rule, member and constraint weights (for provenance)."""
        hasher = hashlib.sha256(self.combine.encode())
        for group in (self.members, self.constraints):
            hasher.update(b"|")
            for probe in group:
                for key, tensor in sorted(probe.head.state_dict().items()):
                    hasher.update(key.encode() + tensor.contiguous().numpy().tobytes())
        return "ens-" + hasher.hexdigest()[:16]

    def member_logits(self, features: dict[FeatureSpec, np.ndarray]) -> np.ndarray:
        """``(n_members + n_constraints, N)`` raw logits, members first."""
        return np.stack([p.logits(features) for p in self.probes])

    def combine_logits(self, stacked: np.ndarray) -> np.ndarray:
        members = stacked[: len(self.members)]
        out: np.ndarray = members.min(axis=0) if self.combine == "min" else members.mean(axis=0)
        if self.constraints:
            out = np.minimum(out, stacked[len(self.members) :].min(axis=0))
        return out

    def logits(self, features: dict[FeatureSpec, np.ndarray]) -> np.ndarray:
        return self.combine_logits(self.member_logits(features))

    def probabilities(self, features: dict[FeatureSpec, np.ndarray]) -> np.ndarray:
        return sigmoid(self.logits(features))


@dataclass(frozen=True)
class Scores:
    logits: np.ndarray
    probabilities: np.ndarray
    member_logits: np.ndarray  # (n_members + n_constraints, N)


class ProbeScorer:
    """Frozen reference + extractor + ensemble; ``score(texts)`` costs one forward pass per batch.

    Construction refuses probes trained on another reference (fingerprint) or with an input size
    that does not match this reference's features. Picklable: a reference loaded from a path is
    pickled as that path and reloaded (and re-verified) on the other side.
    """

    def __init__(
        self,
        reference: FrozenReference,
        ensemble: ProbeEnsemble | Probe,
        extraction: ExtractionConfig | None = None,
        cache: FeatureCache | None = None,
    ) -> None:
        self.ensemble = ensemble if isinstance(ensemble, ProbeEnsemble) else ProbeEnsemble([ensemble])
        for probe in self.ensemble.probes:
            check_compatible(probe, reference)
        self.reference = reference
        self.extractor = FeatureExtractor(reference, extraction, cache)

    @classmethod
    def from_artifacts(
        cls,
        reference: FrozenReference,
        members: Sequence[str | Path],
        combine: Combine = "min",
        constraints: Sequence[str | Path] = (),
        extraction: ExtractionConfig | None = None,
        cache: FeatureCache | None = None,
    ) -> ProbeScorer:
        """Load probe directories, verifying fingerprint and input size against ``reference``."""
        load = lambda path: _load_for(reference, path)  # noqa: E731
        ensemble = ProbeEnsemble([load(p) for p in members], combine, [load(p) for p in constraints])
        return cls(reference, ensemble, extraction, cache)

    @property
    def forward_passes(self) -> int:
        return self.extractor.forward_passes

    def features(self, texts: Sequence[TextInput], progress: ProgressFn | None = None) -> dict[FeatureSpec, np.ndarray]:
        return self.extractor.extract(texts, self.ensemble.specs, progress)

    def score(self, texts: Sequence[TextInput], progress: ProgressFn | None = None) -> Scores:
        if not texts:
            empty = np.zeros(0)
            return Scores(empty, empty, np.zeros((len(self.ensemble.probes), 0)))
        stacked = self.ensemble.member_logits(self.features(texts, progress))
        logits = self.ensemble.combine_logits(stacked)
        return Scores(logits=logits, probabilities=sigmoid(logits), member_logits=stacked)

    def __call__(self, texts: Sequence[TextInput]) -> list[float]:
        """Combined logits as plain floats (what a reward function wants)."""
        return [float(x) for x in self.score(texts).logits]


def check_compatible(probe: Probe, reference: FrozenReference) -> None:
    """Raise :class:`ProbeArtifactError` unless ``probe`` was trained on ``reference`` and fits its features."""
    if probe.reference_fingerprint != reference.fingerprint:
        raise ProbeArtifactError(
            f"probe {probe.name}: reference model mismatch — trained on {probe.reference_id} "
            f"({probe.reference_fingerprint}), scorer uses {reference.model_id} ({reference.fingerprint})"
        )
    expected = probe.spec.output_dim(reference.hidden_size)
    if probe.input_dim != expected:
        raise ProbeArtifactError(
            f"probe {probe.name}: wrong input size — takes {probe.input_dim}, {probe.spec.name} gives {expected} here"
        )
    reference.resolve_layer(probe.spec.layer)


def _load_for(reference: FrozenReference, path: str | Path) -> Probe:
    meta_probe = load_probe(path, expected_fingerprint=reference.fingerprint)
    check_compatible(meta_probe, reference)
    return meta_probe

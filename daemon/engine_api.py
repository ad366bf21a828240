"""What the driver needs from the model side (generator, reference, probes) and the solver side.

The real implementations live in :mod:`daemon.engine` (TRL/PEFT generator, frozen reference,
probe ensemble) and :mod:`daemon.spot` (in-process or Celery spot-checks). Keeping the contract
here lets the phase logic be read — and tested — without loading a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from curriculum.domains.base import Domain


@dataclass(frozen=True)
class Scored:
    """Probe-ensemble output for a batch of texts."""

    logits: list[float]
    probabilities: list[float]


@dataclass(frozen=True)
class LabelledSample:
    """A stored task with its probe probability and spot-check verdict, for aux-probe retraining."""

    task_id: int
    text: str
    topic: str
    probability: float
    solved: int
    valid_trials: int
    in_band: bool


@dataclass(frozen=True)
class NewProbe:
    """An aux probe the engine trained, ready to be registered and activated."""

    name: str
    artifact_uri: str
    reference_fingerprint: str
    meta: dict[str, Any] = field(default_factory=dict)


class Engine(Protocol):
    domain: Domain

    def rl_chunk(self, steps: int, should_stop: Callable[[], bool], kl_factor: float) -> dict[str, float]:
        """Train up to ``steps`` GRPO steps and checkpoint; returns chunk stats (reward mean/std …)."""
        ...

    def sample(self, n: int, seed: int) -> list[str]:
        """``n`` completions of the current policy."""
        ...

    def score(self, texts: Sequence[str]) -> Scored:
        """Ensemble scores of reference texts (one reference forward pass)."""
        ...

    def rewards(self, completions: Sequence[str]) -> list[float]:
        """The exact RL reward (validity gate + ensemble) — its variance over a sample is RVP."""
        ...

    def provenance(self) -> dict[str, Any]:
        """generator_step, adapter_hash, probe_ensemble_id, reference_model, reference_fingerprint."""
        ...

    def load_probes(self, artifact_uris: Sequence[str], aux_uris: Sequence[str]) -> None:
        """Hot-swap the reward to these probes (primary members, aux constraints)."""
        ...

    def train_aux(self, samples: Sequence[LabelledSample], negatives_topic: str | None,
                  false_positive_ids: set[int], name: str) -> NewProbe | None:
        """Train an aux probe (positives: in band; negatives: false positives + the topic family)."""
        ...


class SpotChecker(Protocol):
    solver_id: str

    def dispatch(self, task_ids: Sequence[int], k: int) -> None:
        """Start spot-checks (in-process: run them now; distributed: send to Celery)."""
        ...

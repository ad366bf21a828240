"""What the driver needs from the model side (generator, reference, probes) and the solver side.

The real implementations live in :mod:`daemon.service.engine` (TRL/PEFT generator, frozen reference,
probe ensemble), :mod:`daemon.service.spot` (in-process or Celery spot-checks) and :mod:`daemon.service.retrainer`
(in-process or Celery aux-probe retrains). Keeping the contract
here lets the phase logic be read — and tested — without loading a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from curriculum.domains.base import Domain, Validity
from curriculum.probing.retrain import RetrainSpec
from curriculum.store.lineage import EnsembleSpec


class DispatchError(Exception):
    """The broker could not take a dispatch (spot-checks or a retrain); the driver retries it next cycle."""


@dataclass(frozen=True)
class Scored:
    """Probe-ensemble output for a batch of texts, with the ensemble that produced it (lineage)."""

    logits: list[float]
    probabilities: list[float]
    ensemble: EnsembleSpec


@dataclass(frozen=True)
class Rollouts:
    """The generations the last RL chunk scored (what the domain parses), made by the policy at GRPO steps
    ``first_step`` … ``end_step − 1``."""

    texts: list[str]
    first_step: int
    end_step: int


@dataclass(frozen=True)
class ReferenceInfo:
    """The frozen reference the probes read: what a retrain job needs to load and check it."""

    model: str  # local path or hub id
    fingerprint: str
    layer: int  # resolved (non-negative) hidden-state layer of the probe feature
    pooling: str


class Engine(Protocol):
    @property
    def domain(self) -> Domain:
        """The task domain the engine generates for (read-only: the driver never replaces it)."""
        ...

    def rl_chunk(self, steps: int, should_stop: Callable[[], bool], kl_factor: float) -> dict[str, float]:
        """Train up to ``steps`` GRPO steps and checkpoint; returns chunk stats (reward mean/std …)."""
        ...

    def sample(self, n: int, seed: int) -> list[str]:
        """``n`` completions of the current policy."""
        ...

    def sample_reference(self, n: int, seed: int) -> list[str]:
        """``n`` completions of the untrained generator (the policy before any RL)."""
        ...

    def rollouts(self) -> Rollouts:
        """The RL chunk's rollouts not yet taken (each is returned once)."""
        ...

    def score(self, texts: Sequence[str]) -> Scored:
        """Ensemble scores of reference texts (one reference forward pass)."""
        ...

    def rewards(self, checks: Sequence[Validity], scored: Scored | None) -> list[float]:
        """The exact RL reward (validity gate + ensemble) of a sample from its validity checks and the
        ensemble scores of its valid tasks (``scored``), validating and scoring nothing again — its
        variance over a sample is RVP."""
        ...

    def provenance(self) -> dict[str, Any]:
        """generator_step, adapter_hash, probe_ensemble_id, reference_model, reference_fingerprint."""
        ...

    def load_probes(self, artifact_uris: Sequence[str], aux_uris: Sequence[str]) -> None:
        """Hot-swap the reward to these probes (primary members, aux constraints)."""
        ...

    def reference_info(self) -> ReferenceInfo:
        """The reference model, its fingerprint and the probe feature (for aux-probe retrain jobs)."""
        ...

    def observe_emitted(self, texts: Sequence[str], topics: Sequence[str | None]) -> None:
        """Tasks just emitted (texts, topics): the reward's diversity archive (if on) remembers them."""
        ...

    def pin_checkpoint(self, step: int) -> None:
        """Keep the generator checkpoint of ``step`` (the last healthy one) from being pruned; called only
        when generator rollback is on (daemon.loop.rollback)."""
        ...

    def rollback(self, step: int) -> int | None:
        """Restore the generator to its newest checkpoint at or before ``step``; the step restored, or
        None when none is recorded (the generator is unchanged)."""
        ...


class SpotChecker(Protocol):
    solver_id: str  # the solver's name; the version spot-checks are recorded against comes from the store

    def dispatch(self, task_ids: Sequence[int], k: int, solver_id: str | None = None) -> None:
        """Start spot-checks (in-process: run them now; distributed: send to Celery), recorded under
        ``solver_id`` (``name@version``; default: :attr:`solver_id`, unversioned)."""
        ...


class Retrainer(Protocol):
    def submit(self, spec: RetrainSpec) -> None:
        """Start an aux-probe retrain whose pending job row exists (in-process: run it now;
        distributed: send it to the run's ``retrain`` queue). The outcome lands on the job row."""
        ...

"""The integration tests' driver: a hand-written fake engine (no model), the real store, in-process
spot-checks with the synthetic solver and real retrains on a tiny reference (tests and the soak benchmark)."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from curriculum.common.solver_api import Sampling
from curriculum.domains.arith import ArithDomain, complexity, random_expression
from curriculum.domains.base import Task, Validity
from curriculum.probing.retrain import RetrainSpec
from curriculum.reward.novelty import DiversityTerm
from curriculum.reward.rewards import HardGateReward
from curriculum.solvers import build_solver
from curriculum.store import repo
from curriculum.store.artifacts import ArtifactStore, publish_model
from curriculum.store.db import Store
from curriculum.store.lineage import EnsembleSpec
from daemon.loop.driver import Driver, DriverSettings
from daemon.loop.ports import DispatchError, ReferenceInfo, Rollouts, Scored
from daemon.service.retrainer import InProcessRetrainer
from daemon.service.spot import InProcessSpotChecker
from probes import FeatureExtractor, FrozenReference, Probe, Scores, load_probe
from probes.band import Band
from testkit.retrain_data import artifacts_for, tiny_reference


class CountingArith(ArithDomain):
    """The arith domain, counting the completions it validates (one pass per sample batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.validated = 0

    def validate_batch(self, texts: list[str]) -> list[Validity]:
        self.validated += len(texts)
        return super().validate_batch(texts)


class ComplexityScorer:
    """Ensemble scores as a fixed function of task complexity; counts the texts it scored."""

    def __init__(self) -> None:
        self.scored = 0

    def score(self, texts: Sequence[str]) -> Scores:
        self.scored += len(texts)
        probs = np.array([min(0.99, complexity(Task("arith", t.removeprefix("Q:"))) / 12) for t in texts])
        return Scores(probs * 10 - 5, probs, np.zeros((1, len(texts))))


class FakeEngine:
    """Samples random arith expressions; 'probability' is a fixed function of complexity; the reward is
    the real hard gate over those scores (with the diversity term when one is given: then each RL chunk
    also scores one GRPO batch of samples with the real reward, and reports its mean penalty)."""

    def __init__(self, diversity: DiversityTerm | None = None, group_size: int = 1) -> None:
        self.domain = CountingArith()
        self.scorer = ComplexityScorer()
        self.reward = HardGateReward(self.domain, self.scorer, floor=-6.0, group_size=group_size)
        self.reward.diversity = diversity
        self.step = 0
        self.members: tuple[str, ...] = ("file:///p",)
        self.aux: tuple[str, ...] = ()
        self.loaded: list[tuple[list[str], list[str]]] = []
        self.kl_factors: list[float] = []
        self.pinned: list[int] = []
        self.rollbacks: list[int] = []
        self.validity_override: float | None = None  # share of valid samples a test forces (None: ~90 %)
        self.topic_collapse = False  # a test forces every valid sample onto one topic (mul:3)
        self.repeat_collapse = False  # a test forces the same valid, mixed sample every cycle (nothing new)
        self.reference_calls: list[int] = []  # sizes of the sample_reference calls
        self.rollout_batch = 0  # rollouts each RL chunk scores with the real reward (0: none)
        self.chunk_steps = (0, 0)

    @property
    def ensemble(self) -> EnsembleSpec:
        return EnsembleSpec("min", self.members, self.aux)

    def rl_chunk(self, steps: int, should_stop: Callable[[], bool], kl_factor: float) -> dict[str, float]:
        self.chunk_steps = (self.step, self.step + steps)
        self.step += steps
        self.kl_factors.append(kl_factor)
        out = {"reward_mean": 0.1 * self.step, "steps": float(steps)}
        if self.rollout_batch:  # TRL's rollouts: generated, then scored by the real reward
            rollouts = self.sample(self.rollout_batch, seed=-self.step)
            self.reward([""] * len(rollouts), rollouts)
        if self.reward.diversity is not None:
            completions = self.sample(4 * self.reward.group_size, seed=self.step)
            self.reward([""] * len(completions), completions)
            out["diversity_penalty"] = float(self.reward.logs[-1].diversity_penalty or 0.0)
        return out

    def rollouts(self) -> Rollouts:
        return Rollouts(self.reward.take_rollouts(), *self.chunk_steps)

    def sample(self, n: int, seed: int) -> list[str]:
        rng = random.Random(7 if self.repeat_collapse else seed)
        if self.validity_override is not None:  # a collapsing policy: the rest are invalid
            valid = round(n * self.validity_override)
            return [random_expression(rng, rng.randint(1, 6)) if i < valid else "12+" for i in range(n)]
        if self.topic_collapse:  # varied numbers, one operator signature
            return ["*".join(str(rng.randint(2, 30)) for _ in range(4)) if i % 10 else "12+" for i in range(n)]
        return [random_expression(rng, rng.randint(1, 6)) if i % 10 else "12+" for i in range(n)]

    def sample_reference(self, n: int, seed: int) -> list[str]:
        """The untrained generator: mixed and valid whatever the policy has collapsed to."""
        self.reference_calls.append(n)
        rng = random.Random(-1 - seed)
        return [random_expression(rng, rng.randint(1, 6)) for _ in range(n)]

    def pin_checkpoint(self, step: int) -> None:
        self.pinned.append(step)

    def rollback(self, step: int) -> int | None:
        """Every chunk's checkpoint is 'kept': back to ``step``, and the policy is valid and mixed again."""
        self.rollbacks.append(step)
        self.step, self.validity_override, self.topic_collapse, self.repeat_collapse = step, None, False, False
        return step

    def score(self, texts: Sequence[str]) -> Scored:
        scores = self.scorer.score(texts)
        return Scored(scores.logits.tolist(), scores.probabilities.tolist(), self.ensemble)

    def rewards(self, checks: Sequence[Validity], scored: Scored | None) -> list[float]:
        return self.reward.from_valid_scores(checks, scored.logits if scored else [],
                                             scored.probabilities if scored else [])

    def provenance(self) -> dict[str, Any]:
        return {"generator_step": self.step, "adapter_hash": f"a{self.step}", "probe_ensemble_id": self.ensemble.key,
                "reference_fingerprint": "sha256:ref"}

    def load_probes(self, artifact_uris: Sequence[str], aux_uris: Sequence[str]) -> None:
        self.loaded.append((list(artifact_uris), list(aux_uris)))
        self.members, self.aux = tuple(artifact_uris), tuple(aux_uris)

    def reference_info(self) -> ReferenceInfo:
        return ReferenceInfo("tiny", reference().fingerprint, 2, "mean_full")

    def observe_emitted(self, texts: Sequence[str], topics: Sequence[str | None]) -> None:
        if self.reward.diversity is not None:
            self.reward.diversity.observe(texts, topics)


class LeaderEngine(FakeEngine):
    """The tests' fake engine, with what the real one does with artifacts: the reference it names in
    retrain jobs is published to the artifact store, and probes are loaded by fetching and verifying
    them from that store."""

    def __init__(self, artifacts: ArtifactStore, reference_dir: Path, fingerprint: str) -> None:
        super().__init__()
        self.artifacts, self.fingerprint = artifacts, fingerprint
        self.reference_uri = publish_model(artifacts, str(reference_dir))
        self.probes: list[Probe] = []

    def reference_info(self) -> ReferenceInfo:
        return ReferenceInfo(self.reference_uri, self.fingerprint, 2, "mean_full")

    def load_probes(self, artifact_uris: Sequence[str], aux_uris: Sequence[str]) -> None:
        super().load_probes(artifact_uris, aux_uris)
        self.probes = [load_probe(self.artifacts.fetch_tree(u), expected_fingerprint=self.fingerprint)
                       for u in aux_uris]


@functools.cache
def reference() -> FrozenReference:
    """Aux probes are trained for real, on a random tiny Qwen2 (built once per test process)."""
    return tiny_reference()


class QueuedRetrainer:
    """Holds submitted jobs, as a broker would, until the test plays the worker."""

    def __init__(self, fail_first: int = 0) -> None:
        self.specs: list[RetrainSpec] = []
        self.fail_first = fail_first

    def submit(self, spec: RetrainSpec) -> None:
        if self.fail_first > 0:
            self.fail_first -= 1
            raise DispatchError("broker unreachable")
        self.specs.append(spec)


def make_driver(store: Store, work_dir: Path, retrainer: Any = None, engine: FakeEngine | None = None,
                **kw: Any) -> tuple[Driver, FakeEngine]:
    """The fake engine (or ``engine``), in-process spot-checks with the synthetic solver, real retrains on
    the tiny reference; ``kw`` overrides the small :class:`DriverSettings` used here."""
    settings = DriverSettings(**{
        "run_name": "drv", "sample_size": 40, "band": Band(8, 1, 3, 6), "budget_per_cycle": 20,
        "retrain_min_false_positives": 3, "min_probability": 0.3, "max_topic_share": 0.5,
        "diversity_sample_size": 32, "probe_arch": "linear", **kw})
    with store.session() as s:
        run_id = repo.get_or_create_run(s, settings.run_name, "h", {})
        pid = repo.register_probe(s, "primary", "primary", "file:///p", "sha256:ref", {}, run_id=run_id)
        repo.set_active_probes(s, [pid], run_id)
    engine = engine or FakeEngine()
    spot = InProcessSpotChecker(store, engine.domain, build_solver("synthetic", seed=1), Sampling())
    retrainer = retrainer or InProcessRetrainer(store, engine.domain, FeatureExtractor(reference()),
                                                artifacts_for(store, work_dir))
    return Driver(store, run_id, engine, spot, retrainer, settings), engine


def tick_to(driver: Driver, phase: str, cycle: int) -> None:
    while driver.state()[:2] != (phase, cycle):
        driver.tick()

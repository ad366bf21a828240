"""The model side of the daemon: TRL/PEFT generator, frozen reference, probe ensemble, reward.

Built once per leader (standbys never load models). On a fresh run it trains the first primary
probe(s) on an offline labelled batch of base-policy samples (the paper's probe-training set) and
registers them; on a restart it reloads the active probes from the registry and the latest RL
checkpoint from the run directory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from curriculum.domains.base import Domain, Task, Validity, get_domain
from curriculum.probing.first_probe import (
    LabelledCorpus,
    distinct_valid_tasks,
    label_corpus,
    label_corpus_actively,
    register_primaries,
    task_groups,
)
from curriculum.reward.rewards import ProbeReward, build_reward
from curriculum.rl.checkpoint_rows import record_checkpoint, restore_checkpoint, rollback_checkpoint
from curriculum.rl.config import GeneratorRLConfig, LoraSettings, cpu_profile, gpu_profile
from curriculum.rl.generator import GeneratorTrainer
from curriculum.store import repo
from curriculum.store.artifacts import publish_model
from curriculum.store.db import Store
from curriculum.store.lineage import EnsembleSpec
from daemon.config import PropelConfig
from daemon.loop.ports import ReferenceInfo, Rollouts, Scored
from daemon.service.settings import (
    active_pool_samples,
    active_settings,
    band,
    build_artifacts,
    build_configured_solver,
    followed_solver_name,
    restored_diversity_term,
    sampling,
    topic_share_term,
)
from probes import (
    ExtractionConfig,
    FeatureExtractor,
    FeatureSpec,
    FrozenReference,
    Probe,
    ProbeScorer,
    TrainConfig,
)
from probes.fit import fit_probe
from probes.progress import ProgressReporter

log = logging.getLogger("propel.engine")


def resolve_model(spec: str, cfg: PropelConfig, say: Callable[[str], None]) -> str:
    """``bootstrap:DOMAIN`` → the locally pretrained tiny model (built on first use); else unchanged."""
    if not spec.startswith("bootstrap:"):
        return spec
    from curriculum.rl.bootstrap import bootstrap

    domain = spec.split(":", 1)[1]
    say(f"bootstrapping the tiny {domain} generator in {cfg.data_dir} (cached after the first run)…")
    result = bootstrap(domain, data_dir=cfg.data_dir, steps=cfg.generator.bootstrap_steps, show_progress=True,
                       domain_options=dict(cfg.domain.options) if domain == cfg.domain.name else None)
    say(f"generator {result.path} · {result.n_params:,} params · {result.validity:.1%} valid"
        + (" (reused)" if result.reused else f" (trained in {result.train_s:.0f} s)"))
    return str(result.path)


def rl_config(cfg: PropelConfig, generator: str, reference: str, use_cpu: bool) -> GeneratorRLConfig:
    rl = cfg.rl
    lora = LoraSettings(rank=rl.lora_rank, alpha=rl.lora_alpha, dropout=rl.lora_dropout)
    common: dict[str, Any] = {
        "domain": cfg.domain.name, "lora": lora, "learning_rate": rl.learning_rate, "beta": rl.kl_beta,
        "num_generations": rl.num_generations, "per_device_train_batch_size": rl.batch_size,
        "temperature": cfg.generator.temperature, "max_completion_length": cfg.generator.max_new_tokens,
        "invalid_floor_margin": rl.invalid_floor_margin, "seed": cfg.seed}
    if use_cpu:
        return cpu_profile(generator, reference, **common)
    return gpu_profile(generator, reference, use_vllm=rl.use_vllm, bf16=rl.bf16, **common)


class PropelEngine:
    """Implements :class:`daemon.loop.ports.Engine` with real models."""

    def __init__(self, cfg: PropelConfig, store: Store, run_id: int, say: Callable[[str], None]) -> None:
        import torch

        self.cfg, self.store, self.run_id, self.say = cfg, store, run_id, say
        self.domain: Domain = get_domain(cfg.domain.name, **cfg.domain.options)
        self.run_dir = Path(cfg.data_dir) / "runs" / cfg.run_name
        self.artifacts = build_artifacts(cfg, store)
        generator = resolve_model(cfg.generator.model, cfg, say)
        reference = generator if cfg.reference.model is None else resolve_model(cfg.reference.model, cfg, say)
        use_cpu = not torch.cuda.is_available()
        if use_cpu and cfg.daemon.torch_threads:
            torch.set_num_threads(cfg.daemon.torch_threads)
        self.rl_cfg = rl_config(cfg, generator, reference, use_cpu)
        restored = restore_checkpoint(store, run_id, self.artifacts, self.run_dir / "generator")
        if restored is not None:
            say(f"restored RL checkpoint step {restored} from the artifact store (not in {self.run_dir})")
        self.trainer = GeneratorTrainer(self.rl_cfg, self.run_dir / "generator", domain=self.domain)
        self.pinned_step: int | None = None  # the last healthy generator checkpoint (daemon.loop.rollback)
        self._rollout_steps = (self.trainer.global_step, self.trainer.global_step)  # the last chunk's steps
        self._published_reference: str | None = None
        self.reference = FrozenReference.load(reference, device="cpu" if use_cpu else "cuda")
        self.spec = FeatureSpec(layer=self.reference.resolve_layer(cfg.probes.layer), pooling=cfg.probes.pooling)
        self.band = band(cfg)
        self.diversity = restored_diversity_term(cfg, store, run_id)  # one archive: survives reloads, restarts
        self.topic_share = topic_share_term(cfg)  # one window: survives probe reloads and rollbacks
        say(f"generator step {self.trainer.global_step} · reference {self.reference.model_id} "
            f"({self.reference.fingerprint[:19]}…) · probe feature {self.spec.name}")
        self.calibration_texts = self._calibration_texts()
        self._ensure_primary_probes()
        with store.session() as s:
            active = repo.active_probes(s, run_id)
        self.load_probes([p.artifact_uri for p in active if p.role == "primary"],
                         [p.artifact_uri for p in active if p.role == "aux"])

    # ---- probes and reward -------------------------------------------------------------------
    def _calibration_texts(self) -> list[str]:
        """Reference texts of a base-policy sample: the hard gate's floor is set below their logits."""
        checks = self.domain.validate_batch(self.trainer.sample(64, seed=self.cfg.seed + 17))
        texts = [self.domain.reference_text(v.task) for v in checks if v.valid]
        if not texts:
            raise RuntimeError("the generator produced no valid task in 64 samples: check generator.model "
                               "and domain.name (the probe reward cannot be calibrated)")
        return texts

    def load_probes(self, artifact_uris: Sequence[str], aux_uris: Sequence[str]) -> None:
        """Fetch (and verify) the probes from the artifact store, then hot-swap the reward to them."""
        self.ensemble = EnsembleSpec(self.cfg.probes.ensemble, tuple(artifact_uris), tuple(aux_uris))
        local = self.artifacts.local_path
        self.scorer = ProbeScorer.from_artifacts(self.reference, [local(u) for u in artifact_uris],
                                                 self.cfg.probes.ensemble, [local(u) for u in aux_uris],
                                                 ExtractionConfig(batch_size=self.cfg.reference.batch_size))
        before: ProbeReward | None = getattr(self, "reward", None)
        self.reward: ProbeReward = build_reward(self.cfg.rl.reward, self.domain, self.scorer, self.calibration_texts,
                                                self.cfg.rl.num_generations, self.cfg.rl.invalid_floor_margin,
                                                diversity=self.diversity, topic_share=self.topic_share)
        if before is not None:  # rollouts not yet taken survive the swap
            self.reward.rollouts.extend(before.take_rollouts())
        self.say(f"reward {self.cfg.rl.reward} over {len(artifact_uris)} probe(s) "
                 f"({self.cfg.probes.ensemble}) + {len(aux_uris)} aux constraint(s)")

    def _ensure_primary_probes(self) -> None:
        with self.store.session() as s:
            if any(p.role == "primary" for p in repo.active_probes(s, self.run_id)):
                return
        if self.cfg.probes.corpus_labelling == "active":
            corpus, x = self._active_labels()
        else:
            corpus = self._offline_labels(self.cfg.probes.train_samples)
            x = self._features(corpus.texts)
        y = corpus.y
        groups = self._validation_groups(corpus.tasks)
        training = {"rows": len(corpus.texts), "positives": int(y.sum()), "offline_solver_trials": corpus.solver_trials,
                    "validation": "grouped" if groups else "kfold", "balance": self.cfg.probes.balance,
                    "solver": followed_solver_name(self.cfg)}  # whose labels: a refresh for another replaces it
        probes = [self._fit(x, y, f"{self.cfg.run_name}-primary-{member}", seed=self.cfg.seed + member,
                            training=training, groups=groups) for member in range(self.cfg.probes.members)]
        register_primaries(self.store, self.run_id, self.artifacts, probes, self.run_dir / "probes",
                           self.reference.fingerprint)

    def _offline_labels(self, n: int) -> LabelledCorpus:
        """Sample ``n`` base-policy tasks and label them with ``k`` solver attempts each (offline trials)."""
        solver = build_configured_solver(self.cfg)
        tasks = distinct_valid_tasks(self.domain, self.trainer.sample(n, seed=self.cfg.seed + 1))
        self.say(f"labelling {len(tasks)} base-policy tasks × k={self.band.k} with {solver.solver_id} "
                 "to train the first probe (offline solver trials)…")
        with ProgressReporter("labelling first-probe corpus", len(tasks), unit="tasks") as bar:
            return label_corpus(self.domain, solver, tasks, self.band, sampling(self.cfg), progress=bar.advance,
                                sequential=self.cfg.spotcheck.sequential)

    def _active_labels(self) -> tuple[LabelledCorpus, np.ndarray]:
        """``train_samples`` tasks labelled in active rounds from a pool of ``active_pool_factor × train_samples``
        base-policy samples."""
        p = self.cfg.probes
        solver = build_configured_solver(self.cfg)
        pool = distinct_valid_tasks(self.domain, self.trainer.sample(active_pool_samples(self.cfg),
                                                                     seed=self.cfg.seed + 1))
        self.say(f"active labelling: {p.train_samples} of {len(pool)} base-policy tasks × k={self.band.k} with "
                 f"{solver.solver_id} ({p.active_rounds} rounds after a {p.active_seed_share:.0%} seed set) "
                 "for the first probe…")
        x = self._features([self.domain.reference_text(t) for t in pool])
        settings = active_settings(self.cfg)
        return label_corpus_actively(self.domain, solver, pool, x, self.band, sampling(self.cfg), settings, self.say)

    def _features(self, texts: list[str]) -> np.ndarray:
        extractor = FeatureExtractor(self.reference, ExtractionConfig(batch_size=self.cfg.reference.batch_size))
        with ProgressReporter("probe features", len(texts), unit="texts") as bar:
            out: np.ndarray = extractor.extract(texts, [self.spec], bar.advance)[self.spec]
        return out

    def _validation_groups(self, tasks: Sequence[Task]) -> list[str | None] | None:
        """``probes.validation = "grouped"``: each task's group (SWE: repository), else ``None``."""
        if self.cfg.probes.validation != "grouped":
            return None
        groups = task_groups(self.domain, tasks)
        if groups is None:
            self.say(f"probes.validation = grouped: domain {self.domain.name} has no groups; validating on rows")
        return groups

    def _fit(self, x: np.ndarray, y: np.ndarray, name: str, seed: int, training: dict[str, Any],
             groups: Sequence[str | None] | None = None) -> Probe:
        return fit_probe(x, y, reference=self.reference, spec=self.spec, band=self.band,
                         arch=self.cfg.probes.architecture, balance=self.cfg.probes.train_balance,
                         config=TrainConfig(seed=seed), name=name, training=training, groups=groups)

    # ---- Engine protocol ---------------------------------------------------------------------
    def rl_chunk(self, steps: int, should_stop: Callable[[], bool], kl_factor: float) -> dict[str, float]:
        if should_stop():
            return {"steps": 0.0}
        if kl_factor != 1.0:
            self.trainer.config = replace(self.rl_cfg, beta=self.rl_cfg.beta * kl_factor)
        try:
            stats = self.trainer.train_steps(steps, self.reward, self.provenance())
        finally:
            self.trainer.config = self.rl_cfg
        self._rollout_steps = (stats.start_step, stats.end_step)
        record_checkpoint(self.store, self.run_id, self.artifacts, stats.end_step, stats.adapter_hash,
                          stats.checkpoint, keep=self.rl_cfg.keep_checkpoints,  # a leader elsewhere resumes from it
                          pinned=[self.pinned_step] if self.pinned_step is not None else [])
        out = {"reward_mean": stats.reward_mean, "reward_std": stats.reward_std, "validity": stats.validity_rate,
               "zero_spread_share": stats.zero_spread_share, "steps": float(stats.steps), "step": float(stats.end_step),
               "wall_s": stats.wall_s, "beta": self.rl_cfg.beta * kl_factor}
        if stats.kl is not None:
            out["kl"] = stats.kl
        if stats.diversity_penalty is not None:
            out["diversity_penalty"] = stats.diversity_penalty
        if stats.topic_share_penalty is not None:
            out["topic_share_penalty"] = stats.topic_share_penalty
        return out

    def observe_emitted(self, texts: Sequence[str], topics: Sequence[str | None]) -> None:
        if self.diversity is not None:
            self.diversity.observe(texts, topics)

    def pin_checkpoint(self, step: int) -> None:
        self.pinned_step = step

    def rollback(self, step: int) -> int | None:
        """Install the recorded checkpoint and rebuild the trainer on it (the base model is reloaded)."""
        restored = rollback_checkpoint(self.store, self.run_id, self.artifacts, self.run_dir / "generator", step)
        if restored is not None:
            self.trainer = GeneratorTrainer(self.rl_cfg, self.run_dir / "generator", domain=self.domain)
        return restored

    def sample(self, n: int, seed: int) -> list[str]:
        return self.trainer.sample(n, seed)

    def sample_reference(self, n: int, seed: int) -> list[str]:
        return self.trainer.sample(n, seed, reference=True)

    def rollouts(self) -> Rollouts:
        texts = self.reward.take_rollouts()
        return Rollouts(texts, *self._rollout_steps)

    def score(self, texts: Sequence[str]) -> Scored:
        scores = self.scorer.score(list(texts))
        return Scored([float(x) for x in scores.logits], [float(p) for p in scores.probabilities], self.ensemble)

    def rewards(self, checks: Sequence[Validity], scored: Scored | None) -> list[float]:
        if scored is None:
            return self.reward.from_valid_scores(checks, [], [])
        return self.reward.from_valid_scores(checks, scored.logits, scored.probabilities)

    def provenance(self) -> dict[str, Any]:
        return {"generator_step": self.trainer.global_step, "adapter_hash": self.trainer.adapter_hash(),
                "probe_ensemble_id": self.ensemble.key,
                "reference_fingerprint": self.reference.fingerprint}

    def reference_info(self) -> ReferenceInfo:
        """The reference for retrain jobs: a local model directory is published to the artifact store
        once (a worker fetches it by content address), a hub id is passed as it is."""
        if self._published_reference is None:  # in-process retrains use the loaded reference: nothing to publish
            self._published_reference = (self.rl_cfg.reference if self.cfg.broker.embedded
                                         else publish_model(self.artifacts, self.rl_cfg.reference))
        return ReferenceInfo(self._published_reference, self.reference.fingerprint, self.spec.layer,
                             self.spec.pooling)


def build_engine(cfg: PropelConfig, store: Store, run_id: int, say: Callable[[str], None]) -> PropelEngine:
    import warnings

    from transformers.utils import logging as hf_logging

    # keep the daemon's terminal readable: per-load progress bars and a TRL-internal deprecation
    # notice repeat on every RL chunk
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    return PropelEngine(cfg, store, run_id, say)

"""Configuration: one TOML file, one frozen pydantic model per component.

Every field has a default that makes the embedded mode work with no file at all (SQLite under
``data_dir``, in-process workers, the arith demo with the synthetic solver). URLs and secrets may
come from the environment: ``PROPEL_DATABASE_URL`` → ``store.url``, ``PROPEL_BROKER_URL`` →
``broker.url``, ``PROPEL_API_TOKEN`` → ``api.token``. Environment values win over the file.

Errors are collected by :func:`load_config` into :class:`ConfigError`, whose ``problems`` name the
offending key (``spotcheck.band_hi``) and say what to do.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from daemon.config_agent import AgentLimitsConfig, GeneratorAgentConfig
from daemon.ops.alerts.rules import DEFAULT_RULES, AlertRule, AlertRules

ENV_OVERRIDES: dict[str, tuple[str, str]] = {
    "PROPEL_DATABASE_URL": ("store", "url"),
    "PROPEL_BROKER_URL": ("broker", "url"),
    "PROPEL_API_TOKEN": ("api", "token"),
    "PROPEL_ARTIFACTS_URL": ("artifacts", "url"),
}

_DB_SCHEMES = ("sqlite", "postgresql", "postgresql+psycopg")
_BROKER_SCHEMES = ("redis", "rediss", "amqp", "amqps", "pyamqp")


def _check_scheme(value: str | None, schemes: tuple[str, ...], what: str, example: str) -> str | None:
    """Empty → None; otherwise the URL's scheme must be one of ``schemes`` (password masked in errors)."""
    if not value:
        return None
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in schemes:
        raise ValueError(f"unsupported {what} URL {_mask(value)!r}: use {example}")
    return value


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StoreConfig(_Section):
    """Where tasks, trials, labels, probes, the queue and metrics live."""

    url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; empty → sqlite file <data_dir>/propel.db. "
        "Use postgresql+psycopg://user@host/db in production.",
    )
    pool_size: int = Field(default=5, ge=1, le=100)
    echo: bool = Field(default=False, description="log every SQL statement (sqlalchemy echo)")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        value = _check_scheme(value, _DB_SCHEMES, "database", "sqlite:///PATH or postgresql+psycopg://USER@HOST:PORT/DB")
        if value and value.startswith("postgresql") and "/" not in value.split("://", 1)[1]:
            raise ValueError("a PostgreSQL URL needs a database name: postgresql+psycopg://HOST/DB")
        return value


class BrokerConfig(_Section):
    """Celery broker for spot-check and retrain workers; empty → embedded (in-process) mode."""

    url: str | None = Field(default=None, description="redis://HOST:6379/0 or amqp://guest@HOST//")
    visibility_timeout_s: int = Field(default=3600, ge=5)
    task_time_limit_s: int = Field(default=1800, ge=1)
    spotcheck_batch_size: int = Field(default=8, ge=1, description="tasks per Celery message")
    worker_concurrency: int = Field(default=2, ge=1, description="processes per `propel worker`")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        return _check_scheme(value, _BROKER_SCHEMES, "broker", "redis://HOST:6379/0 or amqp://USER@HOST//")

    @model_validator(mode="after")
    def _limits(self) -> BrokerConfig:
        if self.task_time_limit_s >= self.visibility_timeout_s:
            raise ValueError(
                "broker.task_time_limit_s must be below broker.visibility_timeout_s, or a slow task "
                "is redelivered while still running; lower the limit or raise the timeout"
            )
        return self

    @property
    def embedded(self) -> bool:
        return self.url is None


class DomainConfig(_Section):
    """Which task domain the generator writes for."""

    name: Literal["arith", "azr", "math", "swe"] = "arith"
    options: dict[str, Any] = Field(default_factory=dict, description="domain-specific options (swe: cache_dir, "
                                    "registry, split, repos, runner, prompt_style; see docs/SWE.md)")


class GeneratorConfig(_Section):
    """The trainable generator (a LoRA adapter is trained on top of it)."""

    model: str = Field(default="bootstrap:arith", description="hub id, local path, or bootstrap:DOMAIN")
    max_new_tokens: int = Field(default=48, ge=1)
    temperature: float = Field(default=1.0, gt=0)
    bootstrap_steps: int | None = Field(default=None, ge=1, description="bootstrap:* models only: training "
                                        "steps (default: the recipe; small values for tests)")
    agent: GeneratorAgentConfig = Field(default_factory=GeneratorAgentConfig, description="swe only: an "
                                        "agent over an endpoint that adds bugs to each cycle's sample")


class ReferenceConfig(_Section):
    """The frozen reference model whose hidden states the probes read (may differ from the generator)."""

    model: str | None = Field(default=None, description="empty → same as generator.model")
    batch_size: int = Field(default=64, ge=1, description="texts per reference forward pass (probe features)")


class ProbesConfig(_Section):
    """Probe heads, ensemble combination and the artifact directory."""

    layer: int = -1
    pooling: str = Field(default="mean_std_concat", description="how a text's token activations become one "
                         "feature vector (probes.pooling: last_token, mean_full, mean_last_50, mean_std_concat, …); "
                         "mean_std_concat, with rl.diversity_weight = 2, is the measured default (#34: "
                         "benchmarks/results/README.md, long_run run 9)")
    architecture: Literal["linear", "mlp", "deep_mlp"] = "mlp"
    ensemble: Literal["min", "mean"] = "min"
    members: int = Field(default=1, ge=1, le=16)
    train_samples: int = Field(default=512, ge=16, description="base-policy tasks labelled offline to train "
                               "the first probe(s) of a fresh run")
    corpus_labelling: Literal["uniform", "active"] = Field(
        default="uniform", description="which base-policy tasks the first probe's offline trials go to: a uniform "
        "sample, or active rounds on the tasks a small probe ensemble is least sure of (docs/PROBES.md)")
    active_pool_factor: float = Field(default=4.0, ge=1, description="active: the candidate pool is this many "
                                      "times train_samples base-policy samples (only reference passes spent on them)")
    active_seed_share: float = Field(default=0.5, gt=0, le=1, description="active: share of the budget labelled "
                                     "uniformly first")
    active_rounds: int = Field(default=4, ge=1, description="active: rounds after the seed set")
    active_members: int = Field(default=3, ge=1, le=16, description="active: ensemble members that judge certainty")
    frontier_threshold: float = Field(
        default=0.5, gt=0, lt=1, description="probability above which a task is probe-high")
    ece_ceiling: float = Field(default=0.15, gt=0, le=1, description="`propel probes sweep` selects among "
                               "cells whose validation ECE is at most this (its --ece-ceiling default)")
    validation: Literal["kfold", "grouped"] = Field(
        default="kfold", description="how probe training holds rows out for validation and selection: kfold = "
        "shuffled rows; grouped = whole groups (SWE: repositories), none on both sides (the first probe's "
        "validation rows, and `propel probes sweep --split` when set; docs/PROBES.md)")
    balance: Literal["balanced", "weighted"] = Field(
        default="balanced", description="class balance of probe training: balanced = majority class downsampled "
        "to the minority; weighted = every row kept, positives weighted negatives/positives in the loss")

    @property
    def train_balance(self) -> str:
        """``balance`` as :func:`probes.training.train_probe` names it."""
        return "downsample" if self.balance == "balanced" else "weighted"


class SolverConfig(_Section):
    """The target solver whose frontier we aim at."""

    backend: Literal["openai", "hf", "synthetic", "synthetic-swe", "swe-agent"] = "synthetic"
    base_url: str | None = Field(default=None, description="OpenAI-compatible server, e.g. http://vllm:8000/v1")
    model: str | None = Field(default=None, description="openai: the served model; hf: a hub id or local path, "
                              "or a checkpoint per version: \"/ckpt/{version}\" loads /ckpt/step-N for version step-N")
    timeout_s: float = Field(default=120.0, gt=0, description="per request; hf with {version}: how long a missing "
                             "checkpoint folder is waited for")
    max_concurrency: int = Field(default=8, ge=1)
    max_retries: int = Field(default=3, ge=0)
    temperature: float = Field(default=1.0, ge=0)
    max_tokens: int = Field(default=512, ge=1)
    endpoint: Literal["chat", "completions"] = Field(default="chat", description="OpenAI endpoint to call")
    artificial_latency_s: float = Field(
        default=0.0, ge=0, description="benchmarks and fault tests only: fixed delay added per request")
    name: str | None = Field(default=None, min_length=1, max_length=256, pattern=r"^[^@\s/][^@\s]*$",
                             description="the solver's name, as trainers ack and announce it (their outcomes "
                             "mix with spot-checks only under the same name); default: the backend's id")
    follow: Literal["config", "first_trainer"] | None = Field(
        default=None, description="which solver the frontier targets: 'config' (solver.name, spot-checked) or "
        "'first_trainer' (the first solver a trainer announces or acks, known only through its acks: no "
        "spot-checks). Default: first_trainer when the backend is synthetic and solver.name is unset, else config")
    version: str = Field(default="", max_length=128, pattern=r"^[^@\s]*$",
                         description="the version the spot-check endpoint serves at start ('' = unversioned); "
                         "`propel solver announce` moves it on without a restart")
    version_order: int | None = Field(default=None, ge=0, description="order of solver.version when it has no "
                                      "step number (higher = newer)")
    synthetic_skill_by_version: dict[str, float] = Field(
        default_factory=dict, description="synthetic solver only (a benchmark instrument): its offset — the "
        "complexity it solves half the time — per announced version, to simulate an improving solver")
    synthetic_skill_file: Path | None = Field(
        default=None, description="synthetic solver only (a benchmark instrument): a JSON file {version: offset} "
        "re-read at every spot-check, written by a fake trainer before it announces a version; its entries win "
        "over synthetic_skill_by_version")
    synthetic_swe_offset: float | None = Field(
        default=None, description="synthetic-swe solver only (a benchmark instrument): the bug difficulty it "
        "solves half the time (default 2.5; see curriculum/domains/swe/synthetic.py)")
    agent: AgentLimitsConfig = Field(default_factory=AgentLimitsConfig, description="swe-agent solver only: "
                                     "step, time and loop limits of each trial's agent episode")

    @property
    def follow_mode(self) -> Literal["config", "first_trainer"]:
        """``follow`` with its default resolved (see its description)."""
        if self.follow is not None:
            return self.follow
        return "first_trainer" if self.backend == "synthetic" and self.name is None else "config"

    @model_validator(mode="after")
    def _need_url(self) -> SolverConfig:
        if self.backend in ("openai", "swe-agent"):
            if not self.base_url:
                raise ValueError(f"solver.base_url is required when solver.backend = '{self.backend}' (an "
                                 "OpenAI-compatible server, e.g. http://vllm:8000/v1)")
            if not self.base_url.startswith(("http://", "https://")):
                raise ValueError("solver.base_url must start with http:// or https://")
            if not self.model:
                raise ValueError(f"solver.model is required when solver.backend = '{self.backend}'")
        if self.backend == "hf" and not self.model:
            raise ValueError("solver.model (a local path or hub id) is required when solver.backend = 'hf'")
        if self.model and "{version}" in self.model:
            if self.backend != "hf":
                raise ValueError("solver.model with {version} (a checkpoint folder per version) needs solver.backend "
                                 "= 'hf'")
            if not self.version:
                raise ValueError("solver.model names {version}: set solver.version to the checkpoint served at start "
                                 "(e.g. \"step-0\"); announced versions replace it")
        from curriculum.store.solver_versions import derive_order

        if self.version and self.version_order is None and derive_order(self.version) is None:
            raise ValueError(f"solver.version {self.version!r} carries no step number: set solver.version_order "
                             "(an integer, higher = newer)")
        if not self.version and self.version_order is not None:
            raise ValueError("solver.version_order needs solver.version")
        if self.synthetic_swe_offset is not None and self.backend != "synthetic-swe":
            raise ValueError("solver.synthetic_swe_offset only applies to solver.backend = 'synthetic-swe'")
        if self.synthetic_skill_by_version and self.backend != "synthetic":
            raise ValueError("solver.synthetic_skill_by_version only applies to solver.backend = 'synthetic'")
        if self.synthetic_skill_file and self.backend != "synthetic":
            raise ValueError("solver.synthetic_skill_file only applies to solver.backend = 'synthetic'")
        return self


class SpotCheckConfig(_Section):
    """Utility label and the solver budget for spot-checks."""

    k: int = Field(default=8, ge=1, description="solver attempts per task")
    band_lo: int = Field(default=1, ge=0)
    band_hi: int = Field(default=3, ge=0)
    min_valid_trials: int = Field(default=6, ge=1)
    budget_per_cycle: int = Field(default=32, ge=0, description="tasks per cycle")
    budget_per_hour: int = Field(default=512, ge=0, description="tasks per hour (the hard cap over any rolling hour)")
    pace: bool = Field(default=True, description="spread budget_per_hour over the hour with a token bucket, so "
                       "spot-checks, false-positive mining and aux retraining go on all hour (false: spend up to "
                       "budget_per_cycle every cycle until the hour's budget is gone; for compressed-time benchmarks)")
    burst: int = Field(default=32, ge=0, description="the pacing bucket's capacity in tasks (at most half of "
                       "budget_per_hour): what a cycle may check after a quiet spell; the bucket refills at "
                       "(budget_per_hour - burst) / 3600 tasks a second, so the hour never exceeds budget_per_hour")
    probe_high_share: float = Field(default=0.75, ge=0, le=1)
    deadline_s: float = Field(default=3600.0, gt=0, description="a dispatched spot-check with no label after "
                              "this long is sent again (only its missing trials are attempted)")
    redispatches: int = Field(default=1, ge=0, description="times a late spot-check is sent again before it is "
                              "abandoned (counted in propel_spotchecks_abandoned_total)")
    sequential: bool = Field(default=False, description="run a task's attempts one at a time and stop once its label "
                             "is settled (spot-checks and the first probe's corpus; same labels, ~18 % fewer solver "
                             "attempts; backends that sample k in one request run all k; off by default until the "
                             "daemon-level results are re-measured with it; docs/PROBES.md)")

    @model_validator(mode="after")
    def _band(self) -> SpotCheckConfig:
        if self.band_lo > self.band_hi:
            raise ValueError("spotcheck.band_lo must be ≤ spotcheck.band_hi (the band is [lo, hi] solves)")
        if self.band_hi > self.k:
            raise ValueError(f"spotcheck.band_hi ({self.band_hi}) cannot exceed spotcheck.k ({self.k})")
        if self.min_valid_trials > self.k:
            raise ValueError(
                f"spotcheck.min_valid_trials ({self.min_valid_trials}) cannot exceed spotcheck.k ({self.k})"
            )
        return self


class FrontierConfig(_Section):
    """Following the solver as it improves: label staleness, drift re-measurement, primary refresh."""

    staleness: Literal["keep_last", "half_life"] = Field(
        default="keep_last", description="how labels of older solver versions count (docs/FRONTIER.md)")
    keep_versions: int = Field(default=3, ge=1, description="keep_last: labels of this many newest versions count "
                               "(3: 2-5 measure alike in benchmarks/staleness.py; docs/FRONTIER.md)")
    half_life_versions: float = Field(default=1.0, gt=0, description="half_life: weight halves every this many "
                                      "versions")
    min_weight: float = Field(default=0.2, ge=0, lt=1, description="half_life: lighter labels are dropped")
    drift_budget_share: float = Field(default=0.25, ge=0, le=1, description="share of each cycle's spot-check "
                                      "budget spent re-measuring labelled tasks on a new solver version")
    drift_per_stratum: int = Field(default=8, ge=1, description="tasks re-measured per old-version stratum "
                                   "(too easy / in band / too hard) after a new version")
    refresh_drift_threshold: float = Field(default=0.3, gt=0, le=1, description="drift score above which the "
                                           "primary probe is refreshed (champion/challenger)")
    refresh_every_labels: int = Field(default=0, ge=0, description="also refresh after this many new labels "
                                      "(of any version; 0: only on drift)")
    refresh_holdout_share: float = Field(default=0.25, gt=0, lt=1, description="newest labels held out to "
                                         "compare challenger and champion")
    refresh_min_labels: int = Field(default=32, ge=8, description="usable labels needed before a refresh")
    refresh_every_trainer_labels: int = Field(default=128, ge=0, description="following a trainer "
                                              "(solver.follow): refresh the primary probe after this many of its "
                                              "new labels (0: only on drift)")
    refresh_trainer_label_window: int = Field(default=0, ge=0, description="following a trainer "
                                              "(solver.follow): a primary refresh trains and judges on the most "
                                              "recent N of its labels only (0: every usable label; 256 measured no "
                                              "different from 0, benchmarks/results/follow_trainer_label_window)")
    trainer_band_lead: int | Literal["auto"] = Field(
        default="auto", description="following a trainer (solver.follow): a primary refresh counts its labels in "
        "band when the solve count lies this many solves below spotcheck.band_lo-band_hi (each end floored at 0): "
        "a solver that learns while tasks wait is aimed ahead of, not at (0: the band itself; at most "
        "spotcheck.band_hi). \"auto\" (the default; 0 for domain swe, unmeasured there): 1 while more of the "
        "trainer's newest acks lie above the band than below it, else 0. Measured: auto +0.08 in band for a fast "
        "synthetic learner, no harm for slow or static ones; a fixed 1 gains more for the fast learner but starved "
        "a weak LM trainer that solves most tasks 0 of 8 (docs/FRONTIER.md, 'Aiming ahead')")

    @field_validator("trainer_band_lead", mode="before")
    @classmethod
    def _lead(cls, value: Any) -> Any:
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            return value
        raise ValueError(f"must be a number of solves (0, 1, …) or \"auto\", got {value!r}")


class RLConfig(_Section):
    """GRPO with a LoRA adapter (paper Appendix 16 where given; CPU-friendly defaults)."""

    steps_per_chunk: int = Field(default=10, ge=1)
    learning_rate: float = Field(default=1e-3, gt=0)
    kl_beta: float = Field(default=0.04, ge=0)
    num_generations: int = Field(default=8, ge=2)
    batch_size: int = Field(default=16, ge=1)
    lora_rank: int = Field(default=16, ge=1)
    lora_alpha: int = Field(default=32, ge=1)
    lora_dropout: float = Field(default=0.05, ge=0, lt=1)
    reward: Literal["hard_gate", "soft_gate", "probe_only"] = "hard_gate"
    invalid_floor_margin: float = Field(default=1.0, gt=0, description="floor = min probe logit − margin")
    use_vllm: bool = False
    bf16: bool = False
    diversity_weight: float = Field(default=2.0, ge=0, description="weight of the repetition penalty (in "
                                    "[0, 1]; see rl.diversity_measure) subtracted from valid completions' reward "
                                    "(0: off; 2 is the measured default, #34 long_run run 9; see "
                                    "curriculum.reward.novelty and docs/RL.md)")
    diversity_archive_size: int = Field(default=1024, ge=1, description="recently emitted tasks the diversity "
                                        "penalty compares against")
    diversity_topic_quota: float = Field(default=0.25, gt=0, le=1, description="largest share of the diversity "
                                         "archive one topic may hold")
    diversity_measure: Literal["jaccard", "self_bleu"] = Field(
        default="self_bleu", description="the penalty: 'self_bleu' (per-task Self-BLEU-3 against the reward call, "
        "the archive and the rollout window; the measured one) or 'jaccard' (3-gram Jaccard within the GRPO group "
        "and to the archive; the original, ~30× weaker on arith)")
    diversity_rollout_window: int = Field(default=512, ge=0, description="measure 'self_bleu': recent valid "
                                          "completions the penalty also compares against (0: none)")
    topic_share_weight: float = Field(default=1.0, ge=0, description="weight of the topic-share penalty (in [0, "
                                      "1]: a topic's share of the recent window above rl.topic_share_target) "
                                      "subtracted from valid completions' reward (0: off; "
                                      "curriculum.reward.topic_share, docs/RL.md)")
    topic_share_target: float = Field(default=0.15, gt=0, lt=1, description="share of the recent window a topic "
                                      "may hold before its tasks are penalised")
    topic_share_window: int = Field(default=512, ge=1, description="recent valid completions (rollouts and cycle "
                                    "samples) the topic shares are counted over")

    @model_validator(mode="after")
    def _divisible(self) -> RLConfig:
        if self.batch_size % self.num_generations:
            raise ValueError(
                f"rl.batch_size ({self.batch_size}) must be a multiple of rl.num_generations "
                f"({self.num_generations}); e.g. set rl.batch_size = {self.num_generations * 2}"
            )
        return self


class EmissionConfig(_Section):
    """Which tasks go to the downstream queue."""

    min_probability: float = Field(default=0.5, ge=0, le=1)
    max_topic_share: float = Field(default=0.4, gt=0, le=1)
    top_share: float = Field(default=1.0, gt=0, le=1, description="an unverified task is emitted only when its "
                             "probe probability is also within this top share of the current cycle's valid samples "
                             "(1: off, min_probability alone); verified in-band tasks always qualify "
                             "(docs/OPERATIONS.md)")
    high_water_mark: int = Field(default=10_000, ge=1)
    max_attempts: int = Field(default=5, ge=1)
    unverified_grace_s: float = Field(default=3600.0, ge=0, description="while spot-check labels are missing "
                                      "(budget spent, no worker, broker down) emit on probe predictions for at most "
                                      "this long, then only spot-check-verified tasks")
    verified_window_cycles: int = Field(default=30, ge=1, description="verified utility (next to predicted "
                                        "utility in the cycle summary, /v1/status and the dashboard) is the in-band "
                                        "share of the spot-check labels of probe-high tasks sampled in the last this "
                                        "many cycles; 'unverified' when there is none")
    explore_share: float = Field(default=0.15, ge=0, lt=1, description="following a trainer (solver.follow): "
                                 "this share of the emitted tasks is drawn unfiltered (message \"explore\": true) so "
                                 "the probes learn from unbiased labels; a share of what the probes select, never a "
                                 "filler when they select nothing")
    replay_max: int = Field(default=0, ge=0, description="following a trainer (solver.follow): a task whose ack by "
                            "the trainer's current version landed in band is served again (message \"replay\": "
                            "true, \"replays\": n), at most this many times, while its newest ack stays in band "
                            "(frontier replay; 0, the default: off — measured, it did not raise the served in-band "
                            "share, docs/FRONTIER.md)")
    stall_cycles: int = Field(default=10, ge=0, description="this many cycles in a row without an emitted task "
                              "(queue not full) raise the emission_stalled degraded reason and alert, and spend the "
                              "spot-check allowance on the top-scored waiting candidates (following a trainer: serve "
                              "the top-scored quarter below the bar while its queue is empty, message \"below_bar\": "
                              "true); 0 disables the check")


class HealthConfig(_Section):
    """Always-on health (#34): when the probes are suspect of being reward-hacked (daemon/loop/hacking.py).

    Conservative defaults (each signal must be far off before the daemon stops trusting its probes), to be
    tuned from benchmarks/long_run.py; docs/OPERATIONS.md explains each."""

    suspect_topic_js: float = Field(default=0.5, gt=0, le=1, description="the probes are suspect when the JS "
                                    "divergence (bits) of a cycle's valid-task topics from the run's first sampled "
                                    "cycle exceeds this (1: never)")
    suspect_top_topic_share: float = Field(default=0.8, gt=0, le=1, description="… or one topic holds more than "
                                           "this share of a cycle's valid tasks (1: never)")
    suspect_gap: float = Field(default=0.3, gt=0, le=1, description="… or predicted utility exceeds verified "
                               "utility by more than this (1: never)")
    suspect_min_labels: int = Field(default=10, ge=1, description="labels the verified utility needs before the "
                                    "gap counts")
    suspect_hold_cycles: int = Field(default=5, ge=1, description="cycles the probes stay suspect after the last "
                                     "signal tripped (no flapping); meanwhile suspect_response applies")
    suspect_baseline_cycles: int = Field(default=5, ge=1, description="sampled cycles summed into the topic "
                                         "baseline the JS divergence is measured against (started again when the "
                                         "probes change)")
    suspect_response: Literal["tighten", "verified_only"] = Field(
        default="tighten", description="emission while the probes are suspect: 'tighten' keeps emitting with the "
        "probability threshold raised by suspect_raise; 'verified_only' emits spot-check-verified tasks only (the "
        "long run measured it starving supply: ~0.3 tasks/cycle)")
    suspect_raise: float = Field(default=0.1, ge=0, le=1, description="'tighten': added to "
                                 "emission.min_probability while the probes are suspect")
    rollback_validity: float = Field(default=0.3, ge=0, le=1, description="roll the generator back to its last "
                                     "healthy checkpoint when sample validity stays below this (0: never)")
    rollback_top_topic_share: float = Field(default=0.45, gt=0, le=1, description="… or when the top-topic share "
                                            "of the sample stays above this (1: never; the reward's topic-share "
                                            "term cannot pull a collapsed policy back, a rollback can)")
    rollback_novelty: float = Field(default=0.1, ge=0, le=1, description="… or when the share of the sample's "
                                    "valid tasks that are new to the store stays below this (0: never; a generator "
                                    "that repeats stored tasks supplies nothing, however valid)")
    rollback_cycles: int = Field(default=3, ge=1, description="… for this many cycles in a row")
    escalate_after_cycles: int = Field(default=20, ge=0, description="a mitigation an alert applied whose metric "
                                       "is not back past the rule's threshold after this many cycles escalates: to a "
                                       "generator rollback, then to pausing emission until it is (0: never)")
    healthy_validity: float = Field(default=0.9, gt=0, le=1, description="a cycle with at least this validity "
                                    "marks its generator checkpoint healthy (kept from pruning: the rollback target)")
    healthy_top_topic_share: float = Field(default=0.3, gt=0, le=1, description="… when its top-topic share is "
                                           "also at most this (1: validity alone)")
    healthy_novelty: float = Field(default=0.3, ge=0, le=1, description="… and its share of new valid tasks at "
                                   "least this (0: not judged)")
    max_paused_cycles: int = Field(default=30, ge=0, description="an emission pause an escalation set ends after "
                                   "this many cycles, with a warning and an alert (0: never)")


class DaemonConfig(_Section):
    """The driver: cycle cadence, leadership, lifecycle."""

    sample_size: int = Field(default=128, ge=1, description="fresh tasks sampled per cycle")
    sample_size_max: int | None = Field(default=None, ge=1, description="while trainers drain the queue, a cycle "
                                        "samples up to this many (cap − tasks ready, never below sample_size); "
                                        "default 4 × sample_size; set it to sample_size to turn demand off")
    emit_rollouts: bool = Field(default=False, description="the RL chunk's rollouts (already generated and "
                                "scored by the reward) join the cycle's emission candidates beside the sample "
                                "(off: measured no help to a waiting trainer, docs/OPERATIONS.md)")
    reference_share: float = Field(default=0.0, ge=0, le=1, description="beside each cycle's sample, this share "
                                   "of it more candidates from the untrained generator (the policy's adapter off): "
                                   "a distribution RL has not narrowed, for emission to pick from when the solver "
                                   "moves faster than the generator (docs/OPERATIONS.md; 0: off)")
    tick_interval_s: float = Field(default=0.5, gt=0, description="APScheduler interval of the driver job")
    retrain_min_false_positives: int = Field(default=8, ge=0, description="0 disables FP-triggered retrains")
    emit_lookback_cycles: int = Field(default=3, ge=1, description="cycles whose tasks may still be emitted")
    heartbeat_s: float = Field(default=5.0, gt=0)
    heartbeat_stale_s: float = Field(default=30.0, gt=0, description="`propel check` and /healthz fail when "
                                     "the heartbeat is older than this")
    worker_silence_s: float = Field(default=600.0, gt=0, description="spot-checks pending with no solver trial "
                                    "landing for this long → degraded (spotcheck_workers_silent)")
    lease_ttl_s: float = Field(default=30.0, gt=0, description="lease-row expiry (SQLite leadership)")
    standby: Literal["wait", "refuse"] = Field(default="wait", description="when another daemon leads")
    shutdown_deadline_s: float = Field(default=60.0, gt=0)
    serve_api: bool = Field(default=True, description="start the HTTP API inside `propel run`")
    trim_heap: bool = Field(default=True, description="at the end of every cycle, hand the allocator's free pages "
                            "back to the OS (glibc malloc_trim; a no-op elsewhere). Off, RSS keeps the peak of "
                            "every phase's transient memory: +14-16 % over 240 cycles of the embedded run (#34)")
    torch_threads: int = Field(default=1, ge=0, description="CPU only: torch intra-op threads of the model work "
                               "(RL, sampling, probe features); 0 = torch's default, one per core. One by default: "
                               "the models are tiny, and on a shared 2-core machine a second thread made the first "
                               "probe many times slower (README, 'The first run')")

    @model_validator(mode="after")
    def _beats(self) -> DaemonConfig:
        if self.heartbeat_s * 2 > self.heartbeat_stale_s:
            raise ValueError("daemon.heartbeat_stale_s must be at least twice daemon.heartbeat_s, or a live daemon "
                             "looks stale between heartbeats")
        if self.heartbeat_s * 2 > self.lease_ttl_s:
            raise ValueError("daemon.lease_ttl_s must be at least twice daemon.heartbeat_s, or a live leader "
                             "loses its lease between heartbeats")
        return self


class AlertsConfig(_Section):
    """Collapse-metric sample size, alert rules (``[[alerts.rules]]``) and the webhook sink."""

    sample_size: int = Field(default=96, ge=8, description="fixed sample for Self-BLEU-3 / Distinct-3 "
                             "(part of the metric's definition: Self-BLEU grows with sample size)")
    webhook_url: str | None = Field(default=None, description="POST alert JSON here (retried, never blocks)")
    rules: tuple[AlertRule, ...] = Field(default=DEFAULT_RULES, description="see docs/OPERATIONS.md")

    @field_validator("rules")
    @classmethod
    def _unique_rules(cls, value: tuple[AlertRule, ...]) -> tuple[AlertRule, ...]:
        return AlertRules(rules=value).rules

    @field_validator("webhook_url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("alerts.webhook_url must start with http:// or https://")
        return value or None


class ApiConfig(_Section):
    """The HTTP API (pull/ack, health, metrics, dashboard)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8787, ge=0, le=65535)
    token: str | None = Field(default=None, repr=False)
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    work_nice: int = Field(default=0, description="inside `propel run`: the training work's threads run this much "
                           "nicer than the API's (Linux; 0 = off, 19 = lowest; off by default: no API gain measured, "
                           "docs/QUEUE.md)")

    yield_to_api: bool = Field(default=True, description="inside `propel run`: training work pauses (between "
                               "forward passes and phases) while trainers use the queue API (docs/QUEUE.md)")
    yield_idle_ms: int = Field(default=100, description="the queue API counts as idle after this many ms "
                               "without a request; held training resumes then")
    yield_max_s: float = Field(default=2.0, description="longest hold of the training in a row; then it runs "
                               "its yield_floor share before yielding again")
    yield_floor: float = Field(default=0.2, description="share of wall time the training keeps under API load "
                               "that never pauses (0 < floor < 1)")

    @field_validator("work_nice")
    @classmethod
    def _nice_range(cls, value: int) -> int:
        if not 0 <= value <= 19:
            raise ValueError(f"{value} is outside 0..19: set api.work_nice between 0 (off, the default) and 19")
        return value

    @field_validator("yield_idle_ms")
    @classmethod
    def _idle_range(cls, value: int) -> int:
        if not 1 <= value <= 60_000:
            raise ValueError(f"{value} is outside 1..60000: set api.yield_idle_ms to e.g. 100 (a pause between a "
                             "trainer's requests longer than this lets the training run)")
        return value

    @field_validator("yield_max_s")
    @classmethod
    def _max_range(cls, value: float) -> float:
        if not 0 < value <= 3600:
            raise ValueError(f"{value} is outside (0, 3600]: set api.yield_max_s to e.g. 2.0 seconds (to stop "
                             "yielding, set api.yield_to_api = false)")
        return value

    @field_validator("yield_floor")
    @classmethod
    def _floor_range(cls, value: float) -> float:
        if not 0 < value < 1:
            raise ValueError(f"{value} is outside (0, 1): set api.yield_floor to e.g. 0.2 (to stop yielding, set "
                             "api.yield_to_api = false)")
        return value


class ArtifactsConfig(_Section):
    """The content-addressed artifact store (probes, generator checkpoints, local reference models)."""

    url: str = Field(default="", description="'' → 'db' with a broker, <data_dir>/artifacts without one; "
                     "'db' (the store database: workers need only the database and broker URLs), a local "
                     "path / file:// URL, or any fsspec URL (s3://bucket/prefix with s3fs installed, gs://…)")

    @field_validator("url")
    @classmethod
    def _known_protocol(cls, url: str) -> str:
        if "://" in url and not url.startswith("file://"):
            import fsspec

            protocol = url.split("://", 1)[0]
            if protocol not in fsspec.available_protocols():
                raise ValueError(f"artifacts.url protocol {protocol!r} is not an fsspec protocol; use 'db', a "
                                 "local path, or e.g. s3://bucket/prefix")
        return url


class PropelConfig(_Section):
    """The whole service configuration."""

    data_dir: Path = Field(default=Path(".propel"), description="embedded database, models, artifacts")
    run_name: str = Field(default="default", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    seed: int = 0
    store: StoreConfig = StoreConfig()
    broker: BrokerConfig = BrokerConfig()
    domain: DomainConfig = DomainConfig()
    generator: GeneratorConfig = GeneratorConfig()
    reference: ReferenceConfig = ReferenceConfig()
    probes: ProbesConfig = ProbesConfig()
    solver: SolverConfig = SolverConfig()
    spotcheck: SpotCheckConfig = SpotCheckConfig()
    rl: RLConfig = RLConfig()
    emission: EmissionConfig = EmissionConfig()
    alerts: AlertsConfig = AlertsConfig()
    api: ApiConfig = ApiConfig()
    daemon: DaemonConfig = DaemonConfig()
    health: HealthConfig = HealthConfig()
    frontier: FrontierConfig = FrontierConfig()
    artifacts: ArtifactsConfig = ArtifactsConfig()

    @model_validator(mode="before")
    @classmethod
    def _domain_defaults(cls, data: Any) -> Any:
        """Fill what a domain needs and the file leaves unset from :data:`DOMAIN_DEFAULTS`."""
        if not isinstance(data, dict):
            return data
        domain = data.get("domain")
        name = domain.get("name") if isinstance(domain, dict) else getattr(domain, "name", None)
        defaults = DOMAIN_DEFAULTS.get(str(name), {})
        if not defaults:
            return data
        merged = dict(data)
        for section, values in defaults.items():
            given = merged.get(section, {})
            if isinstance(given, dict):  # a section passed as a model instance is taken as it is
                inner = dict(given)
                for key, value in values.items():
                    if isinstance(value, dict) and isinstance(inner.get(key), dict):
                        inner[key] = {**value, **inner[key]}  # domain.options: merged key by key
                    else:
                        inner.setdefault(key, value)
                merged[section] = inner
        return merged

    @model_validator(mode="after")
    def _cross(self) -> PropelConfig:
        if self.alerts.sample_size > self.daemon.sample_size:
            raise ValueError(
                f"alerts.sample_size ({self.alerts.sample_size}) must not exceed daemon.sample_size "
                f"({self.daemon.sample_size}): the diversity metrics need a full fixed-size sample each cycle")
        if self.solver.backend == "synthetic" and self.domain.name != "arith":
            raise ValueError(
                "solver.backend = 'synthetic' only works with domain.name = 'arith'; "
                "use 'openai' (a vLLM/SGLang server) or 'hf' for other domains"
                + (" ('synthetic-swe' for swe)" if self.domain.name == "swe" else "")
            )
        if self.solver.backend in ("synthetic-swe", "swe-agent") and self.domain.name != "swe":
            raise ValueError(f"solver.backend = '{self.solver.backend}' only works with domain.name = 'swe'")
        lead = self.frontier.trainer_band_lead
        if isinstance(lead, int) and lead > self.spotcheck.band_hi:
            raise ValueError(f"frontier.trainer_band_lead ({self.frontier.trainer_band_lead}) must not exceed "
                             f"spotcheck.band_hi ({self.spotcheck.band_hi}): a lead of band_hi already lowers the "
                             "band to 0-0 solves")
        if self.generator.agent.enabled and self.domain.name != "swe":
            raise ValueError("generator.agent (agent-written bugs) only works with domain.name = 'swe'")
        return self

    @property
    def database_url(self) -> str:
        """The store URL with the embedded default resolved."""
        return self.store.url or f"sqlite:///{(self.data_dir / 'propel.db').as_posix()}"

    @property
    def artifacts_url(self) -> str:
        """``artifacts.url`` with its default resolved: the database with a broker, a local directory without."""
        if self.artifacts.url:
            return self.artifacts.url
        return str((self.data_dir / "artifacts").absolute()) if self.broker.embedded else "db"

    @property
    def reference_model(self) -> str:
        return self.reference.model or self.generator.model


#: What a domain needs where the file says nothing (applied before validation, so a key the file sets
#: wins). ``swe`` on CPU: the tiny spec generator, the synthetic SWE solver, the SWE band (k = 3,
#: in band at 1–2 solves of ≥ 2 valid trials) and small samples, because every new task costs a
#: verified episode (~2.4 s of sandboxed test runs) and every RL completion is verified too; probes
#: validate across repositories (a repository never on both sides) with a class-weighted loss (few
#: labelled bugs: downsampling would throw most of them away).
DOMAIN_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "swe": {
        "domain": {"options": {"prompt_style": "tiny"}},
        "generator": {"model": "bootstrap:swe", "max_new_tokens": 96},
        "solver": {"backend": "synthetic-swe"},
        "spotcheck": {"k": 3, "band_lo": 1, "band_hi": 2, "min_valid_trials": 2, "budget_per_cycle": 8,
                      "budget_per_hour": 256},
        "frontier": {"trainer_band_lead": 0},  # no lead measured on SWE: one solve of k = 3 is a third of the range
        "probes": {"train_samples": 64, "validation": "grouped", "balance": "weighted"},
        "rl": {"steps_per_chunk": 4, "batch_size": 8, "num_generations": 4},
        "daemon": {"sample_size": 32},
        "alerts": {"sample_size": 24},
    },
}


def with_domain(cfg: PropelConfig, name: str) -> PropelConfig:
    """``cfg`` with ``domain.name = name``: what the file set is kept, the domain's defaults fill the rest
    (``propel run --domain swe``); raises :class:`ConfigError`."""
    data = cfg.model_dump(exclude_unset=True)
    domain = data.get("domain", {})
    # options the file gave for another named domain do not carry over; options with no name do
    data["domain"] = {"name": name} if domain.get("name", name) != name else {**domain, "name": name}
    try:
        return PropelConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"--domain {name}", _problems(err)) from None


#: Keys that were accepted once and did nothing; a config naming one fails with what replaced it.
REMOVED_KEYS: dict[str, str] = {
    "generator.revision": "removed (it was never applied): pin a revision by pointing generator.model at a "
                          "local snapshot directory (`huggingface-cli download MODEL --revision REV --local-dir DIR`)",
    "reference.revision": "removed (it was never applied): pin a revision by pointing reference.model at a "
                          "local snapshot directory; the probes' reference fingerprint hashes the weights anyway",
    "emission.default_lease_s": "removed (it was never applied): the lease duration is the consumer's: "
                                "`lease_s` in POST /v1/tasks/lease, `propel tasks pull --lease-s`, "
                                "PropelClient.lease(lease_s=...)",
}


class ConfigError(Exception):
    """A configuration that cannot be used; ``problems`` holds ``(key, message)`` pairs."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = [f"{source}: {len(problems)} configuration error(s)"]
        lines += [f"  {key}: {msg}" for key, msg in problems]
        super().__init__("\n".join(lines))


def _mask(url: str) -> str:
    """Hide the password of a URL (``user:***@host`` and a ``password=`` query parameter)."""
    import re

    url = re.sub(r"([?&]password=)[^&#]*", r"\1***", url, flags=re.IGNORECASE)
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url


mask_url = _mask


def mask_secrets(text: str) -> str:
    """Mask ``user:password@`` in any URL inside free ``text`` (error messages)."""
    import re

    return re.sub(r"(\w+://[^:/@\s]*):[^@\s]+@", r"\1:***@", text)


def _apply_env(data: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for var, (section, key) in ENV_OVERRIDES.items():
        if env.get(var):
            sect = merged.setdefault(section, {})
            if isinstance(sect, dict):
                sect[key] = env[var]
    if env.get("PROPEL_DATA_DIR"):
        merged["data_dir"] = env["PROPEL_DATA_DIR"]
    return merged


def _problems(err: ValidationError) -> list[tuple[str, str]]:
    out = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden" and key in REMOVED_KEYS:
            msg = REMOVED_KEYS[key]
        elif e["type"] == "extra_forbidden":
            msg = "unknown key: remove it or check its spelling (see examples/*.toml)"
        elif e["type"] == "missing":
            msg = "required value is missing"
        out.append((key, msg))
    return out


def config_from_mapping(
    data: Mapping[str, Any], source: str = "<config>", env: Mapping[str, str] | None = None
) -> PropelConfig:
    """Validate a mapping (a parsed TOML document) with environment overrides applied."""
    merged = _apply_env(dict(data), os.environ if env is None else env)
    try:
        return PropelConfig.model_validate(merged)
    except ValidationError as err:
        raise ConfigError(source, _problems(err)) from None


def load_config(path: Path | None = None, env: Mapping[str, str] | None = None) -> PropelConfig:
    """Load and validate ``path`` (``None`` → defaults only); raises :class:`ConfigError`."""
    if path is None:
        return config_from_mapping({}, "<defaults>", env)
    source = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(source, [("(file)", "no such file")]) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as err:
        raise ConfigError(source, [("(file)", f"cannot read: {err}")]) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(source, [("(syntax)", f"invalid TOML: {err}")]) from None
    return config_from_mapping(data, source, env)

"""The toy table's rows and their daemon configs (``benchmarks/toy_propel.py`` and the benchmarks built on it):
row names, settings, what is built once per bootstrap, each row's run config and probe pairs. Kept here,
apart from the benchmark's runs, so tests check the rows' configs without importing a benchmark."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.config import PropelConfig
from probes import FeatureSpec, Probe
from probes.band import Band

#: the row issue #22 item 5 adds: PROPEL on a probe trained on an actively labelled corpus
ACTIVE_ROW = "PROPEL (active corpus)"

ROWS = ("Base", "PROPEL", "PROPEL-WCO", "PROPEL + co-evolution", "PROPEL-linear", "PROPEL-linear + co-evolution",
        "SIL")
#: rows of issue #22, run on request (``--rows``): the PROPEL pair with ``rl.diversity_weight`` on for the whole run
DIVERSITY_ROWS = ("PROPEL + diversity", "PROPEL + co-evolution + diversity")
#: run on request too: issue #22 item 5's ACTIVE_ROW, PROPEL on a probe trained on an actively labelled corpus
EXTRA_ROWS = (*DIVERSITY_ROWS, ACTIVE_ROW)
COLUMNS = ("utility_mean", "utility_std", "valid_mean", "self_bleu3_mean", "distinct3_mean", "top_topic_mean",
           "online_solver_trials", "offline_solver_trials", "wall_s")
SPEC_A = FeatureSpec(layer=-1, pooling="mean_full")
SPEC_B = FeatureSpec(layer=3, pooling="last_token")
BAND = Band(k=8, lo=1, hi=3, min_valid_trials=6)


@dataclass(frozen=True)
class Settings:
    seeds: int = 3
    steps: int = 60
    corpus: int = 1536
    eval_n: int = 512
    spot_n: int = 256
    spot_budget: int = 128
    bootstrap_steps: int | None = None
    batch: int = 16
    group: int = 8
    linear_steps: int = 180
    bootstraps: int = 1
    diversity_weight: float = 1.0
    diversity_measure: str = "self_bleu"  # rl.diversity_measure of the diversity rows (toy_propel.json: "jaccard")
    active_share: float = 0.4  # the active corpus's solver trials, as a share of the uniform corpus's

    @staticmethod
    def quick() -> Settings:
        return Settings(seeds=3, steps=4, corpus=256, eval_n=64, spot_n=64, spot_budget=32, bootstrap_steps=60,
                        batch=8, group=4, linear_steps=4)


@dataclass
class Shared:
    """Built once: the generator, the probes (first-probe code), the offline trial count."""

    gen_path: Path
    fingerprint: str
    probes: dict[str, Probe]
    probe_metrics: dict[str, dict[str, Any]]
    corpus_trials: int
    bootstrap_validity: float
    active: ActiveCorpus | None = None


@dataclass(frozen=True)
class ActiveCorpus:
    """The active row's probe (``probes["mlp_active"]``), its corpus's solver trials and how it was built."""

    solver_trials: int
    info: dict[str, Any]


def active_probes_section(shared: Shared, settings: Settings) -> dict[str, Any]:
    """The active row's ``probes`` settings: active labelling of ``active_share`` of the uniform corpus's
    trials (in tasks of ``k`` trials; at least the config's minimum of 16)."""
    return {"corpus_labelling": "active", "train_samples": max(16, round(settings.active_share
                                                                         * shared.corpus_trials / BAND.k))}


def row_config(shared: Shared, settings: Settings, root: Path, run: str, seed: int, chunk: int,
               rl: dict[str, Any] | None = None, probes: dict[str, Any] | None = None) -> PropelConfig:
    """The daemon config of one row's run: embedded store under ``root/run``, synthetic solver; ``rl``
    and ``probes`` override settings of those sections (e.g. ``diversity_weight``, ``corpus_labelling``)."""
    return PropelConfig.model_validate({
        "data_dir": str(root / run), "run_name": run, "seed": seed,
        "generator": {"model": str(shared.gen_path)}, "domain": {"name": "arith"},
        "probes": {"layer": SPEC_A.layer, "pooling": SPEC_A.pooling, "architecture": "mlp", "ensemble": "min",
                   **(probes or {})},
        "solver": {"backend": "synthetic"},
        "spotcheck": {"k": BAND.k, "band_lo": BAND.lo, "band_hi": BAND.hi, "min_valid_trials": BAND.min_valid_trials,
                      "budget_per_cycle": settings.spot_budget, "budget_per_hour": max(512, settings.spot_budget),
                      "pace": False,  # compressed time: every cycle gets its spot_budget, as the toy table was run
                      # all k trials, as the uniform corpus (label_corpus) and the published toy table count
                      # them; sequential labelling's saving is measured in benchmarks/active_labelling.py
                      "sequential": False},
        "rl": {"steps_per_chunk": chunk, "num_generations": settings.group, "batch_size": settings.batch,
               "lora_rank": 8, "lora_alpha": 16, "lora_dropout": 0.0,
               "diversity_weight": 0.0,  # the paper's rows: probe reward alone; the diversity rows set it (#22)
               **(rl or {})},
        "daemon": {"sample_size": settings.spot_n, "serve_api": False},
        "alerts": {"sample_size": min(96, settings.spot_n)},
    })


@dataclass(frozen=True)
class PairSpec:
    """A single-probe row and its co-evolution row: probes, steps, config overrides, offline trials."""

    names: tuple[str, str]
    members: list[str]
    steps: int
    offline: int
    rl: dict[str, Any] | None = None
    probes: dict[str, Any] | None = None


def pair_specs(shared: Shared, settings: Settings) -> list[PairSpec]:
    """Every single-probe row (with its co-evolution row where it has one: the second name)."""
    specs = [PairSpec(("PROPEL", "PROPEL + co-evolution"), ["mlp"], settings.steps, shared.corpus_trials),
             PairSpec(("PROPEL-linear", "PROPEL-linear + co-evolution"), ["linear"], settings.linear_steps,
                      shared.corpus_trials),
             PairSpec(DIVERSITY_ROWS, ["mlp"], settings.steps, shared.corpus_trials,
                      rl={"diversity_weight": settings.diversity_weight,
                          "diversity_measure": settings.diversity_measure})]
    if shared.active is not None:
        specs.append(PairSpec((ACTIVE_ROW, ""), ["mlp_active"], settings.steps, shared.active.solver_trials,
                              probes=active_probes_section(shared, settings)))
    return specs


def run_name(row: str, seed: int) -> str:
    """A row's run name (the config's pattern: letters, digits, ``_.-``)."""
    return re.sub(r"[^a-z0-9_.-]+", "-", row.lower().replace(" + ", "-")).strip("-") + f"-{seed}"

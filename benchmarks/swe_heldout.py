"""PROPEL vs base on held-out SWE repositories: share of valid and in-band bugs (issue #21).

SYNTHETIC SOLVER: every label comes from the synthetic SWE solver (``synthetic:swe-logistic``, a benchmark
instrument: success probability logistic in the bug's operator, edit size and failing-test count; a success's
reference fix is really graded by the suite), k = 3, SWE band (in band at 1–2 solves of ≥ 2 valid trials).

The product's code path, with repo-disjoint splits of the registry (``propel swe repos``):

1. **Generator**: ``bootstrap:swe`` pretrained on the spec lines of **all** usable repositories
   (``split = None``: like an LLM pretrained on public code that includes the held-out projects).
2. **Probe**: base-policy samples with tiny prompts (``tiny-func``: ``BUG: REPO FILE::FUNCTION ``, the
   generator writes ``OPERATOR SITE``; ``--prompt-style tiny-repo``: ``BUG: REPO ``) naming **probe-train**
   repositories, verified (``SweDomain.validate_batch``) and labelled
   (:func:`curriculum.probing.first_probe.label_corpus`), features of the frozen reference (the bootstrapped
   generator, the daemon's CPU reference) at the configured layer and pooling, fitted by
   :func:`probes.fit.fit_probe` as the SWE defaults do (mlp, class-weighted, grouped by repository).
3. **RL** per seed: a run store per row (:func:`daemon.service.lifecycle.open_run`), the probe registered as
   its primary (:func:`curriculum.probing.first_probe.register_primaries`), the daemon's engine
   (:func:`daemon.service.engine.build_engine`: hard-gate reward = verifier validity gate + probe logit,
   GRPO + LoRA chunk) on the same style's prompts naming **rl-train** repositories.
4. **Evaluation** (solver only, never the probe): base and PROPEL generators sample ``eval_n`` completions of
   the same style's prompts naming **held-out** repositories (same sampling seed per pair), evaluated by
   :func:`curriculum.probing.evaluation.evaluate_texts`; also on rl-train prompts (``train_eval_n``) for reference.

Verdicts are memoised in the SWE cache's task memo (``<cache>/tasks``), so repeated bugs cost no suite run.

    propel swe fetch
    python -m benchmarks.swe_heldout [--seeds 2] [--steps 12] [--eval-n 48] [--quick]
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import click
import torch

from benchmarks._common import RESULTS, write_result
from curriculum.common.solver_api import Sampling
from curriculum.domains.base import generation_text
from curriculum.domains.swe.domain import SWE_BAND, SweDomain, swe_band
from curriculum.domains.swe.synthetic import SyntheticSweSolver
from curriculum.probing.evaluation import EvaluationResult, evaluate_texts
from curriculum.probing.first_probe import distinct_valid_tasks, label_corpus, register_primaries, task_groups
from curriculum.rl.bootstrap import bootstrap, load_bootstrapped
from curriculum.rl.sampling import sample_completions
from daemon.config import PropelConfig
from daemon.service.engine import build_engine
from daemon.service.lifecycle import open_run
from daemon.service.settings import build_artifacts
from probes import FeatureExtractor, FeatureSpec, FrozenReference, Probe, TrainConfig
from probes.fit import fit_probe

log = logging.getLogger("benchmarks.swe_heldout")
SPEC = FeatureSpec(layer=-1, pooling="mean_full")
SYNTHETIC_NOTE = ("SYNTHETIC SOLVER: labels from synthetic:swe-logistic (a benchmark instrument, not a model: "
                  "logistic in operator, edit size and failing-test count), k=3, SWE band 1-2 of >= 2 valid trials")
MAX_NEW_TOKENS = 96


@dataclass(frozen=True)
class Settings:
    seeds: int = 2
    steps: int = 16
    probe_samples: int = 96
    eval_n: int = 96
    train_eval_n: int = 24
    batch: int = 8
    group: int = 4
    #: the daemon's SWE recipe trains 400 steps; on all 9 usable repositories' spec spaces that leaves about
    #: half of the samples applicable, so the benchmark's generator is pretrained longer (same recipe otherwise)
    bootstrap_steps: int = 1200
    #: ``tiny-func`` (the prompt names the function, the generator writes the bug) or ``tiny-repo`` (the
    #: prompt names the repository, the generator writes the function too: the result at 503f441)
    prompt_style: str = "tiny-func"

    @staticmethod
    def quick() -> Settings:
        return Settings(seeds=1, steps=2, probe_samples=32, eval_n=8, train_eval_n=4, batch=4, group=2,
                        bootstrap_steps=400)


def split_domain(cache: Path, split: str | None, prompt_style: str) -> SweDomain:
    return SweDomain(cache, split=split, runner="auto", prompt_style=prompt_style)


def policy_sample(model: Any, tokenizer: Any, domain: SweDomain, n: int, seed: int) -> list[str]:
    """``n`` generations of ``model`` on the domain's tiny prompts (what ``GeneratorTrainer.sample``
    does for the trainer's own domain; here for any split): completion with the prompt's repository joined."""
    prompts = domain.generator_prompts(n, seed)
    completions = sample_completions(model, tokenizer, prompts, seed, 1.0, 1.0, MAX_NEW_TOKENS)
    return [generation_text(domain, p, c) for p, c in zip(prompts, completions, strict=True)]


def train_probe(cache: Path, gen_path: Path, settings: Settings) -> tuple[Probe, FrozenReference, dict[str, Any]]:
    """The first probe on probe-train repositories' labelled base-policy bugs (first-probe code)."""
    domain = split_domain(cache, "probe-train", settings.prompt_style)
    model, tok = load_bootstrapped(gen_path)
    tasks = distinct_valid_tasks(domain, policy_sample(model, tok, domain, settings.probe_samples, seed=1))
    log.info("probe corpus: %d distinct valid bugs of %d samples; labelling k=3", len(tasks), settings.probe_samples)
    corpus = label_corpus(domain, SyntheticSweSolver(cache), tasks, swe_band(), Sampling(seed=1))
    reference = FrozenReference.load(str(gen_path))
    x = FeatureExtractor(reference).extract(corpus.texts, [SPEC])[SPEC]
    y = corpus.y
    training = {"rows": int(y.size), "positives": int(y.sum()), "offline_solver_trials": corpus.solver_trials,
                "repos": sorted(domain.usable_repos()), "split": "probe-train"}
    probe = fit_probe(x, y, reference=reference, spec=SPEC, band=swe_band(), arch="mlp", balance="weighted",
                      config=TrainConfig(seed=0), name="swe-heldout-primary", training=training,
                      groups=task_groups(domain, corpus.tasks))
    return probe, reference, {**training, "metrics": probe.metrics,
                              "per_repo": _count_by_repo([str(t.payload["repo"]) for t in corpus.tasks])}


def row_config(gen_path: Path, cache: Path, root: Path, seed: int, settings: Settings) -> PropelConfig:
    """The daemon config of one PROPEL row (``propel run --domain swe`` defaults, rl-train prompts)."""
    return PropelConfig.model_validate({
        "data_dir": str(root / f"propel-{seed}"), "run_name": f"propel-{seed}", "seed": seed,
        "generator": {"model": str(gen_path), "max_new_tokens": MAX_NEW_TOKENS},
        "domain": {"name": "swe", "options": {"cache_dir": str(cache), "split": "rl-train",
                                              "prompt_style": settings.prompt_style}},
        "probes": {"layer": SPEC.layer, "pooling": SPEC.pooling, "architecture": "mlp", "validation": "grouped",
                   "balance": "weighted"},
        "solver": {"backend": "synthetic-swe"},
        "spotcheck": {"k": SWE_BAND["k"], "band_lo": SWE_BAND["lo"], "band_hi": SWE_BAND["hi"],
                      "min_valid_trials": SWE_BAND["min_valid_trials"]},
        "rl": {"steps_per_chunk": settings.steps, "batch_size": settings.batch,
               "num_generations": settings.group},
        "daemon": {"serve_api": False},
    })


def never_stop() -> bool:
    return False


def train_propel(gen_path: Path, cache: Path, root: Path, probe: Probe, fingerprint: str, seed: int,
                 settings: Settings) -> tuple[Any, Any, dict[str, float]]:
    """One PROPEL run: the row's store, the probe as its primary, the daemon's engine, ``steps`` GRPO steps."""
    cfg = row_config(gen_path, cache, root, seed, settings)
    store, run_id = open_run(cfg)
    try:
        register_primaries(store, run_id, build_artifacts(cfg, store), [probe], Path(cfg.data_dir) / "probes",
                           fingerprint)
        engine = build_engine(cfg, store, run_id, say=log.info)
        stats = engine.rl_chunk(settings.steps, never_stop, 1.0)
    finally:
        store.dispose()
    return engine.trainer.model, engine.trainer.tokenizer, stats


def _count_by_repo(repos: list[str]) -> dict[str, int]:
    return {r: repos.count(r) for r in sorted(set(repos))}


def summary(result: EvaluationResult) -> dict[str, Any]:
    """Shares of valid and in-band bugs among all generations, in-band among valid, mean solve rate of the
    labelled bugs, and per repository (the spec line's first word)."""
    labelled = [o.label for o in result.outcomes if o.label is not None and o.label.in_band is not None]
    rates = [lab.solved / lab.valid_trials for lab in labelled]
    per_repo: dict[str, dict[str, int]] = {}
    for o in result.outcomes:
        row = per_repo.setdefault(o.text.split(" ", 1)[0], {"n": 0, "valid": 0, "in_band": 0})
        row["n"] += 1
        row["valid"] += int(o.valid)
        row["in_band"] += int(o.in_band)
    return {"n": result.n, "valid_share": round(result.validity, 4), "in_band_share": round(result.utility, 4),
            "in_band_of_valid": round(result.n_in_band / result.n_valid, 4) if result.n_valid else None,
            "mean_solve_rate": round(statistics.fmean(rates), 4) if rates else None,
            "solve_histogram": result.solve_histogram, "top_operator": result.top_topic,
            "top_operator_share": round(result.top_topic_share, 4), "distinct3": round(result.distinct3, 4),
            "solver_trials": result.solver_trials, "per_repo": per_repo}


def evaluate(model: Any, tokenizer: Any, domains: dict[str, SweDomain], ns: dict[str, int],
             solver: SyntheticSweSolver, seed: int) -> dict[str, Any]:
    """The generator on each split's prompts, evaluated by the solver only (same prompts and sampling seed
    for every generator)."""
    out: dict[str, Any] = {}
    for split, domain in domains.items():
        started = time.perf_counter()
        texts = policy_sample(model, tokenizer, domain, ns[split], 100 + seed)
        result = evaluate_texts(texts, domain, solver, swe_band(), Sampling(seed=1000 + seed))
        out[split] = {**summary(result), "wall_s": round(time.perf_counter() - started, 1)}
        log.info("  %s: valid %.3f in band %.3f (%d/%d) solve rate %s", split, result.validity, result.utility,
                 result.n_in_band, result.n, out[split]["mean_solve_rate"])
    return out


def spread(values: list[float | None]) -> dict[str, float | None]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"mean": None, "std": None, "min": None, "max": None}
    return {"mean": round(statistics.fmean(vals), 4), "std": round(statistics.pstdev(vals), 4),
            "min": round(min(vals), 4), "max": round(max(vals), 4)}


METRICS = ("valid_share", "in_band_share", "in_band_of_valid", "mean_solve_rate")


def aggregate(per_seed: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """row → split → metric → mean/std/min/max over seeds."""
    return {row: {split: {m: spread([r[split][m] for r in runs]) for m in METRICS} for split in runs[0]
                  if split != "seed"} for row, runs in per_seed.items() if runs}


def run(settings: Settings, data_dir: Path, cache: Path) -> dict[str, Any]:
    torch.set_num_threads(1)
    started = time.perf_counter()
    boot = bootstrap("swe", data_dir, steps=settings.bootstrap_steps, show_progress=False,
                     domain_options={"cache_dir": str(cache), "split": None})
    log.info("generator %s: %.1f%% applicable specs (%s)", boot.path, 100 * boot.validity,
             "reused" if boot.reused else f"trained in {boot.train_s:.0f} s")
    probe, reference, probe_info = train_probe(cache, boot.path, settings)
    probe_s = time.perf_counter() - started
    log.info("probe: %s at %.0f s", {k: probe_info[k] for k in ("rows", "positives", "per_repo")}, probe_s)
    style = settings.prompt_style
    domains = {"held-out": split_domain(cache, "held-out", style), "rl-train": split_domain(cache, "rl-train", style)}
    ns = {"held-out": settings.eval_n, "rl-train": settings.train_eval_n}
    solver = SyntheticSweSolver(cache)
    base_model, base_tok = load_bootstrapped(boot.path)
    per_seed: dict[str, list[dict[str, Any]]] = {"Base": [], "PROPEL": []}
    rl_stats: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="swe_heldout_") as tmp:
        for seed in range(settings.seeds):
            log.info("seed %d: base at %.0f s", seed, time.perf_counter() - started)
            per_seed["Base"].append(evaluate(base_model, base_tok, domains, ns, solver, seed) | {"seed": seed})
            t0 = time.perf_counter()
            model, tok, stats = train_propel(boot.path, cache, Path(tmp), probe, reference.fingerprint, seed, settings)
            rl_stats.append({**stats, "rl_wall_s": round(time.perf_counter() - t0, 1)})
            log.info("seed %d: RL %s; PROPEL at %.0f s", seed, stats, time.perf_counter() - started)
            per_seed["PROPEL"].append(evaluate(model, tok, domains, ns, solver, seed) | {"seed": seed})
            shutil.rmtree(Path(tmp) / f"propel-{seed}", ignore_errors=True)
    return {"synthetic_solver": True, "note": SYNTHETIC_NOTE, "solver": solver.solver_id, "band": SWE_BAND,
            "settings": asdict(settings), "splits": {k: sorted(d.usable_repos()) for k, d in
                                                     {**domains, "probe-train": split_domain(cache, "probe-train",
                                                                                             style)}
                                                     .items()},
            "generator": {"path": str(boot.path), "validity": boot.validity, "pretrained_on": "all usable repos",
                          "prompt_style": style},
            "probe": probe_info, "rl": rl_stats, "table": aggregate(per_seed), "per_seed": per_seed,
            "goal": "PROPEL > Base on the held-out in-band share", "total_wall_s": round(time.perf_counter() - started)}


def plot(data: dict[str, Any], path: Path) -> None:
    """Bars per metric: Base vs PROPEL on held-out and rl-train prompts, mean over seeds, error bar = min..max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    table = data["table"]
    splits = list(table["Base"])
    fig, axes = plt.subplots(1, len(splits), figsize=(6.5 * len(splits), 4.5), sharey=True, squeeze=False)
    x = np.arange(len(METRICS))
    for ax, split in zip(axes[0], splits, strict=True):
        for offset, row in ((-0.2, "Base"), (0.2, "PROPEL")):
            cells = [table[row][split][m] for m in METRICS]
            means = [c["mean"] or 0.0 for c in cells]
            err = [[(c["mean"] or 0) - (c["min"] or 0) for c in cells], [(c["max"] or 0) - (c["mean"] or 0)
                                                                       for c in cells]]
            ax.bar(x + offset, means, 0.4, yerr=err, capsize=3, label=row)
            for i, v in enumerate(means):
                ax.text(i + offset, v + 0.01, f"{v:.2f}", ha="center", fontsize=7)
        repos = ", ".join(data["splits"][split])
        ax.set_title(f"{split} prompts ({repos})", fontsize=9)
        ax.set_xticks(x, [m.replace("_", " ") for m in METRICS], fontsize=8)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel(f"mean over {data['settings']['seeds']} seed(s); bars: min..max")
    fig.suptitle(f"SWE held-out: PROPEL vs base - SYNTHETIC SOLVER (k=3, band 1-2 of >=2 valid); probe on "
                 f"{', '.join(data['splits']['probe-train'])}; RL {data['settings']['steps']} GRPO steps", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@click.command()
@click.option("--quick", is_flag=True, help="pipeline check: 1 seed, 2 RL steps, tiny samples")
@click.option("--seeds", type=int, default=None)
@click.option("--steps", type=int, default=None)
@click.option("--eval-n", type=int, default=None)
@click.option("--bootstrap-steps", type=int, default=None)
@click.option("--probe-samples", type=int, default=None,
              help="base-policy samples on probe-train prompts for the probe's corpus (default 96)")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".propel"), show_default=True)
@click.option("--prompt-style", type=click.Choice(["tiny-func", "tiny-repo"]), default="tiny-func", show_default=True,
              help="tiny-func: the prompt names REPO FILE::FUNCTION, the generator writes OPERATOR SITE; "
                   "tiny-repo: the prompt names the repository only")
@click.option("--name", default="swe_heldout", show_default=True)
def main(quick: bool, seeds: int | None, steps: int | None, eval_n: int | None, bootstrap_steps: int | None,
         probe_samples: int | None, data_dir: Path, prompt_style: str, name: str) -> None:
    """Run the held-out SWE benchmark; writes benchmarks/results/NAME.json and .png."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from curriculum.domains.swe.cache import RepoCache

    cache = RepoCache(None).root.absolute()
    os.environ["PROPEL_SWE_CACHE"] = str(cache)  # the configured synthetic-swe solver reads the same task memo
    settings = Settings.quick() if quick else Settings()
    overrides = {k: v for k, v in (("seeds", seeds), ("steps", steps), ("eval_n", eval_n),
                                   ("bootstrap_steps", bootstrap_steps), ("probe_samples", probe_samples))
                 if v is not None}
    data = run(replace(settings, prompt_style=prompt_style, **overrides), data_dir.absolute(), cache)
    path = write_result(name, data)
    plot(data, RESULTS / f"{name}.png")
    log.info("wrote %s", path)


if __name__ == "__main__":
    main()

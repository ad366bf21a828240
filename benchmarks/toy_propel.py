"""Toy-scale PROPEL: probe-reward generator RL vs base and solver-in-the-loop RL, on arithmetic.

Rows (each trained from the bootstrapped tiny generator, evaluated **only** with the solver):

* ``Base`` — the bootstrapped generator, no RL.
* ``PROPEL`` — hard-gate reward on one MLP probe (0 online solver trials).
* ``PROPEL-WCO`` — minimum over two MLP probes (different feature layer/pooling and seed).
* ``PROPEL-linear`` — a single **linear** probe trained ``linear_steps`` (3× longer): the
  configuration expected to get reward-hacked (ARCHITECTURE §6 measured 31% → 1%).
* ``PROPEL + co-evolution`` / ``PROPEL-linear + co-evolution`` — the same run forked at half the
  steps: sample the current policy, spot-check the probe-high tasks with the solver, mine false
  positives (+ the dominant topic family if it collapsed), train an aux probe, continue RL with
  ``min(primary, aux)`` for the second half (one round). Same total step count as the unforked run.
* ``SIL`` — reward = in-band indicator from ``k`` live solver attempts (online solver trials).

The solver is :class:`~curriculum.solvers.synthetic.SyntheticArithSolver` — a benchmark instrument
(logistic success in task complexity), labelled as synthetic in the output. The frozen reference
the probes read is the bootstrapped generator itself (PROPEL's setup).

    .venv/bin/python -m benchmarks.toy_propel            # full run (~20 min on 2 shared CPU cores)
    .venv/bin/python -m benchmarks.toy_propel --quick    # tiny settings, a few minutes
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click
import numpy as np
import torch

from benchmarks._common import RESULTS, write_result
from curriculum.bootstrap import bootstrap, load_bootstrapped
from curriculum.coevolution import InsufficientAuxData, LabelledSample, dominant_topic, train_aux_probe
from curriculum.domains.arith import ArithDomain
from curriculum.evaluation import EvaluationResult, evaluate_texts
from curriculum.rewards import HardGateReward, SolverInTheLoopReward
from curriculum.rl import GeneratorTrainer, cpu_profile
from curriculum.rl.sampling import sample_completions
from curriculum.solvers.base import Sampling
from curriculum.solvers.synthetic import SyntheticArithSolver
from curriculum.spotcheck import select_candidates
from probes import (
    FeatureExtractor,
    FeatureSpec,
    FrozenReference,
    Probe,
    ProbeEnsemble,
    ProbeScorer,
    TrainConfig,
)
from probes.band import Band
from probes.fit import fit_probe

ROWS = ("Base", "PROPEL", "PROPEL-WCO", "PROPEL + co-evolution", "PROPEL-linear", "PROPEL-linear + co-evolution",
        "SIL")
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

    @staticmethod
    def quick() -> Settings:
        return Settings(seeds=3, steps=4, corpus=256, eval_n=64, spot_n=64, spot_budget=32, bootstrap_steps=60,
                        batch=8, group=4, linear_steps=4)


@dataclass
class Shared:
    """Everything built once: generator path, reference, probes, floors, offline trial counts."""

    gen_path: Path
    reference: FrozenReference
    probes: dict[str, Probe]
    probe_metrics: dict[str, dict[str, Any]]
    corpus_positives: list[str]
    calibration: list[str]
    corpus_trials: int
    base_top_topic: float
    bootstrap_validity: float


def _solver() -> SyntheticArithSolver:
    return SyntheticArithSolver(slope=1.0, offset=6.0, seed=0)


def _labelled_corpus(texts: list[str], domain: ArithDomain) -> tuple[list[str], np.ndarray, int]:
    """Reference texts of valid corpus tasks, their in-band labels, and the solver trials spent."""
    res = evaluate_texts(texts, domain, _solver(), BAND, Sampling(seed=1))
    refs, labels = [], []
    for outcome, check in zip(res.outcomes, domain.validate_batch(texts), strict=True):
        if outcome.valid:
            refs.append(domain.reference_text(check.task))
            labels.append(int(outcome.in_band))
    return refs, np.array(labels), res.solver_trials


def _fit(x: np.ndarray, y: np.ndarray, arch: str, seed: int, name: str, shared_ref: FrozenReference,
         spec: FeatureSpec) -> tuple[Probe, dict[str, Any]]:
    probe = fit_probe(x, y, reference=shared_ref, spec=spec, band=BAND, arch=arch,
                      config=TrainConfig(seed=seed, hidden_dim=64), name=name)
    return probe, probe.metrics


def build_shared(settings: Settings, data_dir: Path) -> Shared:
    """Bootstrap, one-time labelled corpus (offline solver trials), reference features, probes."""
    boot = bootstrap("arith", data_dir, steps=settings.bootstrap_steps, show_progress=False)
    model, tok = load_bootstrapped(boot.path)
    domain = ArithDomain()
    texts = sample_completions(model, tok, domain.generator_prompts(settings.corpus, 0), seed=0)
    refs, labels, trials = _labelled_corpus(texts, domain)
    reference = FrozenReference.load(str(boot.path))
    feats = FeatureExtractor(reference).extract(refs, [SPEC_A, SPEC_B])
    probes, metrics = {}, {}
    for name, spec, arch, seed in (("mlp", SPEC_A, "mlp", 0), ("mlp_b", SPEC_B, "mlp", 1),
                                   ("linear", SPEC_A, "linear", 0)):
        probes[name], metrics[name] = _fit(feats[spec], labels, arch, seed, name, reference, spec)
        metrics[name]["positives"], metrics[name]["rows"] = int(labels.sum()), int(labels.size)
    topics = [domain.topic(c.task) for c in domain.validate_batch(texts) if c.valid]
    base_top = max(topics.count(t) for t in set(topics)) / len(topics)
    positives = [r for r, y in zip(refs, labels, strict=True) if y == 1]
    return Shared(boot.path, reference, probes, metrics, positives, refs[:256], trials, base_top, boot.validity)


def _scorer(shared: Shared, members: list[str], constraints: tuple[Probe, ...] = ()) -> ProbeScorer:
    ensemble = ProbeEnsemble([shared.probes[m] for m in members], combine="min", constraints=list(constraints))
    return ProbeScorer(shared.reference, ensemble)


def _hard_gate(shared: Shared, scorer: ProbeScorer, group: int, floor: float | None = None) -> HardGateReward:
    calibrated = HardGateReward.calibrated(ArithDomain(), scorer, shared.calibration, group)
    if floor is not None and floor < calibrated.floor:
        return HardGateReward(ArithDomain(), scorer, floor, group)
    return calibrated


def _trainer(shared: Shared, settings: Settings, run_dir: Path, seed: int) -> GeneratorTrainer:
    config = cpu_profile(str(shared.gen_path), str(shared.gen_path), seed=seed, num_generations=settings.group,
                         per_device_train_batch_size=settings.batch, prompt_pool_size=64, keep_checkpoints=1)
    return GeneratorTrainer(config, run_dir)


def _evaluate(sample: list[str], seed: int) -> EvaluationResult:
    return evaluate_texts(sample, ArithDomain(), _solver(), BAND, Sampling(seed=1000 + seed))


def _record(result: EvaluationResult, online: int, offline: int, wall_s: float,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**result.to_dict(), "online_solver_trials": online, "offline_solver_trials": offline,
            "wall_s": wall_s, **(extra or {})}


def coevolve(shared: Shared, settings: Settings, trainer: GeneratorTrainer, primary: list[str],
             seed: int) -> tuple[HardGateReward, dict[str, Any]]:
    """One co-evolution round: sample → spot-check probe-high → mine → aux probe → constrained reward."""
    domain, scorer = ArithDomain(), _scorer(shared, primary)
    texts = trainer.sample(settings.spot_n, seed=50_000 + seed)
    checks = domain.validate_batch(texts)
    refs = [domain.reference_text(c.task) for c in checks]
    probs = scorer.score(refs).probabilities
    scored = [(i, float(p)) for i, (p, c) in enumerate(zip(probs, checks, strict=True)) if c.valid]
    chosen = set(select_candidates(scored, settings.spot_budget, 0.75, 0.5, seed))
    spot = evaluate_texts([texts[i] for i in sorted(chosen)], domain, _solver(), BAND, Sampling(seed=7))
    labels = dict(zip(sorted(chosen), (o.label for o in spot.outcomes), strict=True))
    samples = [LabelledSample(i, refs[i], c.valid, float(probs[i]), labels.get(i),
                              domain.topic(c.task) if c.valid else None) for i, c in enumerate(checks)]
    topic, share = dominant_topic(samples)
    collapse = topic if share > shared.base_top_topic + 0.1 else None
    info: dict[str, Any] = {"spotcheck_trials": spot.solver_trials, "collapse_topic": collapse,
                            "dominant_share": share, "aux_probe": True}
    old = _hard_gate(shared, scorer, settings.group)
    try:
        aux = train_aux_probe(samples, FeatureExtractor(shared.reference), SPEC_A, BAND, threshold=0.5,
                              collapse_topic=collapse, extra_positives=shared.corpus_positives,
                              config=TrainConfig(seed=seed, hidden_dim=64), name=f"aux-fp-{seed}")
    except InsufficientAuxData as err:  # nothing mined: the round keeps the primary reward, and says so
        return old, info | {"aux_probe": False, "reason": str(err)}
    info |= {k: aux.dataset.summary[k] for k in ("positives", "negatives", "false_positives")}
    info["aux_val_metrics"] = aux.metrics
    return _hard_gate(shared, _scorer(shared, primary, (aux.probe,)), settings.group, floor=old.floor), info


def run_probe_pair(shared: Shared, settings: Settings, workdir: Path, seed: int, members: list[str],
                   name: str, steps: int) -> dict[str, dict[str, Any]]:
    """A single-probe run and its co-evolution fork at half the steps (same total steps)."""
    half = max(1, steps // 2)
    started = time.perf_counter()
    trainer = _trainer(shared, settings, workdir / f"{name}-{seed}", seed)
    reward = _hard_gate(shared, _scorer(shared, members), settings.group)
    trainer.train_steps(half, reward)
    fork_dir = workdir / f"{name}-coevo-{seed}"
    shutil.copytree(trainer.store.root, fork_dir)
    shared_s = time.perf_counter() - started
    trainer.train_steps(steps - half, reward)
    single = _record(_evaluate(trainer.sample(settings.eval_n, 100 + seed), seed), 0, shared.corpus_trials,
                     time.perf_counter() - started, {"adapter_hash": trainer.adapter_hash()})
    started = time.perf_counter()
    fork = _trainer(shared, settings, fork_dir, seed)
    constrained, info = coevolve(shared, settings, fork, members, seed)
    fork.train_steps(steps - half, constrained)
    offline = shared.corpus_trials + int(info["spotcheck_trials"])
    coevo = _record(_evaluate(fork.sample(settings.eval_n, 100 + seed), seed), 0, offline,
                    shared_s + time.perf_counter() - started, {"coevolution": info})
    return {name: single, f"{name} + co-evolution": coevo}


def run_plain(shared: Shared, settings: Settings, workdir: Path, seed: int, row: str) -> dict[str, Any]:
    started = time.perf_counter()
    trainer = _trainer(shared, settings, workdir / f"{row}-{seed}", seed)
    if row == "SIL":
        reward: Any = SolverInTheLoopReward(ArithDomain(), _solver(), BAND, settings.group, Sampling(seed=3))
    else:
        reward = _hard_gate(shared, _scorer(shared, ["mlp", "mlp_b"]), settings.group)
    trainer.train_steps(settings.steps, reward)
    online = int(getattr(reward, "solver_trials", 0))
    offline = 0 if row == "SIL" else shared.corpus_trials
    return _record(_evaluate(trainer.sample(settings.eval_n, 100 + seed), seed), online, offline,
                   time.perf_counter() - started)


def run_base(shared: Shared, settings: Settings, seed: int) -> dict[str, Any]:
    started = time.perf_counter()
    model, tok = load_bootstrapped(shared.gen_path)
    texts = sample_completions(model, tok, ArithDomain().generator_prompts(settings.eval_n, seed), seed=100 + seed)
    return _record(_evaluate(texts, seed), 0, 0, time.perf_counter() - started)


def aggregate(per_seed: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Mean ± std over seeds for every row; histograms summed."""
    table: dict[str, dict[str, Any]] = {}
    for row, runs in per_seed.items():
        def stat(key: str, runs: list[dict[str, Any]] = runs) -> tuple[float, float]:
            values = np.array([float(r[key]) for r in runs])
            return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0

        entry: dict[str, Any] = {"seeds": len(runs)}
        for key, out in (("utility", "utility"), ("validity", "valid"), ("self_bleu3", "self_bleu3"),
                         ("distinct3", "distinct3"), ("top_topic_share", "top_topic")):
            entry[f"{out}_mean"], entry[f"{out}_std"] = stat(key)
        for key in ("online_solver_trials", "offline_solver_trials", "wall_s"):
            entry[key] = stat(key)[0]
        hist: dict[str, int] = {}
        for r in runs:
            for bucket, count in r["solve_histogram"].items():
                hist[bucket] = hist.get(bucket, 0) + int(count)
        entry["solve_histogram"] = hist
        entry["top_topics"] = [r["top_topic"] for r in runs]
        table[row] = entry
    return table


def goals(table: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's goals, evaluated on the measured numbers (reported, never tuned to pass)."""
    base, propel = table["Base"], table["PROPEL"]
    coevo, sil = table["PROPEL + co-evolution"], table["SIL"]
    lift = propel["utility_mean"] - base["utility_mean"]
    coevo_lift = coevo["utility_mean"] - base["utility_mean"]
    sil_lift = sil["utility_mean"] - base["utility_mean"]
    propel_trials = propel["offline_solver_trials"] + propel["online_solver_trials"]
    sil_trials = sil["offline_solver_trials"] + sil["online_solver_trials"]
    per_trial = lift / propel_trials if propel_trials else float("inf")
    sil_per_trial = sil_lift / sil_trials if sil_trials else float("inf")
    return {
        "propel_ratio_vs_base": propel["utility_mean"] / max(base["utility_mean"], 1e-9),
        "propel_doubles_base_with_0_online_trials": bool(
            propel["utility_mean"] >= 2 * base["utility_mean"] and propel["online_solver_trials"] == 0),
        "coevo_top_topic_minus_base": coevo["top_topic_mean"] - base["top_topic_mean"],
        "coevo_share_of_single_probe_lift": coevo_lift / lift if lift else float("nan"),
        "coevo_keeps_diversity_and_75pct_lift": bool(
            coevo["top_topic_mean"] - base["top_topic_mean"] <= 0.1 and lift > 0 and coevo_lift >= 0.75 * lift),
        "propel_lift_per_1k_solver_trials": 1000 * per_trial,
        "sil_lift_per_1k_solver_trials": 1000 * sil_per_trial,
        "propel_lift_per_trial_above_sil": bool(per_trial > sil_per_trial),
    }


def plot(table: dict[str, dict[str, Any]], path: Path) -> None:
    """Figure-6-style: share of all generations per solve count (band shaded), one panel per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = [*map(str, range(BAND.k + 1)), "invalid"]
    fig, axes = plt.subplots(1, len(table), figsize=(3.0 * len(table), 3.2), sharey=True)
    for ax, (row, entry) in zip(np.atleast_1d(axes), table.items(), strict=True):
        hist = entry["solve_histogram"]
        total = max(1, sum(hist.values()))
        shares = [hist.get(b, 0) / total for b in buckets]
        colors = ["tab:green" if b.isdigit() and BAND.lo <= int(b) <= BAND.hi else
                  ("tab:gray" if b == "invalid" else "tab:blue") for b in buckets]
        ax.bar(range(len(buckets)), shares, color=colors)
        ax.set_xticks(range(len(buckets)), [b if b != "invalid" else "inv" for b in buckets], fontsize=7)
        ax.set_title(f"{row}\nutility {entry['utility_mean']:.2f}", fontsize=8)
        ax.set_xlabel(f"solves of {BAND.k}", fontsize=7)
    np.atleast_1d(axes)[0].set_ylabel("share of all generations")
    fig.suptitle("toy PROPEL (arith, synthetic solver): solve-count histograms, band 1–3 of 8 in green", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(table: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    head = ("| row | utility | valid | Self-BLEU-3 | Distinct-3 | top-topic | online solver trials "
            "| offline solver trials | wall s |\n|---|---|---|---|---|---|---|---|---|\n")
    lines = [
        f"| {row} | {e['utility_mean']:.3f} ± {e['utility_std']:.3f} | {e['valid_mean']:.3f} | "
        f"{e['self_bleu3_mean']:.3f} | {e['distinct3_mean']:.3f} | {e['top_topic_mean']:.3f} | "
        f"{e['online_solver_trials']:.0f} | {e['offline_solver_trials']:.0f} | {e['wall_s']:.0f} |"
        for row, e in table.items()
    ]
    g = meta["goals"]
    notes = (
        f"\nSettings: {meta['settings']}. Mean ± std over {meta['settings']['seeds']} seeds; the two "
        f"PROPEL-linear rows train {meta['settings']['linear_steps']} GRPO steps, the other RL rows "
        f"{meta['settings']['steps']}; co-evolution forks at half of its run's steps. Solver: "
        f"`{meta['solver']}` (synthetic benchmark instrument). Co-evolution trials (spot-checks) are "
        "counted as offline. Goals (measured, not tuned): "
        f"PROPEL/base = {g['propel_ratio_vs_base']:.2f} (goal ≥ 2: {g['propel_doubles_base_with_0_online_trials']}); "
        f"co-evolution top-topic − base = {g['coevo_top_topic_minus_base']:+.3f}, share of single-probe lift kept = "
        f"{g['coevo_share_of_single_probe_lift']:.2f} (goal ≤ 0.1 and ≥ 0.75: "
        f"{g['coevo_keeps_diversity_and_75pct_lift']}); lift per 1k solver trials PROPEL "
        f"{g['propel_lift_per_1k_solver_trials']:.4f} vs SIL {g['sil_lift_per_1k_solver_trials']:.4f} "
        f"({g['propel_lift_per_trial_above_sil']}).\n"
    )
    return "## toy_propel\n\n" + head + "\n".join(lines) + "\n" + notes


def write_readme_section(section: str) -> Path:
    """Replace (or add) the ``## toy_propel`` section of ``benchmarks/results/README.md``."""
    path = RESULTS / "README.md"
    text = path.read_text() if path.exists() else "# Benchmark results\n\n"
    start = text.find("## toy_propel")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)
    return path


def run(settings: Settings, data_dir: Path, name: str) -> dict[str, Any]:
    """Everything; one torch thread (on a shared 2-core box, 2 threads made GRPO steps 10× slower)."""
    torch.set_num_threads(1)
    started = time.perf_counter()
    shared = build_shared(settings, data_dir)
    per_seed: dict[str, list[dict[str, Any]]] = {row: [] for row in ROWS}
    with tempfile.TemporaryDirectory(prefix="toy_propel_") as tmp:
        for seed in range(settings.seeds):
            per_seed["Base"].append(run_base(shared, settings, seed))
            per_seed.update({k: [*per_seed[k], v] for k, v in
                             run_probe_pair(shared, settings, Path(tmp), seed, ["mlp"], "PROPEL",
                                            settings.steps).items()})
            per_seed.update({k: [*per_seed[k], v] for k, v in
                             run_probe_pair(shared, settings, Path(tmp), seed, ["linear"], "PROPEL-linear",
                                            settings.linear_steps).items()})
            for row in ("PROPEL-WCO", "SIL"):
                per_seed[row].append(run_plain(shared, settings, Path(tmp), seed, row))
            click.echo(f"seed {seed} done at {time.perf_counter() - started:.0f}s: " + ", ".join(
                f"{r} {per_seed[r][-1]['utility']:.3f}" for r in ROWS))
    table = aggregate(per_seed)
    meta = {"settings": settings.__dict__, "solver": _solver().solver_id, "band": BAND.__dict__,
            "generator": str(shared.gen_path), "bootstrap_validity": shared.bootstrap_validity,
            "probes": shared.probe_metrics, "corpus_solver_trials": shared.corpus_trials, "goals": goals(table),
            "total_wall_s": time.perf_counter() - started}
    data = {**meta, "rows": list(ROWS), "columns": list(COLUMNS), "table": table, "per_seed": per_seed}
    write_result(name, data)
    plot(table, RESULTS / f"{name}.png")
    write_readme_section(markdown(table, meta))
    return data


@click.command()
@click.option("--quick", is_flag=True, help="tiny settings (a few minutes): checks the pipeline, not the goals")
@click.option("--seeds", type=int, default=None, help="number of seeds (default 3)")
@click.option("--steps", type=int, default=None, help="GRPO steps per RL run")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".propel"), show_default=True)
@click.option("--name", default="toy_propel", show_default=True, help="result file name under benchmarks/results")
def main(quick: bool, seeds: int | None, steps: int | None, data_dir: Path, name: str) -> None:
    """Run the toy PROPEL benchmark and write JSON, PNG and the README table."""
    settings = Settings.quick() if quick else Settings()
    settings = replace(settings, **{k: v for k, v in (("seeds", seeds), ("steps", steps)) if v is not None})
    data = run(settings, data_dir, name)
    click.echo(markdown(data["table"], data))


if __name__ == "__main__":
    main()

"""Active vs uniform labelling of the first probe's corpus, at equal solver budgets (issue #22 item 3).

Per generator bootstrap (:func:`curriculum.rl.bootstrap.bootstrap` with ``BootstrapSettings(seed=b)``):
sample base-policy tasks, keep the valid distinct ones, label each with ``k = 8`` attempts of the
synthetic solver (``benchmarks.toy_propel.benchmark_solver``, a BENCHMARK INSTRUMENT:
success is logistic in task complexity), read frozen-reference features
(``FeatureSpec(layer=-1, pooling="mean_full")``, the reference is the bootstrapped generator), and set a
fixed held-out labelled set aside. The rest is the pool. The labels are computed once; an arm "spends"
``k`` solver trials for every pool task it asks for, usable or not.

For each seed and budget ``B`` (tasks; trials = ``B × k``):

* **uniform** — the first ``B`` tasks of a seeded permutation of the pool (the daemon's corpus today);
* **active** — :func:`curriculum.labelling.active_labelling.label_actively` with budget ``B`` (its seed set is the
  first items of the same permutation).

**Sequential labelling** (``spotcheck.sequential``): the pool is labelled a second time through
:func:`curriculum.labelling.spotcheck.label_tasks` with ``sequential=True`` — each task's attempts stop once its label
is settled (:meth:`probes.band.Band.settled`). The labels must be identical to the full-``k`` ones (the run
fails otherwise); what changes is the attempts each task costs. Every corpus is therefore accounted twice:
``trials`` (``tasks × k``) and ``trials_sequential`` (the attempts the sequential labeller actually ran for
those tasks), and the goal is judged for four arms — uniform and active, each with and without sequential
labelling — as the share of the uniform corpus's full-budget trials (``max budget × k``) an arm spends at the
first budget where its mean balanced accuracy reaches the uniform corpus's full-budget mean.

Each corpus trains one probe head the same way (:func:`probes.fit.fit_head`, MLP, downsampled classes,
the daemon's split rule), scored on the held-out set: balanced accuracy, ECE, ROC AUC. The table also
gives a ceiling: the classifier that knows each task's true in-band probability (from the synthetic
solver's success probability) and cuts it at the held-out prevalence (the balanced-accuracy-optimal
cut), on the same held-out labels. The probes train on class-balanced (downsampled) rows, so their
probabilities are calibrated to a 50 % prior: their ECE against the held-out prevalence is large in
both arms by construction; compare the arms with each other.

    .venv/bin/python -m benchmarks.active_labelling            # ~15 min on 2 shared cores once the
                                                               # bootstraps are cached (each: ~10 min once)
    .venv/bin/python -m benchmarks.active_labelling --quick    # pipeline check (60-step bootstrap)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import click
import numpy as np
import torch

from benchmarks._common import RESULTS, write_result
from benchmarks.toy_propel import BAND, benchmark_solver
from benchmarks.toy_propel import SPEC_A as SPEC
from curriculum.common.solver_api import Sampling
from curriculum.domains.arith import ArithDomain
from curriculum.domains.base import Task
from curriculum.labelling.active_labelling import head_fitter, label_actively
from curriculum.labelling.spotcheck import LabelValue, label_tasks
from curriculum.probing.first_probe import distinct_valid_tasks
from curriculum.rl.bootstrap import BootstrapSettings, bootstrap, load_bootstrapped
from curriculum.rl.sampling import sample_completions
from probes import FeatureExtractor, FrozenReference, TrainConfig, evaluate
from probes.fit import fit_head

ARMS = ("uniform", "active")
#: The issue's goal: active reaches the uniform corpus's full-budget balanced accuracy with ≤ 40 % of its trials.
GOAL_TRIAL_SHARE = 0.4


@dataclass(frozen=True)
class Settings:
    bootstraps: tuple[int, ...] = (0, 1)
    seeds: int = 5
    samples: int = 5120
    heldout: int = 1024
    budgets: tuple[int, ...] = (64, 128, 256, 384, 512, 768, 1024)
    seed_share: float = 0.25
    rounds: int = 4
    members: int = 3
    hidden_dim: int = 64
    bootstrap_steps: int | None = None

    @staticmethod
    def quick() -> Settings:
        return Settings(bootstraps=(0,), seeds=2, samples=1536, heldout=128, budgets=(32, 64, 128), rounds=2,
                        members=2, bootstrap_steps=60)


@dataclass
class Data:
    """One bootstrap's labelled pool and held-out set (features and labels)."""

    bootstrap: int
    validity: float
    x_pool: np.ndarray
    pool_labels: list[LabelValue]
    x_held: np.ndarray
    y_held: np.ndarray
    bayes: dict[str, float]
    pool_attempts: np.ndarray  # attempts the sequential labeller ran per pool task (≤ k)


def build_data(settings: Settings, data_dir: Path, boot_seed: int, say: Callable[[str], None]) -> Data:
    """Bootstrap (cached), sample, validate, deduplicate, label, extract; split held-out / pool."""
    boot = bootstrap("arith", data_dir, steps=settings.bootstrap_steps, show_progress=False,
                     settings=BootstrapSettings(seed=boot_seed))
    model, tok = load_bootstrapped(boot.path)
    domain = ArithDomain()
    texts = sample_completions(model, tok, domain.generator_prompts(settings.samples, boot_seed), seed=boot_seed)
    tasks = distinct_valid_tasks(domain, texts)
    tasks = [tasks[i] for i in np.random.default_rng(12345).permutation(len(tasks))]
    labels = label_tasks(domain, benchmark_solver(), tasks, BAND, Sampling(seed=1))
    attempts = sequential_attempts(domain, tasks, labels)
    x = FeatureExtractor(FrozenReference.load(str(boot.path))).extract(
        [domain.reference_text(t) for t in tasks], [SPEC])[SPEC]
    usable = [i for i, lab in enumerate(labels) if lab.in_band is not None]
    held = usable[:settings.heldout]
    pool = sorted(set(range(len(tasks))) - set(held))
    if len(pool) < max(settings.budgets):
        raise ValueError(f"pool of {len(pool)} tasks < largest budget {max(settings.budgets)}: raise --samples")
    y_held = np.array([int(bool(labels[i].in_band)) for i in held])
    solver = benchmark_solver()
    p_in = np.array([BAND.probability(solver.success_probability(tasks[i].text)) for i in held])
    bayes = evaluate(y_held, p_in, threshold=float(y_held.mean())).to_dict()  # BA-optimal cut: the prevalence
    say(f"bootstrap {boot_seed}: validity {boot.validity:.1%}, {len(tasks)} distinct valid tasks of "
        f"{settings.samples}; held-out {len(held)} ({y_held.mean():.1%} in band), pool {len(pool)}; "
        f"Bayes BA {bayes['balanced_accuracy']:.3f}")
    say(f"bootstrap {boot_seed}: sequential labelling gives the same {len(tasks)} labels with "
        f"{attempts.mean():.2f} of {BAND.k} attempts per task")
    return Data(boot_seed, boot.validity, x[pool], [labels[i] for i in pool], x[held], y_held,
                {k: float(v) for k, v in bayes.items() if v is not None}, attempts[pool])


def sequential_attempts(domain: ArithDomain, tasks: list[Task], full: list[LabelValue]) -> np.ndarray:
    """Label ``tasks`` again with the product's sequential labeller (same solver and sampling as ``full``);
    raises when any label (side, in band) differs from the full-``k`` one. Returns attempts per task."""
    seq = label_tasks(domain, benchmark_solver(), tasks, BAND, Sampling(seed=1), sequential=True)
    differ = [i for i, (a, b) in enumerate(zip(full, seq, strict=True))
              if a.in_band != b.in_band or a.side(BAND) != b.side(BAND)]
    if differ:
        raise AssertionError(f"sequential labels differ from full-k labels on {len(differ)} tasks, e.g. "
                             f"{tasks[differ[0]].text!r}: {full[differ[0]]} vs {seq[differ[0]]}")
    return np.array([BAND.k if lab.attempts is None else lab.attempts for lab in seq], dtype=int)


def score_corpus(data: Data, rows: list[int], seed: int, hidden_dim: int) -> dict[str, Any]:
    """Fit one probe on the corpus ``rows`` (pool indices), score it on the held-out set."""
    use = [i for i in rows if data.pool_labels[i].in_band is not None]
    y = np.array([int(bool(data.pool_labels[i].in_band)) for i in use])
    out: dict[str, Any] = {"tasks": len(rows), "trials": len(rows) * BAND.k,
                           "trials_sequential": int(data.pool_attempts[rows].sum()), "usable": len(use),
                           "positives": int(y.sum())}
    if len(set(y.tolist())) < 2:  # no probe can be fitted: a constant predictor at the corpus's rate
        prob = np.full(data.y_held.size, float(y.mean()) if y.size else 0.0)
        out["note"] = "one-class corpus: constant predictor"
    else:
        head, _ = fit_head(data.x_pool[use], y, arch="mlp", config=TrainConfig(seed=seed, hidden_dim=hidden_dim))
        prob = head.probabilities(data.x_held)
    m = evaluate(data.y_held, prob)
    return out | {"balanced_accuracy": m.balanced_accuracy, "ece": m.ece, "roc_auc": m.roc_auc}


def run_seed(data: Data, settings: Settings, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Both arms at every budget for one seed."""
    order = [int(i) for i in np.random.default_rng(seed).permutation(len(data.pool_labels))]
    fit = head_fitter("mlp", config=TrainConfig(hidden_dim=settings.hidden_dim))
    out: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for budget in settings.budgets:
        out["uniform"].append(score_corpus(data, order[:budget], seed, settings.hidden_dim))
        started = time.perf_counter()
        res = label_actively(data.x_pool, lambda idx: [data.pool_labels[i] for i in idx], budget=budget,
                             seed_share=settings.seed_share, rounds=settings.rounds, members=settings.members,
                             fit=fit, seed=seed)
        select_s = time.perf_counter() - started
        rounds = [asdict(r) for r in res.rounds]
        out["active"].append(score_corpus(data, res.indices, seed, settings.hidden_dim)
                             | {"rounds": rounds, "select_s": select_s})
    return out


def _stats(values: list[float]) -> dict[str, float]:
    arr = np.array(values, dtype=float)
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
            "min": float(arr.min()), "max": float(arr.max())}


def aggregate(runs: list[dict[str, Any]], settings: Settings) -> dict[str, Any]:
    """Per arm and budget: mean/std/min/max over every (bootstrap, seed), and per-bootstrap means."""
    table: dict[str, Any] = {}
    for arm in ARMS:
        rows = []
        for b, budget in enumerate(settings.budgets):
            cells = [r["arms"][arm][b] for r in runs]
            row: dict[str, Any] = {"tasks": budget, "trials": budget * BAND.k}
            for key in ("balanced_accuracy", "ece", "roc_auc", "positives", "trials_sequential"):
                row[key] = _stats([c[key] for c in cells])
            row["balanced_accuracy_by_bootstrap"] = {
                str(boot): float(np.mean([r["arms"][arm][b]["balanced_accuracy"] for r in runs
                                          if r["bootstrap"] == boot])) for boot in settings.bootstraps}
            rows.append(row)
        table[arm] = rows
    return table


def _goal_for(uniform_full: float, active_means: list[float], budgets: tuple[int, ...]) -> dict[str, Any]:
    reached = [b for b, m in zip(budgets, active_means, strict=True) if m >= uniform_full]
    share = reached[0] / budgets[-1] if reached else None
    return {"uniform_full_budget_ba": uniform_full, "active_budget_reaching_it": reached[0] if reached else None,
            "active_trial_share": share, "met": bool(share is not None and share <= GOAL_TRIAL_SHARE)}


def goals(table: dict[str, Any], runs: list[dict[str, Any]], settings: Settings) -> dict[str, Any]:
    """The issue's goal on the mean over all runs, and per bootstrap (its spread); measured, not tuned."""
    uni, act = table["uniform"], table["active"]
    out = _goal_for(uni[-1]["balanced_accuracy"]["mean"], [r["balanced_accuracy"]["mean"] for r in act],
                    settings.budgets)
    out["per_bootstrap"] = {
        str(boot): _goal_for(uni[-1]["balanced_accuracy_by_bootstrap"][str(boot)],
                             [r["balanced_accuracy_by_bootstrap"][str(boot)] for r in act], settings.budgets)
        for boot in settings.bootstraps}
    out["active_minus_uniform_ba"] = [
        _stats([r["arms"]["active"][b]["balanced_accuracy"] - r["arms"]["uniform"][b]["balanced_accuracy"]
                for r in runs]) | {"tasks": budget} for b, budget in enumerate(settings.budgets)]
    return out


#: The four accountings of the goal: (arm, its trials with sequential labelling?).
VARIANTS: dict[str, tuple[str, bool]] = {"uniform": ("uniform", False), "uniform+sequential": ("uniform", True),
                                         "active": ("active", False), "active+sequential": ("active", True)}


def trial_shares(runs: list[dict[str, Any]], settings: Settings, bootstrap: int | None = None) -> dict[str, Any]:
    """Per variant: the first budget whose mean BA (over the runs, or one bootstrap's) reaches the uniform
    corpus's full-budget mean BA, the mean trials spent there and their share of the uniform corpus's
    full-budget trials (``max budget × k``); ``met`` against the issue's 40 %."""
    pick = [r for r in runs if bootstrap is None or r["bootstrap"] == bootstrap]

    def mean(arm: str, b: int, key: str) -> float:
        return float(np.mean([r["arms"][arm][b][key] for r in pick]))

    last = len(settings.budgets) - 1
    target, full = mean("uniform", last, "balanced_accuracy"), settings.budgets[-1] * BAND.k
    out: dict[str, Any] = {"uniform_full_budget_ba": target, "uniform_full_budget_trials": full}
    for name, (arm, sequential) in VARIANTS.items():
        b = next((b for b in range(len(settings.budgets)) if mean(arm, b, "balanced_accuracy") >= target), None)
        trials = None if b is None else mean(arm, b, "trials_sequential" if sequential else "trials")
        share = None if trials is None else trials / full
        out[name] = {"tasks": None if b is None else settings.budgets[b], "trials": trials, "trial_share": share,
                     "met": bool(share is not None and share <= GOAL_TRIAL_SHARE)}
    return out


def sequential_summary(runs: list[dict[str, Any]], settings: Settings, datasets: list[dict[str, Any]]
                       ) -> dict[str, Any]:
    """Mean attempts per task under sequential labelling: over each pool, and per arm and budget."""
    per_arm = {arm: [float(np.mean([r["arms"][arm][b]["trials_sequential"] / budget for r in runs]))
                     for b, budget in enumerate(settings.budgets)] for arm in ARMS}
    return {"k": BAND.k, "pool_attempts_per_task": {str(d["bootstrap"]): d["sequential_attempts_per_task"]
                                                    for d in datasets},
            "attempts_per_task_by_budget": per_arm,
            "goal": trial_shares(runs, settings),
            "goal_per_bootstrap": {str(b): trial_shares(runs, settings, b) for b in settings.bootstraps}}


def plot(table: dict[str, Any], bayes_ba: float, path: Path) -> None:
    """Balanced accuracy and ECE against solver trials, both arms, error bars = std over runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for arm, color in zip(ARMS, ("tab:gray", "tab:green"), strict=True):
        rows = table[arm]
        trials = [r["trials"] for r in rows]
        for ax, key in zip(axes, ("balanced_accuracy", "ece"), strict=True):
            ax.errorbar(trials, [r[key]["mean"] for r in rows], yerr=[r[key]["std"] for r in rows], marker="o",
                        capsize=3, color=color, label=arm)
            ax.plot([r["trials_sequential"]["mean"] for r in rows], [r[key]["mean"] for r in rows], marker="x",
                    ls="--", color=color, label=f"{arm} + sequential (attempts run)")
    full = table["uniform"][-1]
    axes[0].axhline(full["balanced_accuracy"]["mean"], ls=":", color="tab:gray", lw=1,
                    label="uniform, full budget")
    axes[0].axvline(GOAL_TRIAL_SHARE * full["trials"], ls="--", color="tab:red", lw=1, label="40 % of its trials")
    axes[0].axhline(bayes_ba, ls="-.", color="tab:blue", lw=1, label="Bayes ceiling (true p)")
    for ax, title in zip(axes, ("held-out balanced accuracy", "held-out ECE (10 bins)"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("solver trials (tasks × 8; dashed: attempts run, sequential)", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("first-probe corpus: active vs uniform labelling (arith, SYNTHETIC solver); "
                 "mean ± std over seeds × bootstraps", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(table: dict[str, Any], meta: dict[str, Any]) -> str:
    """The README rows: one line per budget, both arms."""
    head = ("| tasks | trials | uniform BA | active BA | uniform ECE | active ECE | uniform AUC | active AUC |\n"
            "|---|---|---|---|---|---|---|---|\n")

    def cell(stat: dict[str, float]) -> str:
        return f"{stat['mean']:.3f} ± {stat['std']:.3f}"

    lines = [f"| {u['tasks']} | {u['trials']} | {cell(u['balanced_accuracy'])} | {cell(a['balanced_accuracy'])} | "
             f"{cell(u['ece'])} | {cell(a['ece'])} | {cell(u['roc_auc'])} | {cell(a['roc_auc'])} |"
             for u, a in zip(table["uniform"], table["active"], strict=True)]
    g = meta["goals"]
    per_boot = ", ".join(f"bootstrap {b}: {_share_text(v)}" for b, v in g["per_bootstrap"].items())
    seq = meta["sequential"]
    variants = "; ".join(f"{name} {_share_text(seq['goal'][name], 'trial_share')}" for name in VARIANTS)
    per_task = ", ".join(f"{a:.2f}" for a in seq["pool_attempts_per_task"].values())
    return head + "\n".join(lines) + (
        f"\n\nGoal: active reaches the uniform full-budget BA ({g['uniform_full_budget_ba']:.3f}) with "
        f"{_share_text(g)} of its solver trials (goal ≤ 40 %: {g['met']}); {per_boot}.\n"
        f"With sequential labelling (same labels; {per_task} of {seq['k']} attempts per pool task, per bootstrap), "
        f"share of the uniform corpus's full-budget trials each arm spends to reach its BA: {variants}.\n")


def _share_text(goal: dict[str, Any], key: str = "active_trial_share") -> str:
    share = goal[key]
    return "not reached" if share is None else f"{share:.0%}"


def run(settings: Settings, data_dir: Path, name: str) -> dict[str, Any]:
    """Everything; one torch thread (a shared 2-core box)."""
    torch.set_num_threads(1)
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    datasets: list[dict[str, Any]] = []
    for boot in settings.bootstraps:
        data = build_data(settings, data_dir, boot, click.echo)
        datasets.append({"bootstrap": boot, "validity": data.validity, "pool": len(data.pool_labels),
                         "heldout": int(data.y_held.size), "heldout_in_band": float(data.y_held.mean()),
                         "pool_in_band": float(np.mean([bool(lab.in_band) for lab in data.pool_labels])),
                         "bayes": data.bayes, "sequential_attempts_per_task": float(data.pool_attempts.mean())})
        for seed in range(settings.seeds):
            arms = run_seed(data, settings, seed)
            runs.append({"bootstrap": boot, "seed": seed, "arms": arms})
            click.echo(f"bootstrap {boot} seed {seed} at {time.perf_counter() - started:.0f}s: BA " + "; ".join(
                f"{arm} " + " ".join(f"{c['balanced_accuracy']:.3f}" for c in arms[arm]) for arm in ARMS))
    table = aggregate(runs, settings)
    bayes_ba = float(np.mean([d["bayes"]["balanced_accuracy"] for d in datasets]))
    meta = {"settings": asdict(settings), "solver": benchmark_solver().solver_id, "solver_is_synthetic": True,
            "band": asdict(BAND), "feature": SPEC.name, "datasets": datasets, "bayes_ceiling_ba": bayes_ba,
            "total_wall_s": time.perf_counter() - started}
    meta["goals"] = goals(table, runs, settings)
    meta["sequential"] = sequential_summary(runs, settings, datasets)
    data_out = {**meta, "arms": list(ARMS), "table": table, "runs": runs}
    write_result(name, data_out)
    plot(table, bayes_ba, RESULTS / f"{name}.png")
    return data_out


@click.command()
@click.option("--quick", is_flag=True, help="tiny settings: checks the pipeline, not the goal")
@click.option("--seeds", type=int, default=None, help="seeds per bootstrap (default 5)")
@click.option("--seed-share", type=float, default=None, help="active: share of the budget labelled uniformly first")
@click.option("--rounds", type=int, default=None, help="active: rounds after the seed set")
@click.option("--members", type=int, default=None, help="active: ensemble members (1 = margin sampling, no std)")
@click.option("--bootstraps", type=int, default=None, help="generator bootstraps, seeds 0..N-1 (default 2)")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".propel"), show_default=True)
@click.option("--name", default="active_labelling", show_default=True, help="result file name")
def main(quick: bool, seeds: int | None, seed_share: float | None, rounds: int | None, members: int | None,
         bootstraps: int | None, data_dir: Path, name: str) -> None:
    """Uniform vs active corpus labelling: probe BA/ECE on a held-out set against solver trials."""
    settings = Settings.quick() if quick else Settings()
    given: dict[str, Any] = {"seeds": seeds, "seed_share": seed_share, "rounds": rounds, "members": members}
    settings = replace(settings, **{k: v for k, v in given.items() if v is not None})
    if bootstraps is not None:
        settings = replace(settings, bootstraps=tuple(range(bootstraps)))
    data = run(settings, data_dir, name)
    click.echo(markdown(data["table"], data))


if __name__ == "__main__":
    main()

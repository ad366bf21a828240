"""SWE probe balanced accuracy under cross-repository CV vs a random k-fold split (issue #21 item 7).

LABELS ARE SYNTHETIC: every bug is labelled by the synthetic SWE solver (a benchmark instrument,
``synthetic:swe-logistic``: success probability a logistic function of the bug's operator, edit
size and failing-test count; a success's fix is really graded by the suite), k = 3 trials, SWE band
(in band at 1–2 solves of ≥ 2 valid trials). The numbers measure whether a probe on the frozen
reference's activations recovers *that* function, not a real solver's frontier.

Pipeline (the product's own functions):

1. **Corpus** over ``--repos`` (fetched and preflighted: ``propel swe fetch``): ``--per-repo`` bug spec
   lines drawn uniformly from each repository's spec space (what the tiny spec generator is
   pretrained on), validated by ``SweDomain.validate_batch`` (the verifier in the sandbox, memoised).
2. **Labels**: ``curriculum.labelling.spotcheck.label_tasks`` with ``SyntheticSweSolver`` and ``swe_band()``.
3. **Features**: the reference is the bootstrapped tiny SWE generator (``bootstrap:swe`` on these
   repositories, the daemon's CPU reference). Each bug is read two ways: its spec line (the embedded
   spec generator: one turn) and a **scripted replay** of an agent generator episode built from the
   verified bug (turn 1 picks the site — the spec line — and edits, the tool answers with the changed
   lines; turn 2 runs the tests, the tool answers with the issue text; turn 3 submits ``repo:`` + the
   diff), rendered by ``curriculum.domains.swe.trajectory.episode_trajectory`` and pooled per turn
   with ``mean_full`` then across turns with each turn pooling (mean, last, last_half, attention).
   The replay is not model-written: no agent generator runs here (no endpoint).
4. **Probe BA**: ``probes.sweep.run_sweep`` per feature × head × balance, once with
   ``split="group_kfold"`` (leave-one-repository-out: no repository in train and validation) and once
   with ``split="kfold"`` (same number of folds over shuffled rows: repositories leak), 3 seeds.
5. **Oracle**: the synthetic solver's own skill function — in-band probability
   ``q = 1 − p³ − (1 − p)³`` from its success probability ``p`` — thresholded at the in-band base rate
   (BA-optimal) and at 0.5; its BA against the realised labels is what a perfect reading of the
   instrument reaches given trial noise (and suite-grading noise: ``reference_fixes_graded_unsolved``).

Usage: ``python -m benchmarks.swe_probe [--repos parse xmltodict inflection six toolz more-itertools]
[--per-repo 22] [--quick]``. Writes ``benchmarks/results/swe_probe.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import RESULTS, write_result
from curriculum.common.solver_api import Sampling
from curriculum.domains.base import Task
from curriculum.domains.swe.domain import SweDomain, swe_band
from curriculum.domains.swe.synthetic import SyntheticSweSolver
from curriculum.domains.swe.trajectory import bug_probe_input, episode_trajectory
from curriculum.labelling.spotcheck import LabelValue, label_tasks
from probes import TURN_POOLINGS, FeatureSpec, SweepConfig, TrainConfig, run_sweep
from probes.data import grouped_kfold, random_kfold
from probes.extraction import ExtractionConfig, FeatureExtractor
from probes.inputs import TextInput
from probes.metrics import balanced_accuracy, roc_auc
from probes.reference import FrozenReference
from probes.sweep import Split
from probes.training import train_probe

SAMPLING = Sampling(seed=1)  # the labelling trials' seed
TRAIN = TrainConfig(max_epochs=60, patience=8, lr=3e-3)
#: The head the SWE defaults train (probes.architecture = "mlp", probes.balance = "weighted").
DEFAULT_HEAD = ("mlp", "weighted")
REPOS = ["parse", "xmltodict", "inflection", "six", "toolz", "more-itertools"]
SYNTHETIC_NOTE = ("LABELS ARE SYNTHETIC: synthetic SWE solver (logistic in operator, edit size and failing-test "
                  "count; a benchmark instrument, not a model), k=3, SWE band 1-2 of >= 2 valid trials")


def build_corpus(domain: SweDomain, repos: list[str], per_repo: int, seed: int) -> tuple[list[Task], int]:
    """Valid bugs from ``per_repo`` uniformly drawn spec lines per repository; also the episodes run."""
    rng = random.Random(seed)
    tasks: list[Task] = []
    episodes = 0
    for name in repos:
        space = sorted(s.render() for s in domain.spec_space(name))
        lines = rng.sample(space, min(per_repo, len(space)))
        checks = domain.validate_batch(lines)
        episodes += len(lines)
        valid = [v.task for v in checks if v.valid]
        print(f"{name}: {len(valid)}/{len(lines)} valid bugs", flush=True)
        tasks += valid
    return tasks, episodes


def replay_turns(task: Task) -> list[dict[str, Any]]:
    """A scripted agent-generator episode for a verified mutator bug (see the module docstring)."""
    p = task.payload
    changed = "\n".join(line for line in str(p["patch"]).splitlines()
                        if line[:1] in "+-" and line[:3] not in ("+++", "---"))
    edit = {"function": {"name": "edit", "arguments": f'{{"path": "{p["changed"][0] if p["changed"] else ""}"}}'}}
    run = {"function": {"name": "bash", "arguments": '{"command": "python -m pytest -q"}'}}
    return [{"content": str(p["spec"]), "tool_calls": [edit], "tool_results": [changed]},
            {"content": "Run the suite.", "tool_calls": [run], "tool_results": [str(p["issue"])]},
            {"content": f"repo: {p['repo']}\n{changed}", "tool_calls": [], "tool_results": []}]


def success_probabilities(solver: SyntheticSweSolver, tasks: list[Task]) -> np.ndarray:
    return np.array([solver.success_probability(str(t.payload["operator"]), str(t.payload["patch"]),
                                                len(t.payload["fail_to_pass"])) for t in tasks])


def bugs_detail(domain: SweDomain, solver: SyntheticSweSolver, tasks: list[Task],
                labels: list[LabelValue]) -> list[dict[str, Any]]:
    """Per bug: repository, spec, failing tests, the solver's success probability, how many of its k answers
    were the reference fix (re-drawn: the draws are seeded) and how many trials the suite graded solved."""
    answers = solver.generate([domain.solver_prompt(t) for t in tasks], swe_band().k, SAMPLING)
    return [{"repo": t.payload["repo"], "spec": t.payload["spec"], "fail_to_pass": len(t.payload["fail_to_pass"]),
             "p_success": round(float(p), 3), "correct_answers": sum(bool(a.meta.get("correct")) for a in row),
             "solved": lab.solved, "valid": lab.valid_trials}
            for t, lab, p, row in zip(tasks, labels, success_probabilities(solver, tasks), answers, strict=True)]


def oracle(solver: SyntheticSweSolver, tasks: list[Task], y: np.ndarray) -> dict[str, float]:
    """The solver's own in-band probability ``q`` against the labels: AUC, BA at ``q ≥ 0.5`` and BA at
    ``q ≥`` the in-band base rate (the rule that maximises expected BA when ``q`` is the true probability)."""
    p = success_probabilities(solver, tasks)
    q = 1 - p**3 - (1 - p) ** 3
    return {"balanced_accuracy": round(balanced_accuracy(y, (q >= y.mean()).astype(int)), 3),
            "balanced_accuracy_at_half": round(balanced_accuracy(y, (q >= 0.5).astype(int)), 3),
            "roc_auc": round(float(roc_auc(y, q)), 3)}


def sweep_table(features: dict[FeatureSpec, np.ndarray], y: np.ndarray, rates: np.ndarray, groups: list[str],
                split: Split, folds: int, seeds: tuple[int, ...], specs: list[FeatureSpec]) -> list[dict[str, Any]]:
    """Every feature × head × balance cell under ``split`` (mean validation metrics over folds × seeds)."""
    rows: list[dict[str, Any]] = []
    for spec in specs:
        config = SweepConfig(layers=(spec.layer,), poolings=(spec.pooling,), turn_poolings=(spec.turn_pooling,),
                             architectures=("linear", "mlp"), balances=("weighted", "downsample"),
                             split=split, n_folds=folds, seeds=seeds, ece_ceiling=None, tiebreak="none",
                             train=TRAIN)
        result = run_sweep({spec: features[spec]}, y, rates, config, groups=groups)
        rows += [{"feature": spec.name, **{k: v for k, v in asdict(r).items() if k in (
            "turn_pooling", "arch", "balance", "val_balanced_accuracy", "val_auc", "val_ece", "runs")}}
            for r in result.rows]
    return rows


def pooled_oof(features: dict[FeatureSpec, np.ndarray], y: np.ndarray, groups: list[str], folds: int,
               seeds: tuple[int, ...], specs: list[FeatureSpec]) -> dict[str, dict[str, float]]:
    """Pooled out-of-fold BA of the default head (every bug predicted once by the fold that held it out,
    then one BA over all bugs; mean over seeds): comparable with the oracle, which is pooled too."""
    out: dict[str, dict[str, float]] = {}
    for spec in specs:
        x = features[spec]
        scores: dict[str, list[float]] = {"cross_repo": [], "random_kfold": []}
        for seed in seeds:
            splits = {"cross_repo": grouped_kfold(groups, folds, seed=seed),
                      "random_kfold": random_kfold(len(y), folds, seed=seed)}
            for name, parts in splits.items():
                pred = np.zeros(len(y), dtype=int)
                for tr, va in parts:
                    cfg = replace(TRAIN, seed=seed)
                    head = train_probe(x[tr], y[tr], *DEFAULT_HEAD, cfg, x[va], y[va]).head
                    pred[va] = (head.probabilities(x[va]) >= 0.5).astype(int)
                scores[name].append(balanced_accuracy(y, pred))
        out[spec.name] = {k: round(float(np.mean(v)), 3) for k, v in scores.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repos", nargs="+", default=REPOS)
    parser.add_argument("--per-repo", type=int, default=22)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=3, help="training seeds per cell")
    parser.add_argument("--cache", default=None)
    parser.add_argument("--data-dir", default=".propel", help="where the bootstrapped reference is cached")
    parser.add_argument("--quick", action="store_true", help="pipeline check: 3 repos, 8 specs each, 1 seed")
    args = parser.parse_args()
    if args.quick:
        args.repos, args.per_repo, args.seeds = args.repos[:3], 8, 1
    started = time.monotonic()
    domain = SweDomain(args.cache, split=None, repos=args.repos, runner="auto", prompt_style="tiny")
    tasks, episodes = build_corpus(domain, args.repos, args.per_repo, args.seed)
    corpus_s = time.monotonic() - started
    solver = SyntheticSweSolver(domain.cache.root, seed=0)
    labels = label_tasks(domain, solver, tasks, swe_band(), SAMPLING)
    keep = [i for i, lab in enumerate(labels) if lab.in_band is not None]
    tasks, labels = [tasks[i] for i in keep], [labels[i] for i in keep]
    y = np.array([int(bool(lab.in_band)) for lab in labels])
    label_s = time.monotonic() - started - corpus_s
    print(f"{len(tasks)} labelled bugs, {int(y.sum())} in band ({SYNTHETIC_NOTE})", flush=True)
    reference = reference_model(args, domain)
    features, specs = extract(reference, domain, tasks)
    groups = [str(t.payload["repo"]) for t in tasks]
    folds = len(set(groups))
    seeds = tuple(range(args.seeds))
    rates = np.array([lab.solved / lab.valid_trials for lab in labels])
    splits: tuple[Split, ...] = ("group_kfold", "kfold")
    table: dict[str, list[dict[str, Any]]] = {
        split: sweep_table(features, y, rates, groups, split, folds, seeds, specs) for split in splits}
    data = summary(args, tasks, labels, y, episodes, table, oracle(solver, tasks, y), folds, solver.solver_id)
    data["pooled_out_of_fold_balanced_accuracy"] = pooled_oof(features, y, groups, folds, seeds, specs)
    data["bugs_detail"] = bugs_detail(domain, solver, tasks, labels)
    data["reference_fixes_graded_unsolved"] = sum(b["correct_answers"] - b["solved"] for b in data["bugs_detail"])
    data["seconds"] = {"corpus": round(corpus_s, 1), "labels": round(label_s, 1),
                       "total": round(time.monotonic() - started, 1)}
    path = write_result("swe_probe", data)
    plot(data, RESULTS / "swe_probe.png")
    print(f"wrote {path}")


def reference_model(args: argparse.Namespace, domain: SweDomain) -> FrozenReference:
    from curriculum.rl.bootstrap import bootstrap

    options = {"cache_dir": str(domain.cache.root), "split": None, "repos": args.repos}
    result = bootstrap("swe", data_dir=Path(args.data_dir), show_progress=False, domain_options=options)
    return FrozenReference.load(str(result.path))


def extract(reference: FrozenReference, domain: SweDomain,
            tasks: list[Task]) -> tuple[dict[FeatureSpec, np.ndarray], list[FeatureSpec]]:
    """Spec-line features (one turn) and replayed-trajectory features per turn pooling."""
    extractor = FeatureExtractor(reference, ExtractionConfig(batch_size=16, max_length=512))
    spec_line = FeatureSpec(-1, "mean_full")
    turn_specs = [FeatureSpec(-1, "mean_full", turn) for turn in TURN_POOLINGS]
    lines: list[TextInput] = [bug_probe_input(domain, t) for t in tasks]
    replays: list[TextInput] = [episode_trajectory(replay_turns(t)) for t in tasks]
    features = extractor.extract(lines, [spec_line]) | extractor.extract(replays, turn_specs)
    return features, [spec_line, *turn_specs]


def ba_table(table: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per feature: BA of the default head under each split, of its downsampled twin, and the best cell."""
    def cells(split: str, feature: str) -> list[dict[str, Any]]:
        return [r for r in table[split] if r["feature"] == feature]

    def head(split: str, feature: str, balance: str) -> float:
        row = next(r for r in cells(split, feature) if (r["arch"], r["balance"]) == (DEFAULT_HEAD[0], balance))
        return round(float(row["val_balanced_accuracy"]), 3)

    def best(split: str, feature: str) -> dict[str, Any]:
        top = max(cells(split, feature), key=lambda r: r["val_balanced_accuracy"])
        return {"ba": round(float(top["val_balanced_accuracy"]), 3), "head": f"{top['arch']}/{top['balance']}"}

    features = list(dict.fromkeys(r["feature"] for r in table["group_kfold"]))
    weighted = DEFAULT_HEAD[1]
    return {f: {"cross_repo": head("group_kfold", f, weighted), "random_kfold": head("kfold", f, weighted),
                "cross_repo_downsample": head("group_kfold", f, "downsample"),
                "random_kfold_downsample": head("kfold", f, "downsample"),
                "cross_repo_best_of_grid": best("group_kfold", f), "random_kfold_best_of_grid": best("kfold", f)}
            for f in features}


def summary(args: argparse.Namespace, tasks: list[Task], labels: list[LabelValue], y: np.ndarray, episodes: int,
            table: dict[str, list[dict[str, Any]]], oracle_ba: dict[str, float], folds: int,
            solver_id: str) -> dict[str, Any]:
    per_feature = ba_table(table)
    repos = sorted({str(t.payload["repo"]) for t in tasks})
    return {
        "synthetic_labels": True, "note": SYNTHETIC_NOTE, "solver": solver_id, "band": {"k": 3, "lo": 1, "hi": 2,
                                                                                         "min_valid_trials": 2},
        "repos": repos, "per_repo_specs": args.per_repo, "episodes": episodes, "bugs": len(tasks),
        "in_band": int(y.sum()), "bugs_per_repo": {r: sum(str(t.payload["repo"]) == r for t in tasks) for r in repos},
        "in_band_per_repo": {r: int(sum(y[i] for i, t in enumerate(tasks) if str(t.payload["repo"]) == r))
                             for r in repos},
        "solve_counts": {str(s): sum(lab.solved == s for lab in labels) for s in range(4)},
        "folds": folds, "seeds": args.seeds, "reference": "bootstrap:swe (tiny char-level Qwen2, 4 layers x 128)",
        "oracle": oracle_ba, "head": "/".join(DEFAULT_HEAD), "balanced_accuracy": per_feature, "cells": table,
        "metric_note": ("balanced_accuracy: mean validation BA over folds x seeds (the sweep's selection metric; "
                        "every repository's fold weighs the same, however few bugs it has) of the SWE default head "
                        "(mlp, class-weighted loss); *_downsample = the same head trained on a downsampled set; "
                        "best_of_grid = the best of linear/mlp x weighted/downsample (selection-biased upward). "
                        "Validation folds double as early-stopping sets (optimistic for both splits). "
                        "pooled_out_of_fold_balanced_accuracy: one BA over all bugs, each predicted by the fold "
                        "that held it out (comparable with the oracle)"),
    }


def plot(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    feats = list(data["balanced_accuracy"])
    panels = [("mean over folds (sweep selection metric)",
               {k: data["balanced_accuracy"][f]["cross_repo"] for k, f in enumerate(feats)},
               {k: data["balanced_accuracy"][f]["random_kfold"] for k, f in enumerate(feats)}),
              ("pooled out-of-fold (comparable with the oracle)",
               {k: data["pooled_out_of_fold_balanced_accuracy"][f]["cross_repo"] for k, f in enumerate(feats)},
               {k: data["pooled_out_of_fold_balanced_accuracy"][f]["random_kfold"] for k, f in enumerate(feats)})]
    x = np.arange(len(feats))
    names = [f.replace("L-1/mean_full/turns:", "replay\nturns: ").replace("L-1/mean_full", "spec line\n(1 turn)")
             for f in feats]
    fig, axes = plt.subplots(1, 2, figsize=(14, 5), sharey=True)
    for ax, (title, cross, leak) in zip(axes, panels, strict=True):
        folds = data["folds"]
        ax.bar(x - 0.2, list(cross.values()), 0.4, label=f"cross-repository CV (leave-one-repo-out, {folds} folds)")
        ax.bar(x + 0.2, list(leak.values()), 0.4, label="random k-fold (repositories leak)")
        for i in range(len(feats)):
            ax.text(i - 0.2, cross[i] + 0.005, f"{cross[i]:.2f}", ha="center", fontsize=7)
            ax.text(i + 0.2, leak[i] + 0.005, f"{leak[i]:.2f}", ha="center", fontsize=7)
        oracle_ba = data["oracle"]["balanced_accuracy"]
        ax.axhline(oracle_ba, ls="--", color="black", lw=1,
                   label=f"oracle: synthetic solver's own in-band probability, pooled ({oracle_ba:.2f})")
        ax.axhline(0.5, ls=":", color="grey", lw=1)
        ax.set_xticks(x, names, fontsize=8)
        ax.set_ylim(0.3, 0.9)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    axes[0].set_ylabel(f"probe balanced accuracy ({data['head']} head)")
    fig.suptitle(f"SWE probe BA - SYNTHETIC LABELS (synthetic SWE solver, k=3, band 1-2 of >=2 valid): {data['bugs']} "
                 f"bugs, {len(data['repos'])} repos, {data['seeds']} seeds; reference: tiny bootstrap:swe", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

if __name__ == "__main__":
    main()

"""The diversity term's weight and measure, swept side by side on the toy table's code (issue #22).

One run, per generator bootstrap and seed: ``Base``, ``PROPEL`` with its co-evolution fork, and for every
configuration ``MEASURE:WEIGHT`` of ``--configs`` the pair ``PROPEL + diversity`` / ``PROPEL + co-evolution
+ diversity`` with ``rl.diversity_measure`` and ``rl.diversity_weight`` set for the whole run. Every row is
:mod:`benchmarks.toy_propel`'s (the daemon's engine and driver, the same probes, seeds and evaluation); only
the set of rows differs. The goal of issue #22 is judged per configuration on the co-evolution + diversity
row against Base and PROPEL of the same run, on the mean and in every (bootstrap, seed) pair:

* keeps ≥ 75 % of PROPEL's utility lift over Base;
* Self-BLEU-3 ≤ Base + 0.03, Distinct-3 ≥ Base − 0.03, top-topic share ≤ Base + 0.1.

    .venv/bin/python -m benchmarks.diversity_sweep --configs "jaccard:1,self_bleu:3" [--seeds 3] [--bootstraps 1]
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import numpy as np
import torch

from benchmarks._common import COMMIT_AT_START, RESULTS, write_result
from benchmarks.toy_propel import BAND, PairSpec, Settings, build_shared, run_base, run_probe_pair
from benchmarks.toy_report import aggregate

COEVO = "PROPEL + co-evolution"
log = logging.getLogger("benchmarks.diversity_sweep")


def parse_configs(text: str) -> list[tuple[str, float]]:
    out = []
    for item in (s.strip() for s in text.split(",") if s.strip()):
        measure, _, weight = item.partition(":")
        out.append((measure, float(weight)))
    return out


def row_names(measure: str, weight: float) -> tuple[str, str]:
    tag = f"[{measure} w={weight:g}]"
    return f"PROPEL + diversity {tag}", f"PROPEL + co-evolution + diversity {tag}"


def run_seed(shared: Any, settings: Settings, root: Path, seed: int,
             configs: list[tuple[str, float]]) -> dict[str, dict[str, Any]]:
    out = {"Base": run_base(shared, settings, seed)}
    out |= run_probe_pair(shared, settings, root, seed, PairSpec(("PROPEL", COEVO), ["mlp"], settings.steps,
                                                                  shared.corpus_trials))
    for measure, weight in configs:
        spec = PairSpec(row_names(measure, weight), ["mlp"], settings.steps, shared.corpus_trials,
                        rl={"diversity_weight": weight, "diversity_measure": measure})
        out |= run_probe_pair(shared, settings, root, seed, spec)
    return {row: value | {"seed": seed} for row, value in out.items()}


def _paired(per_seed: dict[str, list[dict[str, Any]]], row: str, key: str) -> np.ndarray:
    """``row``'s ``key`` minus Base's, per (bootstrap, seed) run, in run order."""
    return np.array([r[key] - b[key] for r, b in zip(per_seed[row], per_seed["Base"], strict=True)])


def judge(per_seed: dict[str, list[dict[str, Any]]], row: str) -> dict[str, Any]:
    """Issue #22's goal for ``row`` (a co-evolution + diversity row): on the mean and in every run."""
    lift_propel = _paired(per_seed, "PROPEL", "utility")
    lift_row = _paired(per_seed, row, "utility")
    share = lift_row / lift_propel.mean()  # each run's lift against PROPEL's mean lift (its own is noisier)
    checks = {"share_of_propel_lift": (lift_row, lambda v: v >= 0.75 * lift_propel.mean(), 0.75),
              "self_bleu3_minus_base": (_paired(per_seed, row, "self_bleu3"), lambda v: v <= 0.03, 0.03),
              "distinct3_minus_base": (_paired(per_seed, row, "distinct3"), lambda v: v >= -0.03, -0.03),
              "top_topic_minus_base": (_paired(per_seed, row, "top_topic_share"), lambda v: v <= 0.1, 0.1)}
    out: dict[str, Any] = {"per_run_share_of_propel_lift": share.tolist()}
    for name, (values, ok, bound) in checks.items():
        shown = lift_row.mean() / lift_propel.mean() if name == "share_of_propel_lift" else values.mean()
        per_run = share if name == "share_of_propel_lift" else values
        out[name] = {"mean": float(shown), "min": float(np.nanmin(per_run)), "max": float(np.nanmax(per_run)),
                     "bound": bound, "met_on_mean": bool(ok(values.mean())),
                     "met_in_every_run": bool(all(ok(v) for v in values))}
    out["met_on_mean"] = all(out[k]["met_on_mean"] for k in checks)
    out["met_in_every_run"] = all(out[k]["met_in_every_run"] for k in checks)
    return out


def plot(table: dict[str, dict[str, Any]], configs: list[tuple[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = ["Base", "PROPEL", COEVO, *[row_names(m, w)[1] for m, w in configs]]
    labels = ["Base", "PROPEL", "co-evo", *[f"co-evo+div\n{m} w={w:g}" for m, w in configs]]
    fig, axes = plt.subplots(1, 3, figsize=(4 + 1.6 * len(rows), 4.2))
    base = table["Base"]
    for ax, key, title, bound in ((axes[0], "utility", "utility (in band)", None),
                                  (axes[1], "self_bleu3", "Self-BLEU-3 (goal ≤ base + 0.03)", 0.03),
                                  (axes[2], "distinct3", "Distinct-3 (goal ≥ base − 0.03)", -0.03)):
        means = [table[r][f"{key}_mean"] for r in rows]
        stds = [table[r][f"{key}_std"] for r in rows]
        ax.bar(range(len(rows)), means, yerr=stds, capsize=3, color=["#888", "#4c72b0", "#55a868"]
               + ["#c44e52"] * len(configs))
        if bound is not None:
            ax.axhline(base[f"{key}_mean"] + bound, ls="--", c="k", lw=1)
        else:
            lift = table["PROPEL"]["utility_mean"] - base["utility_mean"]
            ax.axhline(base["utility_mean"] + 0.75 * lift, ls="--", c="k", lw=1)
        ax.set_xticks(range(len(rows)), labels, rotation=60, fontsize=7)
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"diversity sweep (mean ± std over runs; k={BAND.k}, band {BAND.lo}-{BAND.hi})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(name: str, settings: Settings, chosen: list[tuple[str, float]], first_bootstrap: int,
          per_seed: dict[str, list[dict[str, Any]]], started: float) -> dict[str, Any]:
    """JSON + PNG of the runs so far (a long sweep keeps what it measured if it is stopped); the verdicts."""
    table = aggregate(per_seed)
    verdicts = {f"{m}:{w:g}": judge(per_seed, row_names(m, w)[1]) for m, w in chosen}
    boots = sorted({int(r["bootstrap"]) for r in per_seed["Base"]})
    data = {"settings": {**settings.__dict__, "bootstraps": len(boots)}, "configs": [list(c) for c in chosen],
            "bootstraps_run": boots, "first_bootstrap": first_bootstrap,
            "seeds_run": sorted({int(r["seed"]) for r in per_seed["Base"]}), "table": table, "goals": verdicts,
            "per_seed": per_seed, "commit": COMMIT_AT_START, "total_wall_s": time.perf_counter() - started}
    write_result(name, data)
    plot(table, chosen, RESULTS / f"{name}.png")
    return verdicts


def pool_runs(names: list[str], name: str) -> None:
    """Pool the (bootstrap, seed) runs of several sweeps: every row was run in each of them for its own seeds,
    so the pooled Base/PROPEL/co-evolution rows stay paired with the diversity rows run by run."""
    runs = [json.loads((RESULTS / f"{n}.json").read_text()) for n in names]
    chosen = [tuple(c) for c in runs[0]["configs"] if all(c in r["configs"] for r in runs)]
    rows = ["Base", "PROPEL", COEVO, *[r for m, w in chosen for r in row_names(m, float(w))]]
    per_seed = {row: [v for r in runs for v in r["per_seed"][row]] for row in rows}
    table = aggregate(per_seed)
    verdicts = {f"{m}:{float(w):g}": judge(per_seed, row_names(m, float(w))[1]) for m, w in chosen}
    write_result(name, {"pooled": {n: r["commit"] for n, r in zip(names, runs, strict=True)},
                        "settings": runs[0]["settings"], "configs": [list(c) for c in chosen], "table": table,
                        "goals": verdicts, "per_seed": per_seed, "commit": COMMIT_AT_START})
    plot(table, [(m, float(w)) for m, w in chosen], RESULTS / f"{name}.png")
    show(verdicts)


def show(verdicts: dict[str, Any]) -> None:
    for key, v in verdicts.items():
        click.echo(f"{key}: met on mean {v['met_on_mean']}, in every run {v['met_in_every_run']}: " + ", ".join(
            f"{k} {v[k]['mean']:+.3f} [{v[k]['min']:+.3f}, {v[k]['max']:+.3f}]"
            for k in ("share_of_propel_lift", "self_bleu3_minus_base", "distinct3_minus_base",
                      "top_topic_minus_base")))


@click.command()
@click.option("--configs", default="jaccard:1,jaccard:10,self_bleu:1,self_bleu:3,self_bleu:10", show_default=True,
              help="comma-separated MEASURE:WEIGHT (rl.diversity_measure, rl.diversity_weight)")
@click.option("--seeds", type=int, default=3, show_default=True)
@click.option("--bootstraps", type=int, default=1, show_default=True, help="generator bootstraps 0..N-1")
@click.option("--first-bootstrap", type=int, default=0, show_default=True)
@click.option("--first-seed", type=int, default=0, show_default=True, help="seeds first-seed .. first-seed+N-1")
@click.option("--pool", default=None, help="no run: pool the runs of these result names (comma-separated) into "
              "--name, for the configurations they all ran")
@click.option("--steps", type=int, default=None, help="GRPO steps per RL run (toy default 60)")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".propel"), show_default=True)
@click.option("--name", default="toy_propel_diversity_sweep", show_default=True)
@click.option("--quick", is_flag=True, help="the toy table's tiny settings: checks the pipeline, not the goal")
def main(configs: str, seeds: int, bootstraps: int, first_bootstrap: int, first_seed: int, pool: str | None,
         steps: int | None, data_dir: Path, name: str, quick: bool) -> None:
    """Sweep the diversity term on the toy table's rows; JSON + PNG under benchmarks/results."""
    if pool:
        return pool_runs([p.strip() for p in pool.split(",") if p.strip()], name)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    chosen = parse_configs(configs)
    settings = replace(Settings.quick() if quick else Settings(), seeds=seeds, bootstraps=bootstraps)
    if steps:
        settings = replace(settings, steps=steps)
    started = time.perf_counter()
    per_seed: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="diversity_sweep_") as tmp:
        for b in range(first_bootstrap, first_bootstrap + bootstraps):
            shared = build_shared(settings, data_dir, bootstrap_seed=b)
            for seed in range(first_seed, first_seed + seeds):
                for row, value in run_seed(shared, settings, Path(tmp) / f"b{b}", seed, chosen).items():
                    per_seed.setdefault(row, []).append(value | {"bootstrap": b})
                click.echo(f"bootstrap {b} seed {seed} done at {time.perf_counter() - started:.0f}s: " + ", ".join(
                    f"{r} u={v[-1]['utility']:.3f} sb={v[-1]['self_bleu3']:.3f}" for r, v in per_seed.items()))
            verdicts = write(name, settings, chosen, first_bootstrap, per_seed, started)  # after every bootstrap
    show(verdicts)


if __name__ == "__main__":
    main()

"""Bootstrap recipe: validity of the tiny arith generator by step count and learning rate, over seeds.

Runs the product's own bootstrap (:func:`curriculum.rl.bootstrap.bootstrap`, forced, in a scratch data
directory) once per (recipe, seed) and records what ``propel run`` would print: the validity of 512
samples at temperature 1 and the training time. The recipe chosen for ``BootstrapSettings`` is the
fastest one whose validity holds ≥ 95 % on *every* seed tried (a recipe that passes on one seed and
misses on another is not taken). The load average is recorded with each arm: the machine is shared.

Usage::

    python -m benchmarks.bootstrap_recipe                       # the default grid, seeds 1 0 2
    python -m benchmarks.bootstrap_recipe --recipes 400:3e-3:30,500:4e-3:30 --seeds 0,1
    python -m benchmarks.bootstrap_recipe --quick               # 2 tiny recipes × 2 seeds (a smoke test)
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from benchmarks._common import RESULTS, write_result
from curriculum.rl.bootstrap import BootstrapSettings, bootstrap
from testkit.bootstrap_recipe import VALIDITY_GOAL, Recipe, choose, summarise

#: steps:lr:warmup arms of the default grid, cheapest first.
DEFAULT_RECIPES = ("400:3e-3:30", "400:5e-3:30", "500:4e-3:30", "600:4e-3:30", "800:4e-3:30")
QUICK_RECIPES = ("8:3e-3:2", "12:3e-3:2")


def run_arm(recipe: Recipe, seed: int, eval_samples: int) -> dict[str, Any]:
    """One forced bootstrap with ``recipe`` and ``seed``; validity and seconds as ``propel run`` reports them."""
    settings = replace(BootstrapSettings(), steps=recipe.steps, lr=recipe.lr, warmup_steps=recipe.warmup_steps,
                       seed=seed, eval_samples=eval_samples)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="propel-recipe-") as tmp:
        result = bootstrap("arith", data_dir=tmp, settings=settings, force=True, show_progress=False)
        checks = json.loads((result.path / "bootstrap.json").read_text()).get("stop_checks", [])
    return {"recipe": asdict(recipe), "seed": seed, "validity": result.validity, "train_s": result.train_s,
            "steps_trained": result.steps_trained, "stop_checks": checks,
            "total_s": time.perf_counter() - started, "load_average": [load_before, os.getloadavg()[0]],
            "settings": asdict(settings)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", default=",".join(DEFAULT_RECIPES),
                        help="comma-separated steps:lr:warmup arms (default: %(default)s)")
    parser.add_argument("--seeds", default="1,0,2",
                        help="comma-separated seeds, in order: the one most likely to miss first (default %(default)s)")
    parser.add_argument("--exhaustive", action="store_true",
                        help="run every recipe on every seed (default: stop a recipe at its first miss, and the "
                        "search at the first recipe that holds on every seed)")
    parser.add_argument("--eval-samples", type=int, default=BootstrapSettings().eval_samples,
                        help="samples per validity measurement (default: the recipe's, %(default)s)")
    parser.add_argument("--quick", action="store_true", help="two tiny recipes, two seeds, 64 samples (smoke test)")
    parser.add_argument("--name", default="bootstrap_recipe", help="result file stem in benchmarks/results/")
    args = parser.parse_args(argv)
    recipes = [Recipe.parse(r) for r in (QUICK_RECIPES if args.quick else args.recipes.split(","))]
    seeds = [0, 1] if args.quick else [int(s) for s in args.seeds.split(",")]
    eval_samples = 64 if args.quick else args.eval_samples
    arms = search(recipes, seeds, eval_samples, exhaustive=args.exhaustive,
                  on_arm=lambda done: _write(args.name, eval_samples, seeds, done, recipes, args.quick, final=False))
    result = _write(args.name, eval_samples, seeds, arms, recipes, args.quick, final=True)
    chosen = result["chosen"]
    print("chosen:", chosen["label"] if chosen else f"none holds {VALIDITY_GOAL:.0%} on every seed")
    return result


def search(recipes: list[Recipe], seeds: list[int], eval_samples: int, exhaustive: bool = False,
           on_arm: Callable[[list[dict[str, Any]]], object] | None = None) -> list[dict[str, Any]]:
    """Run the arms, recipes in the given order (cheapest first), each on ``seeds`` in order.

    Unless ``exhaustive``: a recipe's remaining seeds are skipped once one seed misses the goal (it
    cannot be chosen any more), and the search stops after the first recipe that holds on every seed
    (put the seed most likely to miss first). ``on_arm(arms so far)`` after each arm."""
    arms: list[dict[str, Any]] = []
    for recipe in recipes:
        for seed in seeds:
            arm = run_arm(recipe, seed, eval_samples)
            arms.append(arm)
            print(f"{recipe.label} · seed {seed}: {arm['validity']:.1%} valid, {arm['steps_trained']:,} steps "
                  f"trained in {arm['train_s']:.0f} s "
                  f"(load {arm['load_average'][0]:.1f})", flush=True)
            if on_arm is not None:
                on_arm(arms)
            if arm["validity"] < VALIDITY_GOAL and not exhaustive:
                break
        else:
            if not exhaustive:
                break
    return arms


def _write(name: str, eval_samples: int, seeds: list[int], arms: list[dict[str, Any]], recipes: list[Recipe],
           quick: bool, final: bool) -> dict[str, Any]:
    tried = [r for r in recipes if any(a["recipe"] == asdict(r) for a in arms)]
    summary = summarise(arms, tried, seeds)
    result = {"goal": {"validity_every_seed": VALIDITY_GOAL}, "eval_samples": eval_samples, "seeds": seeds,
              "arms": arms, "summary": summary, "chosen": choose(summary), "quick": quick, "complete": final,
              "recipes_planned": [asdict(r) for r in recipes], "default_recipe": asdict(BootstrapSettings())}
    write_result(name, result)
    if final:
        _plot(summary, name)
    return result


def _plot(summary: list[dict[str, Any]], name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
    for i, s in enumerate(summary):
        ax.scatter([i] * len(s["validity"]), [100 * v for v in s["validity"]], label=None)
        for seed, v in zip(s["seeds"], s["validity"], strict=True):
            ax.annotate(f"s{seed}", (i, 100 * v), fontsize=7, xytext=(4, 0), textcoords="offset points")
    ax.axhline(100 * VALIDITY_GOAL, color="red", ls="--", lw=1, label="goal (every seed)")
    labels = [s["label"].replace(" · ", "\n") for s in summary]
    ax.set_xticks(range(len(summary)), labels, fontsize=7)
    ax.set_ylabel("validity (% of samples)")
    ax.legend(fontsize=7)
    bx.bar(range(len(summary)), [s["mean_train_s"] for s in summary])
    bx.set_xticks(range(len(summary)), labels, fontsize=7)
    bx.set_ylabel("training seconds (mean over seeds)")
    fig.suptitle("bootstrap recipe: validity per seed and training time (arith, 1 thread)", fontsize=9)
    fig.savefig(RESULTS / f"{name}.png", dpi=120)


if __name__ == "__main__":
    main()

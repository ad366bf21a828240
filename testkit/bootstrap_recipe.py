"""The bootstrap recipe search's rules (:mod:`benchmarks.bootstrap_recipe`, issue #38): a recipe, the
per-recipe summary over seeds, and the choice (fewest steps holding the validity goal on every seed).

Kept apart from the benchmark so tests check it without importing a benchmark.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: The validity the recipe must hold on every seed (issue #38).
VALIDITY_GOAL = 0.95


@dataclass(frozen=True)
class Recipe:
    steps: int
    lr: float
    warmup_steps: int

    @classmethod
    def parse(cls, text: str) -> Recipe:
        steps, lr, warmup = text.split(":")
        return cls(int(steps), float(lr), int(warmup))

    @property
    def label(self) -> str:
        return f"{self.steps} steps · lr {self.lr:g} · warmup {self.warmup_steps}"


def summarise(arms: list[dict[str, Any]], recipes: list[Recipe], seeds: list[int]) -> list[dict[str, Any]]:
    """Per recipe: min/mean validity over the seeds run, mean train seconds, and whether it holds the
    goal on every seed of ``seeds`` (a recipe whose remaining seeds were skipped does not)."""
    out = []
    for recipe in recipes:
        rows = [a for a in arms if a["recipe"] == asdict(recipe)]
        vals = [a["validity"] for a in rows]
        run_seeds = [a["seed"] for a in rows]
        out.append({"recipe": asdict(recipe), "label": recipe.label, "seeds": run_seeds,
                    "seeds_skipped": [s for s in seeds if s not in run_seeds],
                    "validity": vals, "min_validity": min(vals), "mean_validity": sum(vals) / len(vals),
                    "mean_train_s": sum(a["train_s"] for a in rows) / len(rows),
                    "holds_goal_every_seed": min(vals) >= VALIDITY_GOAL and set(seeds) <= set(run_seeds)})
    return out


def choose(summary: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The fewest-steps recipe that holds the goal on every seed (ties: the faster one)."""
    ok = [s for s in summary if s["holds_goal_every_seed"]]
    return min(ok, key=lambda s: (s["recipe"]["steps"], s["mean_train_s"])) if ok else None

"""The cost-curves benchmark's arms and its summary: lift per 1,000 solver trials against SIL's per horizon,
and the issue #22 goal (≥ 3× SIL's at the final horizon). Used by ``benchmarks/cost_curves.py`` and its
test (shared here so neither imports the other)."""

from __future__ import annotations

from typing import Any

import click
import numpy as np

ACTIVE_ARM = "PROPEL (active corpus) + co-evolution"
ARMS = ("PROPEL", "PROPEL + co-evolution", ACTIVE_ARM, "SIL")


def summarise(curves: dict[str, list[list[dict[str, float]]]], base: list[float],
              trial_costs: tuple[float, ...]) -> dict[str, Any]:
    """Mean ± std per step, lift per 1,000 trials per horizon, and the goal at the final horizon."""
    base_mean = float(np.mean(base))
    out: dict[str, Any] = {"base_utility": base_mean, "arms": {}}
    for arm, runs in curves.items():
        util = np.array([[p["utility"] for p in run] for run in runs])
        trials = np.array([[p["trials"] for p in run] for run in runs]).mean(axis=0)
        rl_s = np.array([[p["rl_s"] for p in run] for run in runs]).mean(axis=0)
        lift = util.mean(axis=0) - base_mean
        out["arms"][arm] = {
            "step": [p["step"] for p in runs[0]], "utility_mean": util.mean(axis=0).tolist(),
            "utility_std": (util.std(axis=0, ddof=1) if len(runs) > 1 else np.zeros(util.shape[1])).tolist(),
            "utility_final_per_seed": util[:, -1].tolist(),
            "trials": trials.tolist(), "rl_s": rl_s.tolist(),
            "lift_per_1k_trials": (1000 * lift / np.maximum(trials, 1)).tolist(),
            "solver_seconds": {str(c): (trials * c + rl_s).tolist() for c in trial_costs}}
    sil = out["arms"].get("SIL")
    out["goal"] = {arm: _goal(entry, sil) for arm, entry in out["arms"].items() if arm != "SIL" and sil}
    return out


def _goal(propel: dict[str, Any], sil: dict[str, Any], target: float = 3.0) -> dict[str, Any]:
    """The issue's goal for one PROPEL arm against SIL: lift per trial ratio at the final horizon (≥
    ``target``), and the first chunk at which its lift per trial reaches SIL's and ``target`` × SIL's."""
    # a ratio of lifts means something only where SIL lifts utility at all
    ratios = [p / s if s > 0 else None for p, s in zip(propel["lift_per_1k_trials"], sil["lift_per_1k_trials"],
                                                      strict=True)]
    final = ratios[-1]

    def first_step(times: float) -> float | None:
        steps = [step for step, p, s in zip(propel["step"], propel["lift_per_1k_trials"], sil["lift_per_1k_trials"],
                                            strict=True) if p > 0 and p >= times * s]
        return steps[0] if steps else None

    return {"vs_sil_lift_per_trial_final": final, "target": target, "met": final is not None and final >= target,
            "ratio_by_step": ratios, "first_step_per_trial_at_least_sil": first_step(1.0),
            "first_step_per_trial_at_least_target_x_sil": first_step(target),
            "note": None if final is not None else "SIL shows no lift at the final horizon"}


def parse_arms(text: str) -> tuple[str, ...]:
    """``--arms``: comma-separated names from :data:`ARMS`, run in :data:`ARMS`' order."""
    chosen = {a.strip() for a in text.split(",") if a.strip()}
    unknown = sorted(chosen - set(ARMS))
    if unknown or not chosen:
        raise click.BadParameter(f"unknown arms {unknown}: choose from {', '.join(ARMS)}", param_hint="--arms")
    return tuple(a for a in ARMS if a in chosen)

"""Statistics of the closed loop (#35): arms compared paired by seed, mean ± 95 % interval.

A per-seed curve is the arm's held-out accuracy after each round, from the common start (step 0, no
rollout): ``xs`` trainer steps or cumulative solver rollouts (every rollout: the trainer's, the filter's
dropped groups', the daemon's spot-checks and drift re-measurements). *Reach*: the x at which an arm's
curve first reaches a target accuracy (linear interpolation between rounds; None if it never does).
*Reach ratio* of arm A to arm B for one seed: A's x at B's final accuracy (of the same seed) over B's x
at its end; A < 1 means A got to B's final with less. Seeds where A never reaches are counted, not
dropped silently.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def mean_ci(values: Sequence[float], level: float = 0.95) -> dict[str, Any]:
    """Mean and two-sided Student-t interval over seeds (``n`` < 2: no interval)."""
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = int(arr.size)
    if n == 0:
        return {"mean": None, "lo": None, "hi": None, "n": 0}
    mean = float(arr.mean())
    if n < 2:
        return {"mean": round(mean, 4), "lo": None, "hi": None, "n": n}
    from scipy import stats

    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * arr.std(ddof=1) / math.sqrt(n))
    return {"mean": round(mean, 4), "lo": round(mean - half, 4), "hi": round(mean + half, 4), "n": n}


def reach(xs: Sequence[float], ys: Sequence[float], target: float) -> float | None:
    """The first x at which the curve ``ys`` reaches ``target`` (interpolated); None if never."""
    for i in range(len(xs)):
        if ys[i] >= target:
            if i == 0:
                return float(xs[0])
            return float(xs[i - 1] + (xs[i] - xs[i - 1]) * (target - ys[i - 1]) / (ys[i] - ys[i - 1]))
    return None


def curve(rounds: Sequence[dict[str, Any]], start: float, x: str) -> tuple[list[float], list[float]]:
    """One seed's held-out curve from the start: x = ``steps`` or ``rollouts`` (all solver rollouts)."""
    xs = [0.0] + [float(r["steps"]) if x == "steps" else float(all_rollouts(r)) for r in rounds]
    return xs, [start] + [float(r["heldout_accuracy"]) for r in rounds]


def all_rollouts(rec: dict[str, Any]) -> int:
    """Every solver rollout so far: the trainer's, the filter's dropped groups', the daemon's trials."""
    return int(rec["rollouts"]) + int(rec["filter_rollouts"]) + int(rec["daemon_trials"])


def reach_ratios(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], x: str) -> dict[str, Any]:
    """Paired by seed: A's x at B's final accuracy over B's final x; ``a``/``b``: per-seed results."""
    by_seed = {r["seed"]: r for r in b}
    ratios: list[float] = []
    never = 0
    for ra in a:
        rb = by_seed.get(ra["seed"])
        if rb is None:
            continue
        xa, ya = curve(ra["rounds"], ra["start_heldout"], x)
        xb, yb = curve(rb["rounds"], rb["start_heldout"], x)
        got = reach(xa, ya, yb[-1])
        if got is None:
            never += 1
        else:
            ratios.append(got / xb[-1] if xb[-1] else math.inf)
    return {**mean_ci(ratios), "never_reached": never, "per_seed": [round(r, 4) for r in ratios]}


def paired_difference(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], metric: str) -> dict[str, Any]:
    """Per seed, A's final ``metric`` minus B's; mean ± 95 % interval."""
    by_seed = {r["seed"]: r for r in b}
    diffs = [float(ra["rounds"][-1][metric] or 0.0) - float(by_seed[ra["seed"]]["rounds"][-1][metric] or 0.0)
             for ra in a if ra["seed"] in by_seed]
    return mean_ci(diffs)


def paired_ratio(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], metric: str) -> dict[str, Any]:
    """Per seed, A's final ``metric`` over B's (seeds where B's is 0 are left out); mean ± 95 % interval."""
    by_seed = {r["seed"]: r for r in b}
    ratios = []
    for ra in a:
        rb = by_seed.get(ra["seed"])
        if rb is not None and rb["rounds"][-1][metric]:
            ratios.append(float(ra["rounds"][-1][metric] or 0.0) / float(rb["rounds"][-1][metric]))
    return mean_ci(ratios)


def wait_share(results: Sequence[dict[str, Any]], key: str = "wait_s") -> dict[str, Any]:
    """The trainer's share of its wall-clock spent waiting on the server (per seed, final round);
    ``key`` = ``queue_wait_s``: on an empty queue alone (results without it are left out)."""
    return mean_ci([r["rounds"][-1][key] / r["rounds"][-1]["train_s"] for r in results
                    if r["rounds"][-1].get("train_s") and key in r["rounds"][-1]])


def comparisons(per_seed: Sequence[dict[str, Any]], focus: str = "continuous") -> dict[str, Any]:
    """``focus`` against every other arm, paired by seed: reach ratios both ways (steps and rollouts),
    the final held-out difference; and the best non-daemon arm (highest mean final held-out)."""
    arms: dict[str, list[dict[str, Any]]] = {}
    for r in per_seed:
        arms.setdefault(r["arm"], []).append(r)
    if focus not in arms:
        return {}
    out: dict[str, Any] = {"vs": {}}
    for other, runs in arms.items():
        if other == focus:
            continue
        out["vs"][other] = {
            "steps_to_reach_its_final": reach_ratios(arms[focus], runs, "steps"),
            "rollouts_to_reach_its_final": reach_ratios(arms[focus], runs, "rollouts"),
            "its_steps_to_reach_focus_final": reach_ratios(runs, arms[focus], "steps"),
            "its_rollouts_to_reach_focus_final": reach_ratios(runs, arms[focus], "rollouts"),
            "final_heldout_difference": paired_difference(arms[focus], runs, "heldout_accuracy")}
    daemon = ("continuous", "static", "trainer_labels", "continuous_filter")  # testkit.closed_loop.DAEMON_ARMS
    outside = [a for a in arms if a not in daemon]
    if outside:
        out["best_non_daemon"] = max(outside, key=lambda a: float(np.mean(
            [r["rounds"][-1]["heldout_accuracy"] for r in arms[a]])))
    if "static" in arms and focus != "static":
        out["final_in_band_vs_static"] = paired_ratio(arms[focus], arms["static"], "in_band")
    out["wait_share"] = {arm: wait_share(runs) for arm, runs in arms.items()}
    out["queue_wait_share"] = {arm: wait_share(runs, "queue_wait_s") for arm, runs in arms.items()}
    return out


#: Per-round metrics :func:`pair_rounds` pairs (``useful_share``: useful groups over groups).
PAIRED_METRICS = ("in_band", "useful_share", "heldout_accuracy")


def pair_rounds(a: dict[int, list[dict[str, Any]]], b: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per round and metric: A's and B's mean over the common seeds, and the paired A − B (95 % interval)."""
    seeds = sorted(set(a) & set(b))
    rounds = min(min(len(a[s]) for s in seeds), min(len(b[s]) for s in seeds)) if seeds else 0
    table: list[dict[str, Any]] = []
    for r in range(rounds):
        row: dict[str, Any] = {"round": r, "steps": a[seeds[0]][r]["steps"]}
        for m in PAIRED_METRICS:
            va, vb = [float(a[s][r][m] or 0.0) for s in seeds], [float(b[s][r][m] or 0.0) for s in seeds]
            diffs = [x - y for x, y in zip(va, vb, strict=True)]
            row[m] = {"a": mean_ci(va), "b": mean_ci(vb), "a_minus_b": mean_ci(diffs), "a_per_seed": va,
                      "b_per_seed": vb}
        table.append(row)
    return {"seeds": seeds, "rounds": table}

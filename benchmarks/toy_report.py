"""The toy table's report: mean ± std over seeds, the issue's goals, the histogram plot, the README section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import RESULTS
from probes.band import Band
from testkit.toy_rows import ACTIVE_ROW


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
        boots = sorted({int(r.get("bootstrap", 0)) for r in runs})
        if len(boots) > 1:  # the spread across generator bootstraps, next to the one across seeds
            for key, out in (("utility", "utility"), ("self_bleu3", "self_bleu3"), ("distinct3", "distinct3")):
                means = [float(np.mean([r[key] for r in runs if int(r.get("bootstrap", 0)) == b])) for b in boots]
                entry[f"{out}_by_bootstrap"] = means
                entry[f"{out}_bootstrap_range"] = max(means) - min(means)
        table[row] = entry
    return table




def lift_per_1k_trials(row: dict[str, Any], base: dict[str, Any]) -> float:
    """Utility lift over base per 1,000 solver trials, offline (corpus, spot-checks) and online together."""
    trials = row["offline_solver_trials"] + row["online_solver_trials"]
    lift = row["utility_mean"] - base["utility_mean"]
    return 1000 * lift / trials if trials else float("inf")


def goals(table: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issues' goals on the rows that ran (reported, never tuned to pass)."""
    out: dict[str, Any] = {}
    base, propel = table.get("Base"), table.get("PROPEL")
    if base is not None and (active := table.get(ACTIVE_ROW)) is not None:
        out |= active_goals(active, base, propel, table.get("SIL"))
    if base is None or propel is None:
        return out
    lift = propel["utility_mean"] - base["utility_mean"]
    out["propel_ratio_vs_base"] = propel["utility_mean"] / max(base["utility_mean"], 1e-9)
    out["propel_doubles_base_with_0_online_trials"] = bool(
        propel["utility_mean"] >= 2 * base["utility_mean"] and propel["online_solver_trials"] == 0)
    if (coevo := table.get("PROPEL + co-evolution")) is not None:
        coevo_lift = coevo["utility_mean"] - base["utility_mean"]
        out["coevo_top_topic_minus_base"] = coevo["top_topic_mean"] - base["top_topic_mean"]
        out["coevo_share_of_single_probe_lift"] = coevo_lift / lift if lift else float("nan")
        out["coevo_keeps_diversity_and_75pct_lift"] = bool(
            coevo["top_topic_mean"] - base["top_topic_mean"] <= 0.1 and lift > 0 and coevo_lift >= 0.75 * lift)
    if (div := table.get("PROPEL + co-evolution + diversity")) is not None:  # issue #22's first goal
        div_lift = div["utility_mean"] - base["utility_mean"]
        out["coevo_div_share_of_propel_lift"] = div_lift / lift if lift else float("nan")
        out["coevo_div_self_bleu3_minus_base"] = div["self_bleu3_mean"] - base["self_bleu3_mean"]
        out["coevo_div_distinct3_minus_base"] = div["distinct3_mean"] - base["distinct3_mean"]
        out["coevo_div_top_topic_minus_base"] = div["top_topic_mean"] - base["top_topic_mean"]
        out["coevo_div_meets_goal"] = bool(
            lift > 0 and div_lift >= 0.75 * lift and out["coevo_div_self_bleu3_minus_base"] <= 0.03
            and out["coevo_div_distinct3_minus_base"] >= -0.03 and out["coevo_div_top_topic_minus_base"] <= 0.1)
    if (sil := table.get("SIL")) is not None:
        out["propel_lift_per_1k_solver_trials"] = lift_per_1k_trials(propel, base)
        out["sil_lift_per_1k_solver_trials"] = lift_per_1k_trials(sil, base)
        out["propel_lift_per_trial_above_sil"] = bool(
            out["propel_lift_per_1k_solver_trials"] > out["sil_lift_per_1k_solver_trials"])
    return out


def active_goals(active: dict[str, Any], base: dict[str, Any], propel: dict[str, Any] | None,
                 sil: dict[str, Any] | None) -> dict[str, Any]:
    """Issue #22 item 5: the active-corpus row's lift per 1,000 solver trials, against PROPEL's and
    SIL's (goal: ≥ 3× SIL's; the paper reports ≈ 6×)."""
    per_1k = lift_per_1k_trials(active, base)
    out: dict[str, Any] = {"active_lift_per_1k_solver_trials": per_1k,
                           "active_ratio_vs_base": active["utility_mean"] / max(base["utility_mean"], 1e-9)}
    if propel is not None:
        out["active_per_trial_vs_propel"] = per_1k / lift_per_1k_trials(propel, base)
    if sil is not None:
        out["active_per_trial_vs_sil"] = per_1k / lift_per_1k_trials(sil, base)
        out["active_lift_per_trial_3x_sil"] = bool(out["active_per_trial_vs_sil"] >= 3)
    return out


def plot(table: dict[str, dict[str, Any]], path: Path, band: Band) -> None:
    """Figure-6-style: share of all generations per solve count (band shaded), one panel per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = [*map(str, range(band.k + 1)), "invalid"]
    fig, axes = plt.subplots(1, len(table), figsize=(3.0 * len(table), 3.2), sharey=True)
    for ax, (row, entry) in zip(np.atleast_1d(axes), table.items(), strict=True):
        hist = entry["solve_histogram"]
        total = max(1, sum(hist.values()))
        shares = [hist.get(b, 0) / total for b in buckets]
        colors = ["tab:green" if b.isdigit() and band.lo <= int(b) <= band.hi else
                  ("tab:gray" if b == "invalid" else "tab:blue") for b in buckets]
        ax.bar(range(len(buckets)), shares, color=colors)
        ax.set_xticks(range(len(buckets)), [b if b != "invalid" else "inv" for b in buckets], fontsize=7)
        ax.set_title(f"{row}\nutility {entry['utility_mean']:.2f}", fontsize=8)
        ax.set_xlabel(f"solves of {band.k}", fontsize=7)
    np.atleast_1d(axes)[0].set_ylabel("share of all generations")
    fig.suptitle("toy PROPEL (arith, synthetic solver): solve-count histograms, band 1–3 of 8 in green", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


GOAL_TEXT = {
    "propel_doubles_base_with_0_online_trials": "PROPEL ≥ 2× base utility with 0 online trials",
    "coevo_keeps_diversity_and_75pct_lift": "co-evolution keeps ≥ 75 % of the lift, top-topic ≤ base + 0.1",
    "coevo_div_meets_goal": "co-evolution + diversity keeps ≥ 75 % of PROPEL's lift with Self-BLEU-3 ≤ base + 0.03, "
                            "Distinct-3 ≥ base − 0.03, top-topic ≤ base + 0.1",
    "propel_lift_per_trial_above_sil": "PROPEL's lift per solver trial above SIL's",
    "active_lift_per_trial_3x_sil": f"{ACTIVE_ROW}: lift per 1,000 solver trials ≥ 3× SIL's",
}


def markdown(table: dict[str, dict[str, Any]], meta: dict[str, Any], name: str = "toy_propel") -> str:
    head = ("| row | utility | valid | Self-BLEU-3 | Distinct-3 | top-topic | online solver trials "
            "| offline solver trials | wall s |\n|---|---|---|---|---|---|---|---|---|\n")
    lines = [
        f"| {row} | {e['utility_mean']:.3f} ± {e['utility_std']:.3f} | {e['valid_mean']:.3f} | "
        f"{e['self_bleu3_mean']:.3f} ± {e['self_bleu3_std']:.3f} | {e['distinct3_mean']:.3f} ± {e['distinct3_std']:.3f}"
        f" | {e['top_topic_mean']:.3f} | {e['online_solver_trials']:.0f} | {e['offline_solver_trials']:.0f} | "
        f"{e['wall_s']:.0f} |"
        for row, e in table.items()
    ]
    settings = meta["settings"]
    spread = ""
    if settings.get("bootstraps", 1) > 1:
        spread = " Spread across generator bootstraps (range of per-bootstrap means): " + "; ".join(
            f"{row} utility {e['utility_bootstrap_range']:.3f}, Self-BLEU-3 {e['self_bleu3_bootstrap_range']:.3f}"
            for row, e in table.items() if "utility_bootstrap_range" in e) + "."
    numbers = ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}"
                        for k, v in meta["goals"].items() if k not in GOAL_TEXT)
    verdicts = "; ".join(f"{text}: **{'met' if meta['goals'][k] else 'not met'}**" for k, text in GOAL_TEXT.items()
                         if k in meta["goals"])
    notes = (
        f"\nCommit {meta.get('commit', '?')}. Every RL row runs the daemon's code: a run store per row, the "
        "daemon's engine (GRPO chunk, configured hard-gate reward) and, for co-evolution, its driver for one "
        "cycle (sample, in-process spot-checks, false-positive mining, aux retrain gated by "
        f"`daemon.retrain_min_false_positives`, emission) before the second half; "
        f"{aux_summary(meta.get('per_seed', {}))}. Settings: {settings}. Mean ± std over "
        f"{settings['seeds']} seeds × {settings.get('bootstraps', 1)} generator bootstrap(s); the PROPEL-linear "
        f"rows train {settings['linear_steps']} GRPO steps, the other RL rows {settings['steps']}; co-evolution "
        f"forks at half of its run's steps. Solver: `{meta['solver']}` (synthetic benchmark instrument). "
        f"Co-evolution trials (spot-checks) are counted as offline.{spread}{active_summary(meta)}\n\n"
        f"Goals (measured, not tuned): {verdicts}. Numbers: {numbers}.\n"
    )
    return f"## {name}\n\n" + head + "\n".join(lines) + "\n" + notes


def active_summary(meta: dict[str, Any]) -> str:
    """How the active row's corpus was built, per bootstrap (empty when the row did not run)."""
    parts = [f"bootstrap {b}: {i['rows']} usable of {i['budget_tasks']} tasks labelled from a pool of "
             f"{i['pool_tasks']} ({i['positives']} in band), {i['solver_trials']} solver trials = "
             f"{i['solver_trials'] / i['uniform_solver_trials']:.0%} of the uniform corpus's "
             f"{i['uniform_solver_trials']}"
             for b, i in meta.get("active_corpus", {}).items()]
    return f" {ACTIVE_ROW}: `probes.corpus_labelling = \"active\"`; " + "; ".join(parts) + "." if parts else ""


def aux_summary(per_seed: dict[str, list[dict[str, Any]]]) -> str:
    """How many co-evolution runs activated an aux probe (the daemon trains one only past its gate)."""
    parts = []
    for row, runs in per_seed.items():
        infos = [r["coevolution"] for r in runs if "coevolution" in r]
        if infos:
            done = sum(1 for i in infos if i.get("aux_probe"))
            fps = [int(i.get("spotcheck_false_positives", 0)) for i in infos]
            parts.append(f"{row}: aux probe in {done} of {len(infos)} runs (false positives mined {fps})")
    return "; ".join(parts) or "no co-evolution rows"


def write_readme_section(section: str, name: str = "toy_propel") -> Path:
    """Replace (or add) the ``## NAME`` section of ``benchmarks/results/README.md``."""
    path = RESULTS / "README.md"
    text = path.read_text() if path.exists() else "# Benchmark results\n\n"
    start = text.find(f"## {name}\n")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        text = text[:start] + section + ("\n" + text[end + 1:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)
    return path



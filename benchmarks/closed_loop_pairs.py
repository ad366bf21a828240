"""Two closed-loop results of one arm and row, one setting apart, paired by seed (#36: frontier replay on/off).

Each closed_loop invocation runs one setting of the arm (``--follow-replay 0`` against the default); this
report pairs the per-seed rounds of ``--a`` and ``--b`` files by seed and gives, per round, each side's
mean and the paired difference A − B with its 95 % interval: served in band (measured independently, k = 8
by the round's checkpoint), the useful-GRPO-group share and held-out accuracy. Writes NAME.json + NAME.png.

\b
Run:  .venv/bin/python -m benchmarks.closed_loop_pairs --a closed_loop_lm_replay_s0 --b closed_loop_lm_rbfix_seed0 \\
          --b closed_loop_lm_replay0_seed2 --b closed_loop_lm_replay0_seed3 --name closed_loop_lm_replay_pairs
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from benchmarks._common import RESULTS, write_result
from testkit.closed_loop_stats import PAIRED_METRICS as METRICS
from testkit.closed_loop_stats import pair_rounds as pair


def seeds_of(names: tuple[str, ...], arm: str) -> tuple[dict[int, list[dict[str, Any]]], list[str]]:
    """Seed → rounds of ``arm`` in the result files ``names`` (benchmarks/results/NAME.json), and their commits."""
    out: dict[int, list[dict[str, Any]]] = {}
    commits: list[str] = []
    for name in names:
        data = json.loads((RESULTS / f"{name}.json").read_text())
        commits.append(str(data["commit"])[:7])
        for row in data["per_seed"].values():
            for res in row:
                if res["arm"] == arm:
                    out[int(res["seed"])] = [{**r, "useful_share": r["useful_groups"] / max(1, r["groups"])}
                                             for r in res["rounds"]]
    return out, commits


def plot(result: dict[str, Any], labels: tuple[str, str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS), figsize=(4.2 * len(METRICS), 3.6))
    steps = [row["steps"] for row in result["rounds"]]
    for ax, m in zip(axes, METRICS, strict=True):
        for side, label, color in (("a", labels[0], "tab:blue"), ("b", labels[1], "tab:gray")):
            for i in range(len(result["seeds"])):
                ax.plot(steps, [row[m][f"{side}_per_seed"][i] for row in result["rounds"]], color=color,
                        alpha=0.25, lw=0.8)
            ax.plot(steps, [row[m][side]["mean"] for row in result["rounds"]], color=color, lw=2, marker="o",
                    label=label)
        ax.set_title(m.replace("_", " "))
        ax.set_xlabel("GRPO steps (end of round)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{result['arm']}: {labels[0]} vs {labels[1]}, {len(result['seeds'])} seed(s) paired "
                 f"({', '.join(result['commits'])})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@click.command(help=__doc__)
@click.option("--a", "a_names", multiple=True, required=True, help="result name(s) of side A (no .json)")
@click.option("--b", "b_names", multiple=True, required=True, help="result name(s) of side B")
@click.option("--a-label", default="replay on", show_default=True)
@click.option("--b-label", default="replay off (--follow-replay 0)", show_default=True)
@click.option("--arm", default="trainer_labels", show_default=True)
@click.option("--name", required=True, help="benchmarks/results/NAME.{json,png}")
def main(a_names: tuple[str, ...], b_names: tuple[str, ...], a_label: str, b_label: str, arm: str,
         name: str) -> None:
    missing = [n for n in (*a_names, *b_names) if not (RESULTS / f"{n}.json").exists()]
    if missing:
        raise click.UsageError(f"no result {', '.join(missing)} under {RESULTS}: run benchmarks.closed_loop first")
    (a, ca), (b, cb) = seeds_of(a_names, arm), seeds_of(b_names, arm)
    result = {"arm": arm, "a": {"label": a_label, "files": list(a_names)}, "b": {"label": b_label,
              "files": list(b_names)}, "commits": sorted(set(ca + cb)), **pair(a, b)}
    if not result["seeds"]:
        raise click.UsageError(f"no seed of arm {arm!r} is in both sides")
    write_result(name, result)
    plot(result, (a_label, b_label), RESULTS / f"{name}.png")
    for row in result["rounds"]:
        cells = [f"{m} {row[m]['a']['mean']:.3f} vs {row[m]['b']['mean']:.3f} (A−B {row[m]['a_minus_b']['mean']:+.3f}"
                 f" [{row[m]['a_minus_b']['lo']}, {row[m]['a_minus_b']['hi']}])" for m in METRICS]
        click.echo(f"steps {row['steps']}: " + "; ".join(cells))


if __name__ == "__main__":
    main()

"""The closed loop's plots (#35): held-out accuracy against trainer steps and against solver rollouts
(every rollout: the trainer's, the filter's dropped groups', the daemon's spot-checks and drift
re-measurements), one curve per arm, mean ± 95 % interval over seeds; in-band and useful-group share
by round; and each arm's trainer wall-clock split into training and waiting on the server.

\b
Run:  .venv/bin/python -m benchmarks.closed_loop_report benchmarks/results/closed_loop_powered.json
      (re-draws the PNG beside the JSON; benchmarks/closed_loop.py draws it after every run)
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click
import numpy as np

from testkit.closed_loop_stats import curve, mean_ci


def _band(per_seed: list[dict[str, Any]], x: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean x, mean y and the 95 % half-width of y per round, over seeds (x: steps or rollouts)."""
    curves = [curve(r["rounds"], r["start_heldout"], x) for r in per_seed]
    xs = np.array([c[0] for c in curves], dtype=float).mean(0)
    ys = np.array([c[1] for c in curves], dtype=float)
    half = []
    for col in ys.T:
        ci = mean_ci(list(col))
        half.append(0.0 if ci["hi"] is None else ci["hi"] - ci["mean"])
    return xs, ys.mean(0), np.array(half)


def plot(data: dict[str, Any], path: Path) -> None:
    """One row of panels per benchmark row (synthetic, LM)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["rows"]
    fig, axes = plt.subplots(len(rows), 5, figsize=(23, 4.2 * len(rows)), squeeze=False)
    for i, (row, table) in enumerate(rows.items()):
        runs = data["per_seed"][row]
        ax_steps, ax_roll, ax_ib, ax_use, ax_cost = axes[i]
        for arm in table:
            mine = [r for r in runs if r["arm"] == arm]
            for ax, x in ((ax_steps, "steps"), (ax_roll, "rollouts")):
                xs, ys, half = _band(mine, x)
                ax.plot(xs, ys, marker="o", label=arm)
                ax.fill_between(xs, ys - half, ys + half, alpha=0.15)
            steps = table[arm]["steps"]
            ax_ib.errorbar(steps, table[arm]["in_band"]["mean"], yerr=table[arm]["in_band"]["std"], marker="o",
                           capsize=3, label=arm)
            ax_use.plot(steps, table[arm]["useful_share"]["mean"], marker="o", label=arm)
        _cost_bars(ax_cost, table)
        seeds = data["settings"][row]["seeds"]
        n = len(seeds) if isinstance(seeds, list) else seeds
        label = "SYNTHETIC solver" if "SYNTHETIC" in row else row.split(" (")[0]
        for ax, title, xlabel in ((ax_steps, f"{label}: held-out accuracy ({n} seeds, 95 % CI)", "trainer steps"),
                                  (ax_roll, "held-out accuracy vs all solver rollouts", "solver rollouts"),
                                  (ax_ib, "in-band share of served tasks (± std)", "trainer steps"),
                                  (ax_use, "GRPO groups with reward variance", "trainer steps")):
            ax.set_title(title, fontsize=10)
            ax.set_xlabel(xlabel)
            ax.grid(alpha=0.3)
        ax_steps.legend(fontsize=8)
    fig.suptitle(f"closed loop @ {data.get('commit', '?')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _cost_bars(ax: Any, table: dict[str, Any]) -> None:
    arms = list(table)
    train = np.array([t["train_s"]["mean"][-1] for t in table.values()])
    wait = np.array([t["wait_s"]["mean"][-1] for t in table.values()])
    ax.bar(arms, train - wait, label="training")
    ax.bar(arms, wait, bottom=train - wait, label="waiting on the server")
    for k, (t, w) in enumerate(zip(train, wait, strict=True)):
        if t > 0 and not math.isnan(t):
            ax.text(k, t, f"{100 * w / t:.0f} %", ha="center", va="bottom", fontsize=8)
    ax.set_title("trainer wall-clock (s), share waiting", fontsize=10)
    ax.tick_params(axis="x", rotation=30, labelsize=8)
    ax.legend(fontsize=8)


@click.command(help=__doc__)
@click.argument("result", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def main(result: Path) -> None:
    data = json.loads(result.read_text())
    out = result.with_suffix(".png")
    plot(data, out)
    click.echo(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Arms of ``benchmarks.long_run --arm`` pooled over seeds, side by side (issue #34).

Each long-run scenario keyed ``frozen[NAME]`` is one seed of an arm; ``NAME-sN`` is seed N of arm ``NAME``
(no suffix: seed 0). Per arm, each summary figure (the means after the first block: the probes' rank
correlation with exact in-band, a top-quarter gate's gain, in-band of all valid and of emitted tasks, the
gate margin, tasks emitted per cycle) as a mean with a 95 % Student-t interval over seeds, and, paired by
seed, each arm minus ``--baseline``. Reads any number of long-run JSON files; writes
``benchmarks/results/<name>.{json,png}``.

    python -m benchmarks.long_run_arms long_run_gate_arms long_run_gate_arms_s23 --name long_run_gate_summary
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from benchmarks._common import RESULTS, write_result
from testkit.long_run_arms import FIGURES, compare, seeds_by_arm


def plot(table: dict[str, Any], path: Path, title: str) -> None:
    """One panel per figure: each arm's mean with its 95 % interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 5
    rows = -(-len(FIGURES) // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(3.0 * cols, 3.4 * rows), squeeze=False)
    names = list(table)
    for ax in grid.flat[len(FIGURES):]:
        ax.set_visible(False)
    for ax, f in zip(grid.flat, FIGURES, strict=False):
        for i, arm in enumerate(names):
            m = table[arm][f]
            if m["mean"] is None:
                continue
            err = None if m["lo"] is None else [[m["mean"] - m["lo"]], [m["hi"] - m["mean"]]]
            ax.errorbar([i], [m["mean"]], yerr=err, fmt="o", capsize=4)
        ax.set_xticks(range(len(names)), [n.split("[", 1)[-1].rstrip("]") for n in names], rotation=30, fontsize=7)
        ax.set_title(f, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.axhline(0, color="gray", lw=0.5)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _f(m: dict[str, Any]) -> str:
    if m["mean"] is None:
        return "-"
    return f"{m['mean']:+.3f}" if m["lo"] is None else f"{m['mean']:+.3f} [{m['lo']:+.3f}, {m['hi']:+.3f}]"


@click.command()
@click.argument("names", nargs=-1, required=True)
@click.option("--baseline", default="frozen[defaults]", show_default=True, help="the arm the others are paired with")
@click.option("--name", default="long_run_gate_summary", show_default=True, help="result file name")
def main(names: tuple[str, ...], baseline: str, name: str) -> None:
    """Pool the arms of long-run result files (NAMES under benchmarks/results, without .json) over seeds."""
    paths = [RESULTS / f"{n.removesuffix('.json')}.json" for n in names]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise click.UsageError(f"no such result: {', '.join(missing)} (run benchmarks.long_run --arm … first)")
    files = [json.loads(p.read_text()) for p in paths]
    arms = seeds_by_arm(files)
    if baseline not in arms:
        raise click.UsageError(f"--baseline {baseline!r} is not among the arms: {', '.join(sorted(arms)) or 'none'}")
    table = compare(arms, baseline)
    commits = sorted({d.get("commit", "?") for d in files})
    write_result(name, {"sources": list(names), "source_commits": commits, "baseline": baseline, "arms": table})
    plot(table, RESULTS / f"{name}.png",
         f"long-run arms over seeds (95 % t intervals), sources at {', '.join(commits)}")
    for arm, row in table.items():
        click.echo(f"{arm} (seeds {row['seeds']}):")
        for f in FIGURES:
            extra = f"   minus baseline {_f(row[f + '_minus_baseline'])}" if f + "_minus_baseline" in row else ""
            click.echo(f"  {f:20s} {_f(row[f])}{extra}")


if __name__ == "__main__":
    main()

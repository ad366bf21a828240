"""Save a sweep: ``sweep.json`` (config, rows, selection), ``sweep.csv`` and ``sweep_heatmap.png``.

The heatmap mirrors the paper's Figures 7–8: validation balanced accuracy with layers as rows
and poolings as columns, one panel per architecture (columns) and balance strategy (rows).
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from probes.sweep import SweepResult, SweepRow, row_dicts


def sweep_payload(result: SweepResult) -> dict[str, Any]:
    config = asdict(result.config)
    return {
        "config": config,
        "rows": row_dicts(result.rows),
        "selected_index": result.selected,
        "selected": asdict(result.best),
        "ece_constraint_met": result.ece_constraint_met,
    }


def save_sweep(result: SweepResult, out_dir: str | Path) -> dict[str, Path]:
    """Write the table (JSON + CSV) and heatmap into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "sweep.json", "csv": out / "sweep.csv", "png": out / "sweep_heatmap.png"}
    paths["json"].write_text(json.dumps(sweep_payload(result), indent=2, default=_plain) + "\n")
    rows = row_dicts(result.rows)
    with paths["csv"].open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*rows[0].keys(), "selected"])
        writer.writeheader()
        for i, row in enumerate(rows):
            writer.writerow({**row, "selected": int(i == result.selected)})
    plot_heatmap(result.rows, paths["png"], selected=result.best)
    return paths


def _plain(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def _column(row: SweepRow) -> str:
    """Heatmap column: the token pooling, with the turn pooling when there is one."""
    return row.pooling if row.turn_pooling is None else f"{row.pooling}/turns:{row.turn_pooling}"


def plot_heatmap(rows: list[SweepRow], path: str | Path, selected: SweepRow | None = None) -> Path:
    """Validation balanced accuracy heatmap (layer × pooling), faceted by architecture and balance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = sorted({r.layer for r in rows})
    poolings = list(dict.fromkeys(_column(r) for r in rows))
    archs = list(dict.fromkeys(r.arch for r in rows))
    balances = list(dict.fromkeys(r.balance for r in rows))
    fig, axes = plt.subplots(
        len(balances), len(archs), squeeze=False,
        figsize=(1.1 * len(poolings) * len(archs) + 2, 0.6 * len(layers) * len(balances) + 1.8),
    )  # fmt: skip
    image = None
    for bi, balance in enumerate(balances):
        for ai, arch in enumerate(archs):
            grid = np.full((len(layers), len(poolings)), np.nan)
            for r in rows:
                if r.arch == arch and r.balance == balance:
                    grid[layers.index(r.layer), poolings.index(_column(r))] = r.val_balanced_accuracy
            ax = axes[bi][ai]
            image = ax.imshow(grid, vmin=0.4, vmax=1.0, cmap="viridis", aspect="auto")
            for (li, pi), value in np.ndenumerate(grid):
                if not np.isnan(value):
                    is_best = selected is not None and (selected.arch, selected.balance) == (arch, balance) and (
                        selected.layer, _column(selected)) == (layers[li], poolings[pi])  # fmt: skip
                    ax.text(pi, li, f"{value:.2f}" + ("*" if is_best else ""), ha="center", va="center", fontsize=7,
                            color="white" if value < 0.75 else "black")  # fmt: skip
            ax.set_xticks(range(len(poolings)), poolings, rotation=45, ha="right", fontsize=7)
            ax.set_yticks(range(len(layers)), [str(x) for x in layers], fontsize=7)
            ax.set_title(f"{arch} / {balance}", fontsize=9)
            ax.set_ylabel("layer")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="val balanced accuracy")
    fig.suptitle("Probe sweep: validation balanced accuracy (* = selected)", fontsize=10)
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path

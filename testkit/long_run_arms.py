"""Long-run arms pooled over seeds (``benchmarks/long_run_arms.py``): ``scenario[NAME-sN]`` is seed N of arm
``NAME`` (no suffix: seed 0); each summary figure as a mean with a 95 % Student-t interval over seeds, and
paired by seed against a baseline arm."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from testkit.closed_loop_stats import mean_ci

FIGURES = ("probe_spearman", "top_quarter_margin", "valid_in_band", "emitted_in_band", "gate_margin",
           "emitted_per_cycle", "validity_mean", "top_topic_share_max", "self_bleu3", "distinct3")
_KEY = re.compile(r"^(?P<scenario>\w+)\[(?P<arm>.+?)(?:-s(?P<seed>\d+))?\]$")


def seeds_by_arm(files: list[dict[str, Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    """``arm → seed → summary`` over every ``scenario[arm-sN]`` of ``files`` that finished its run."""
    out: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for data in files:
        for key, sc in data["scenarios"].items():
            m = _KEY.match(key)
            if m is None or not sc.get("summary") or not str(sc.get("status", "")).startswith("done"):
                continue
            arm = f"{m['scenario']}[{m['arm']}]"
            out[arm][int(m["seed"] or 0)] = sc["summary"]
    return dict(out)


def compare(arms: dict[str, dict[int, dict[str, Any]]], baseline: str) -> dict[str, Any]:
    """Per arm and figure: mean ± 95 % over seeds, and the paired difference from ``baseline``."""
    base = arms.get(baseline, {})
    table: dict[str, Any] = {}
    for arm, seeds in arms.items():
        row: dict[str, Any] = {"seeds": sorted(seeds)}
        for f in FIGURES:
            row[f] = mean_ci([s[f] for s in seeds.values() if s.get(f) is not None])
            if arm != baseline:
                row[f"{f}_minus_baseline"] = mean_ci([seeds[k][f] - base[k][f] for k in seeds if k in base
                                                      and seeds[k].get(f) is not None
                                                      and base[k].get(f) is not None])
        table[arm] = row
    return table

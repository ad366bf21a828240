"""The closed-loop benchmark's quick mode, run as a user runs it (a subprocess): every arm serves tasks
through the product, the (synthetic, learnable) trainer leases, acks and announces, and the result JSON
has every arm, round, metric and cost, the goals, the paired statistics and the commit; a merge-only run
(``--seeds 0 --merge-from``) reproduces it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.long]  # ~2 min: `make test-long` (make test stays under 15 min)

ROOT = Path(__file__).resolve().parents[2]


def test_closed_loop_quick_writes_every_arm_round_and_metric(tmp_path: Path) -> None:
    env = {**os.environ, "PROPEL_BENCH_RESULTS": str(tmp_path / "results"), "OMP_NUM_THREADS": "1"}
    cache = Path(os.environ.get("PROPEL_E2E_CACHE", tmp_path / "data"))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.closed_loop", "--quick", "--data-dir", str(cache)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads((tmp_path / "results" / "closed_loop.json").read_text())
    assert (tmp_path / "results" / "closed_loop.png").stat().st_size > 0
    assert data["commit"] and data["commit"] != "unknown"
    [(row, table)] = data["rows"].items()
    assert "SYNTHETIC" in row
    rounds = data["settings"][row]["rounds"]
    assert set(table) == {"continuous", "static", "base", "corpus"}
    for arm, t in table.items():
        assert t["steps"] == [data["settings"][row]["steps_per_round"] * (r + 1) for r in range(rounds)]
        for metric in ("in_band", "useful_share", "heldout_accuracy", "daemon_trials"):
            assert len(t[metric]["mean"]) == rounds and len(t[metric]["std"]) == rounds, (arm, metric)
            assert all(v >= 0 for v in t[metric]["mean"]), (arm, metric)
        spent = t["daemon_trials"]["mean"][-1]
        assert spent > 0 if arm in ("continuous", "static") else spent == 0, (arm, spent)
        for cost in ("train_s", "wait_s", "server_cpu_s"):  # every arm's cost, cumulative by round
            assert len(t[cost]["mean"]) == rounds and t[cost]["mean"][-1] >= t[cost]["mean"][0] >= 0, (arm, cost)
        assert t["wait_s"]["mean"][-1] <= t["train_s"]["mean"][-1], arm
        assert t["server_cpu_s"]["mean"][-1] > 0, arm
    assert {"continuous_final_vs_first_in_band", "continuous_vs_static_final_in_band",
            "continuous_vs_base_useful_groups", "continuous_steps_to_base_final_accuracy",
            "best_arm_heldout_rise", "continuous_trainer_wait_share"} <= set(data["goals"][row])
    stats = data["stats"][row]
    assert set(stats["vs"]) == {"static", "base", "corpus"} and stats["best_non_daemon"] in ("base", "corpus")
    # seeds run in separate processes merge: --seeds 0 --merge-from runs nothing and keeps every result
    merged = subprocess.run([sys.executable, "-m", "benchmarks.closed_loop", "--quick", "--seeds", "0", "--merge-from",
                             str(tmp_path / "results" / "closed_loop.json"), "--name", "merged", "--data-dir",
                             str(cache)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert merged.returncode == 0, merged.stderr[-4000:]
    again = json.loads((tmp_path / "results" / "merged.json").read_text())
    assert again["per_seed"][row] == data["per_seed"][row] and again["rows"][row] == table

"""The active-labelling benchmark's ``--quick`` mode end to end, run as a user runs it (a subprocess of
``python -m benchmarks.active_labelling``, results redirected by ``PROPEL_BENCH_RESULTS``): both arms at
every budget, spending the same solver trials, and the sequential-labelling accounting (attempts actually
run). It checks the pipeline and the schema, not the goal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parents[2]


def test_quick_benchmark_compares_both_arms_at_equal_budgets(tmp_path: Path) -> None:
    env = {**os.environ, "PROPEL_BENCH_RESULTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.active_labelling", "--quick", "--data-dir",
                           str(tmp_path / "data"), "--name", "active_quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "active_quick.json").read_text())
    assert data["commit"] and data["solver_is_synthetic"] and set(data["table"]) == {"uniform", "active"}
    budgets = data["settings"]["budgets"]
    for arm in ("uniform", "active"):
        assert [row["tasks"] for row in data["table"][arm]] == budgets
        for row in data["table"][arm]:
            assert 0.0 <= row["balanced_accuracy"]["mean"] <= 1.0 and row["trials"] == 8 * row["tasks"]
            assert row["tasks"] <= row["trials_sequential"]["min"] <= row["trials_sequential"]["max"] <= row["trials"]
    for run in data["runs"]:  # equal budgets: both arms label exactly the budget
        assert [c["tasks"] for c in run["arms"]["active"]] == [c["tasks"] for c in run["arms"]["uniform"]] == budgets
        assert all(sum(r["labelled"] for r in c["rounds"]) == c["tasks"] for c in run["arms"]["active"])
    assert "active_trial_share" in data["goals"] and (tmp_path / "active_quick.png").stat().st_size > 0
    seq = data["sequential"]  # sequential labelling: same labels (the run fails otherwise), fewer attempts
    assert set(seq["goal"]) >= {"uniform", "uniform+sequential", "active", "active+sequential"}
    assert all(1 <= a < 8 for a in seq["pool_attempts_per_task"].values())

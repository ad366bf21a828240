"""The solver-jump benchmark's ``--quick`` mode end to end, run as a user runs it (a subprocess of
``python -m benchmarks.solver_jump``, results redirected by ``PROPEL_BENCH_RESULTS``): both arms ran
the daemon's driver across the announce, the ``follow`` arm opened a drift measurement on the new
version and the ``no refresh`` arm did not. It checks the pipeline, not the recovery (one seed, a
handful of cycles)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parents[2]


def test_quick_solver_jump_runs_both_arms_across_the_announce(tmp_path: Path) -> None:
    env = {**os.environ, "PROPEL_BENCH_RESULTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.solver_jump", "--quick", "--data-dir",
                           str(tmp_path / "data"), "--name", "solver_jump_quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "solver_jump_quick.json").read_text())
    settings = data["settings"]
    cycles = settings["before"] + settings["after"]
    assert data["commit"] and {r["arm"] for r in data["runs"]} == {"follow", "follow + periodic refresh", "no refresh"}
    for run in data["runs"]:
        points = [p for p in run["points"] if "event" not in p]
        assert [p["cycle"] for p in points] == list(range(cycles)), run["arm"]
        assert [p["version"] for p in points] == [""] * settings["before"] + ["step-1"] * settings["after"]
        assert all(p["ready_in_band"] is None or 0.0 <= p["ready_in_band"] <= 1.0 for p in points)
    drifts = {r["arm"]: r["drift"] for r in data["runs"]}
    # the announce opens one measurement in both arms; with drift_budget_share = 0 nothing is re-measured,
    # so there is no drift score and never a refresh
    assert [d["version"] for d in drifts["follow"]] == [d["version"] for d in drifts["no refresh"]] == ["step-1"]
    assert drifts["no refresh"][0]["measured"] == 0 and drifts["no refresh"][0]["score"] is None
    assert next(r for r in data["runs"] if r["arm"] == "no refresh")["refreshes"] == []
    assert set(data["summary"]) >= {"follow", "no refresh", "goal"}
    assert (tmp_path / "solver_jump_quick.png").stat().st_size > 0

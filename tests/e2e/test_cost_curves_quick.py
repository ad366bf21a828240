"""The cost-curves benchmark's ``--quick`` mode end to end, run as a user runs it (a subprocess of
``python -m benchmarks.cost_curves``, results redirected by ``PROPEL_BENCH_RESULTS``), with the arm
issue #22 asks for at the full horizon: "PROPEL (active corpus) + co-evolution" — the daemon's arm on a
probe whose corpus was labelled actively — charged what active labelling spent, next to SIL. It checks
the pipeline and the output schema, not the goal (a few steps, one seed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.long]  # ~40 s: `make test-long` (make test stays under 15 min)

ROOT = Path(__file__).resolve().parents[2]
ACTIVE = "PROPEL (active corpus) + co-evolution"


def test_quick_active_arm_is_charged_its_active_corpus_and_compared_with_sil(tmp_path: Path) -> None:
    env = {**os.environ, "PROPEL_BENCH_RESULTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cost_curves", "--quick", "--data-dir",
                           str(tmp_path / "data"), "--name", "cc_quick", "--arms", f"SIL,{ACTIVE}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "cc_quick.json").read_text())
    assert data["arms"] == [ACTIVE, "SIL"] and set(data["curves"]) == {ACTIVE, "SIL"}
    active, uniform = data["active_corpus"], data["corpus_solver_trials"]
    assert active["settings"]["budget"] == active["budget_tasks"] == round(0.4 * uniform / 8)
    assert 0 < active["solver_trials"] < uniform
    (run,) = data["curves"][ACTIVE]
    steps = data["settings"]["steps"]
    assert [p["step"] for p in run][-1] == steps
    # charged the active corpus (not the uniform one) before its first cycle's spot-checks, then those on top
    assert run[0]["trials"] == active["solver_trials"] and run[-1]["trials"] > run[0]["trials"]
    goal = data["summary"]["goal"][ACTIVE]
    assert goal["target"] == 3.0 and len(goal["ratio_by_step"]) == len(run)
    assert {"first_step_per_trial_at_least_sil", "first_step_per_trial_at_least_target_x_sil"} <= set(goal)
    assert (tmp_path / "cc_quick.png").stat().st_size > 0

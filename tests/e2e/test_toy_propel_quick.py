"""The toy PROPEL benchmark's ``--quick`` mode end to end, run as a user runs it (a subprocess of
``python -m benchmarks.toy_propel``, results redirected by ``PROPEL_BENCH_RESULTS``): every row and
column is present. It checks the pipeline and the output schema, not the paper's goals (too few
steps and one seed), that the co-evolution rows went through the daemon's driver, and that the
"PROPEL (active corpus)" row (issue #22 item 5, run on request) is charged its active corpus's trials.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.long]  # ~60 s: `make test-long` (make test stays under 15 min)

ROOT = Path(__file__).resolve().parents[2]
ACTIVE = "PROPEL (active corpus)"
#: the default rows and the active-corpus row
ROWS = ("Base", "PROPEL", "PROPEL-WCO", "PROPEL + co-evolution", "PROPEL-linear", "PROPEL-linear + co-evolution",
        "SIL", ACTIVE)


def test_quick_benchmark_writes_every_row_and_column(tmp_path: Path) -> None:
    env = {**os.environ, "PROPEL_BENCH_RESULTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.toy_propel", "--quick", "--seeds", "1", "--data-dir",
                           str(tmp_path / "data"), "--name", "toy_propel_quick", "--rows", ",".join(ROWS)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "toy_propel_quick.json").read_text())
    assert data["commit"] and set(data["table"]) == set(data["rows"]) and len(data["rows"]) >= 5
    for row in data["rows"]:
        entry = data["table"][row]
        assert set(data["columns"]) <= set(entry), row
        assert 0.0 <= entry["utility_mean"] <= 1.0 and 0.0 <= entry["valid_mean"] <= 1.0
    table = data["table"]
    assert table["PROPEL"]["online_solver_trials"] == 0 and table["PROPEL"]["offline_solver_trials"] > 0
    assert table["SIL"]["online_solver_trials"] > 0 and table["SIL"]["offline_solver_trials"] == 0
    for row in ("PROPEL + co-evolution", "PROPEL-linear + co-evolution"):  # the daemon's driver ran the fork
        info = data["per_seed"][row][0]["coevolution"]
        assert info["spotcheck_spotcheck_dispatched"] > 0 and info["spotcheck_trials"] > 0, info
        assert info["rl_step"] == data["settings"]["steps"], info  # then trained the second half
    assert set(data["goals"]) >= {"propel_ratio_vs_base", "coevo_share_of_single_probe_lift",
                                  "active_lift_per_1k_solver_trials", "active_lift_per_trial_3x_sil"}
    active = data["active_corpus"]["0"]  # labelled 40 % of the uniform corpus's trials, and charged those
    uniform = data["corpus_solver_trials"]["0"]
    assert active["settings"]["budget"] == active["budget_tasks"] == round(0.4 * uniform / 8)
    assert table[ACTIVE]["offline_solver_trials"] == active["solver_trials"] == active["budget_tasks"] * 8
    assert table[ACTIVE]["online_solver_trials"] == 0 and active["solver_trials"] < uniform
    assert (tmp_path / "toy_propel_quick.png").stat().st_size > 0
    assert "## toy_propel" in (tmp_path / "README.md").read_text()

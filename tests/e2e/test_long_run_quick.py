"""The long-run benchmark's ``--quick`` mode end to end, run as a user runs it (a subprocess of
``python -m benchmarks.long_run``, results redirected by ``PROPEL_BENCH_RESULTS``): both scenarios
drove the embedded daemon for their cycles, every cycle's tasks were scored under the solver version
current at the time, the rising scenario announced its version, blocks and goals were written, and
the PNG re-renders from the JSON alone.
It checks the wiring, not the goals (a handful of cycles on a 60-step bootstrap)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.long_run_report import SUMMARY_KEYS

pytestmark = pytest.mark.long

ROOT = Path(__file__).resolve().parents[2]


def _bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PROPEL_BENCH_RESULTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "benchmarks.long_run", *args, "--name", "long_run_quick"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)


def test_quick_long_run_drives_both_scenarios_and_writes_blocks(tmp_path: Path) -> None:
    proc = _bench(tmp_path, "--quick", "--data-dir", str(tmp_path / "cache"), "--work-dir", str(tmp_path / "runs"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((tmp_path / "long_run_quick.json").read_text())
    assert data["commit"] and data["settings"]["quick"] and "real wall clock" in data["time"]
    assert data["settings"]["consumer"] is True  # the default: a consumer keeps the queue under its high-water mark
    assert set(data["scenarios"]) == {"frozen", "rising"}
    for name, sc in data["scenarios"].items():
        assert sc["status"] == "done" and sc["cycles_done"] == 4 and sc["exit_code"] == 0, name
        assert sc["config"]["generator"]["model"].startswith(str(tmp_path / "cache" / "bootstrap" / "arith")), name
        assert sc["config"]["spotcheck"]["budget_per_hour"] == 512  # the embedded default, untouched
        assert 0.0 <= sc["untrained"]["in_band"] <= 1.0 and sc["untrained"]["self_bleu3"] is not None
        assert [b["cycles"] for b in sc["blocks"]] == [[0, 1], [2, 3]], name
        for b in sc["blocks"]:
            assert b["valid_sampled"] > 0 and 0.0 <= b["valid_in_band"] <= 1.0
            assert b["emitted"] == sum(b["emitted_per_cycle"])
            assert b["consumed"] == b["emitted"]  # the run's consumer leased every emitted task: none waits
            assert b["emitted_in_band"] is None or 0.0 <= b["emitted_in_band"] <= 1.0
            assert len(b["spotchecks_per_cycle"]) == 2 and b["rss_mib"] > 0
            # the probes' ranking of each cycle's valid tasks, from the scores the emit phase used
            assert b["probe_spearman"] is None or -1.0 <= b["probe_spearman"] <= 1.0
            assert b["top_quarter_margin"] is None or -1.0 <= b["top_quarter_margin"] <= 1.0
            assert 0 <= b["queue_full_cycles"] <= 2
        assert sc["goals"]["rss_growth_lt_10pct"]["met"] in (True, False)
        assert set(sc["summary"]) == {*SUMMARY_KEYS, "emitted_per_cycle"}
    rising = data["scenarios"]["rising"]
    assert [a["version"] for a in rising["announced"]] == ["v1"] and rising["announced"][0]["before_cycle"] == 2
    assert [b["version"] for b in rising["blocks"]] == ["", "v1"]
    assert 0.0 <= rising["announced"][0]["untrained_in_band"] <= 1.0  # the untrained sample under v1
    assert rising["config"]["solver"]["synthetic_skill_by_version"] == {"v1": rising["announced"][0]["skill"]}
    assert data["scenarios"]["frozen"]["announced"] == []
    png = tmp_path / "long_run_quick.png"
    png.unlink()
    again = _bench(tmp_path, "--plot-only")
    assert again.returncode == 0, again.stderr[-2000:]
    assert png.stat().st_size > 0

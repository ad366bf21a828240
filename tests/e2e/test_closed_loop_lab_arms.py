"""The closed loop's two lab arms (#35) in quick mode, run as a user runs it (a subprocess): Reasoning Gym
with its own curriculum and online difficulty filtering serve through `propel tasks import` + `propel
serve`, the synthetic trainer leases and acks, and every rollout is counted (the filter's dropped groups
included). A wiring check, not a result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.long]

ROOT = Path(__file__).resolve().parents[2]


def test_lab_arms_quick_serve_through_the_product_and_count_every_rollout(tmp_path: Path) -> None:
    pytest.importorskip("reasoning_gym", reason="pip install reasoning-gym==0.1.25 (docs/FRONTIER.md)")
    env = {**os.environ, "PROPEL_BENCH_RESULTS": str(tmp_path / "results"), "OMP_NUM_THREADS": "1"}
    cache = Path(os.environ.get("PROPEL_E2E_CACHE", tmp_path / "data"))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.closed_loop", "--quick", "--arms", "reasoning_gym,filter",
                           "--steps-per-round", "2", "--data-dir", str(cache)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads((tmp_path / "results" / "closed_loop.json").read_text())
    [(row, table)] = data["rows"].items()
    settings = data["settings"][row]
    assert set(table) == {"reasoning_gym", "filter"}
    per_seed = {r["arm"]: r for r in data["per_seed"][row]}
    for arm in ("reasoning_gym", "filter"):
        rounds = per_seed[arm]["rounds"]
        assert [r["steps"] for r in rounds] == [settings["steps_per_round"] * (i + 1) for i in range(len(rounds))]
        trained = sum(r["groups"] for r in rounds)
        assert trained == settings["steps_per_round"] * settings["batch"] * len(rounds), arm
        assert rounds[-1]["rollouts"] == trained * settings["group"], arm  # the trainer's rollouts
        assert rounds[-1]["daemon_trials"] == 0, arm  # no daemon in these arms
        assert table[arm]["solver_rollouts"]["mean"][-1] == rounds[-1]["rollouts"] + rounds[-1]["filter_rollouts"]
    filt = per_seed["filter"]["rounds"]
    assert all(r["useful_groups"] == r["groups"] for r in filt)  # it trains on kept groups only
    assert filt[-1]["filter_rollouts"] % settings["group"] == 0
    rg = per_seed["reasoning_gym"]["rounds"]
    assert all(r["level"] is not None and r["level"] >= 0 for r in rg) and rg[-1]["filter_rollouts"] == 0


def test_the_daemons_stream_filtered_by_the_trainer_trains_on_kept_groups_and_counts_every_rollout(
        tmp_path: Path) -> None:
    env = {**os.environ, "PROPEL_BENCH_RESULTS": str(tmp_path / "results"), "OMP_NUM_THREADS": "1"}
    cache = Path(os.environ.get("PROPEL_E2E_CACHE", tmp_path / "data"))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.closed_loop", "--quick", "--arms",
                           "continuous_filter,continuous", "--steps-per-round", "2", "--data-dir", str(cache)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads((tmp_path / "results" / "closed_loop.json").read_text())
    [(row, table)] = data["rows"].items()
    settings = data["settings"][row]
    rounds = {r["arm"]: r for r in data["per_seed"][row]}["continuous_filter"]["rounds"]
    assert all(r["useful_groups"] == r["groups"] for r in rounds), "it trains on kept groups only"
    assert rounds[-1]["rollouts"] == sum(r["groups"] for r in rounds) * settings["group"]
    assert rounds[-1]["daemon_trials"] > 0, "the daemon spot-checks as in the continuous arm"
    assert table["continuous_filter"]["solver_rollouts"]["mean"][-1] == (
        rounds[-1]["rollouts"] + rounds[-1]["filter_rollouts"] + rounds[-1]["daemon_trials"])
    vs = data["stats"][row]["continuous_filter"]["vs"]
    assert set(vs) == {"continuous"}, "compared with every other arm of the run"
    assert "best_non_daemon" not in data["stats"][row], "both arms run the daemon: neither is a lab's alternative"

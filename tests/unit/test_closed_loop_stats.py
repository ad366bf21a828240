"""The closed loop's paired statistics (#35) on hand-made per-seed results: reach by interpolation,
reach ratios by steps and by all rollouts, intervals, seeds that never reach, the wait share."""

from __future__ import annotations

from typing import Any

import pytest

from testkit.closed_loop_stats import all_rollouts, comparisons, mean_ci, reach, reach_ratios


def run(arm: str, seed: int, accs: list[float], rollouts_per_step: int = 128, trials: int = 0,
        dropped: int = 0, in_band: float = 0.2, wait: float = 0.0) -> dict[str, Any]:
    """Four rounds of 16 steps; ``accs`` the held-out accuracy after each, from a 0.4 start."""
    rounds = [{"steps": 16 * (i + 1), "heldout_accuracy": a, "rollouts": rollouts_per_step * 16 * (i + 1),
               "filter_rollouts": dropped * (i + 1), "daemon_trials": trials * (i + 1), "in_band": in_band,
               "train_s": 10.0 * (i + 1), "wait_s": wait * 10.0 * (i + 1)} for i, a in enumerate(accs)]
    return {"arm": arm, "seed": seed, "start_heldout": 0.4, "rounds": rounds}


def test_reach_interpolates_and_says_never() -> None:
    xs, ys = [0, 16, 32], [0.4, 0.5, 0.7]
    assert reach(xs, ys, 0.6) == pytest.approx(24.0)
    assert reach(xs, ys, 0.4) == 0.0
    assert reach(xs, ys, 0.71) is None


def test_mean_ci_is_a_t_interval_and_needs_two_seeds() -> None:
    ci = mean_ci([1.0, 2.0, 3.0])
    assert ci["mean"] == 2.0 and ci["lo"] == pytest.approx(2 - 4.303 * 1 / 3 ** 0.5, abs=1e-3)
    assert mean_ci([1.0]) == {"mean": 1.0, "lo": None, "hi": None, "n": 1}
    assert mean_ci([])["mean"] is None


def test_all_rollouts_count_the_filter_and_the_daemon() -> None:
    assert all_rollouts({"rollouts": 100, "filter_rollouts": 40, "daemon_trials": 7}) == 147


def test_reach_ratios_pair_by_seed_in_steps_and_in_rollouts() -> None:
    fast = [run("continuous", s, [0.5, 0.6, 0.7, 0.8], trials=1024) for s in range(3)]
    slow = [run("base", s, [0.45, 0.5, 0.55, 0.6]) for s in range(3)]
    steps = reach_ratios(fast, slow, "steps")
    assert steps["per_seed"] == [0.5] * 3 and steps["never_reached"] == 0  # 0.6 after 32 of 64 steps
    rollouts = reach_ratios(fast, slow, "rollouts")  # the daemon's trials are charged to continuous
    assert rollouts["per_seed"] == [pytest.approx((32 * 128 + 2 * 1024) / (64 * 128))] * 3
    back = reach_ratios(slow, fast, "steps")
    assert back["never_reached"] == 3 and back["mean"] is None


def test_comparisons_name_the_best_non_daemon_arm_and_the_paired_in_band_and_wait() -> None:
    runs = [run("continuous", s, [0.5, 0.6, 0.7, 0.8], in_band=0.3, wait=0.5) for s in range(2)]
    runs += [run("static", s, [0.5, 0.55, 0.6, 0.65], in_band=0.2) for s in range(2)]
    runs += [run("filter", s, [0.5, 0.6, 0.7, 0.75], dropped=500) for s in range(2)]
    runs += [run("corpus", s, [0.45, 0.5, 0.55, 0.6]) for s in range(2)]
    out = comparisons(runs)
    assert out["best_non_daemon"] == "filter"
    assert set(out["vs"]) == {"static", "filter", "corpus"}
    assert out["final_in_band_vs_static"]["mean"] == pytest.approx(1.5)
    assert out["wait_share"]["continuous"]["mean"] == pytest.approx(0.5)
    assert out["wait_share"]["corpus"]["mean"] == 0.0
    assert out["queue_wait_share"]["continuous"]["n"] == 0, "results without queue_wait_s are left out, not 0"
    diff = out["vs"]["corpus"]["final_heldout_difference"]
    assert diff["mean"] == pytest.approx(0.2) and diff["n"] == 2


def test_the_trainer_labels_arm_is_a_daemon_arm_never_the_best_non_daemon_one() -> None:
    runs = [run("continuous", s, [0.5, 0.6, 0.7, 0.8]) for s in range(2)]
    runs += [run("trainer_labels", s, [0.6, 0.7, 0.8, 0.9]) for s in range(2)]  # higher, but the daemon's
    runs += [run("corpus", s, [0.45, 0.5, 0.55, 0.6]) for s in range(2)]
    out = comparisons(runs)
    assert out["best_non_daemon"] == "corpus" and set(out["vs"]) == {"trainer_labels", "corpus"}
    assert out["vs"]["trainer_labels"]["final_heldout_difference"]["mean"] == pytest.approx(-0.1)

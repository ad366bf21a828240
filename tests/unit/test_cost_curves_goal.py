"""The cost-curves goal (issue #22): an arm's lift per 1,000 solver trials against SIL's at every chunk,
the ratio at the final horizon against the ≥ 3× target, and the first chunks at which the arm passes
SIL and 3× SIL; ``--arms`` picks arms by name, in the benchmark's order."""

from __future__ import annotations

import click
import pytest

from testkit.cost_summary import ACTIVE_ARM, ARMS, parse_arms, summarise


def _curve(trials: list[float], utility: list[float]) -> list[dict[str, float]]:
    return [{"step": 30.0 * (i + 1), "trials": t, "rl_s": 1.0, "utility": u}
            for i, (t, u) in enumerate(zip(trials, utility, strict=True))]


def test_goal_reports_ratio_and_both_crossings() -> None:
    # base 0.2; SIL lifts 0.1 per 1k trials at every chunk; the arm 0.05, 0.2, 0.4 per 1k
    sil = _curve([1000, 2000, 3000], [0.3, 0.4, 0.5])
    arm = _curve([2000, 2000, 1000], [0.3, 0.6, 0.6])
    goal = summarise({ACTIVE_ARM: [arm], "SIL": [sil]}, [0.2], (1.0,))["goal"][ACTIVE_ARM]
    assert goal["ratio_by_step"] == pytest.approx([0.5, 2.0, 4.0])
    assert goal["vs_sil_lift_per_trial_final"] == pytest.approx(4.0) and goal["met"]
    assert goal["first_step_per_trial_at_least_sil"] == 60.0
    assert goal["first_step_per_trial_at_least_target_x_sil"] == 90.0


def test_no_ratio_where_sil_does_not_lift() -> None:
    summary = summarise({"PROPEL": [_curve([100], [0.5])], "SIL": [_curve([100], [0.1])]}, [0.2], (1.0,))
    goal = summary["goal"]["PROPEL"]
    assert goal["vs_sil_lift_per_trial_final"] is None and not goal["met"] and goal["note"]
    assert summary["arms"]["PROPEL"]["utility_final_per_seed"] == [0.5]


def test_arms_are_chosen_by_name_in_the_benchmarks_order() -> None:
    assert parse_arms(f" SIL ,{ACTIVE_ARM}") == (ACTIVE_ARM, "SIL")
    assert parse_arms(",".join(ARMS)) == ARMS
    with pytest.raises(click.BadParameter):
        parse_arms("PROPEL,nope")

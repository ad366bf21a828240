"""Pooling long-run arms over seeds (benchmarks/long_run_arms.py) on hand-made summaries."""

from __future__ import annotations

from testkit.long_run_arms import FIGURES, compare, seeds_by_arm


def _summary(v: float) -> dict[str, float]:
    return dict.fromkeys(FIGURES, v)


def test_arms_pool_seeds_by_suffix_and_skip_unfinished_runs() -> None:
    files = [{"scenarios": {"frozen[defaults]": {"status": "done", "summary": _summary(0.1)},
                            "frozen[defaults-s1]": {"status": "done", "summary": _summary(0.3)},
                            "frozen[new]": {"status": "done", "summary": _summary(0.4)},
                            "frozen[new-s1]": {"status": "stopped by a signal after 3 of 48 cycles",
                                               "summary": _summary(9.0)},
                            "frozen": {"status": "done", "summary": _summary(5.0)}}},  # no arm: not pooled
             {"scenarios": {"frozen[new-s2]": {"status": "done", "summary": _summary(0.6)},
                            "frozen[defaults-s2]": {"status": "done", "summary": _summary(0.2)}}}]
    arms = seeds_by_arm(files)
    assert {a: sorted(s) for a, s in arms.items()} == {"frozen[defaults]": [0, 1, 2], "frozen[new]": [0, 2]}
    table = compare(arms, "frozen[defaults]")
    assert abs(table["frozen[defaults]"]["gate_margin"]["mean"] - 0.2) < 1e-9
    assert "gate_margin_minus_baseline" not in table["frozen[defaults]"]
    diff = table["frozen[new]"]["gate_margin_minus_baseline"]  # paired: seed 0 (0.4 − 0.1) and seed 2 (0.6 − 0.2)
    assert diff["n"] == 2 and abs(diff["mean"] - 0.35) < 1e-9 and diff["lo"] < 0.35 < diff["hi"]

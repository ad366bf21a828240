"""The long-run benchmark's block and goal arithmetic (testkit/long_run_report.py) on hand-made cycles."""

from __future__ import annotations

from typing import Any

import click
import pytest

from testkit.long_run import CycleRecord, Scenario, apply_overrides, parse_arm
from testkit.long_run_report import SUMMARY_KEYS, block, goals, ranking, spearman, spot_gaps, summary

TEXTS = ["1+2", "3*4", "5-1", "7+8", "9*2", "6-3"]


def rec(cycle: int, emitted: list[float], valid: list[float], spot: int = 32, degraded: list[str] | None = None,
        alerts: list[dict[str, Any]] | None = None, validity: float = 0.95, top: float = 0.2, rss: float = 100.0,
        wall: float | None = None) -> CycleRecord:
    return CycleRecord(cycle=cycle, version="", wall_s=float(cycle * 10 if wall is None else wall),
                       valid_in_band=valid, valid_texts=TEXTS, valid_topics=["add", "mul", "sub", "add", "mul", "sub"],
                       emitted_in_band=emitted, metrics={"validity": validity, "top_topic_share": top,
                                                         "spotcheck_dispatched": float(spot)},
                       alerts=alerts or [], degraded=degraded or [], rss_mib=rss)


BASE = {"in_band": 0.2, "self_bleu3": 0.9}


def test_block_pools_the_cycles_tasks_and_the_margin_goal_needs_plus_0_10() -> None:
    records = [rec(0, [0.7, 0.5], [0.3, 0.5]), rec(1, [0.6], [0.4])]
    b = block(records)
    assert b["emitted"] == 3 and abs(b["emitted_in_band"] - 0.6) < 1e-9 and abs(b["valid_in_band"] - 0.4) < 1e-9
    assert b["emitted_per_cycle"] == [2, 1] and b["spotchecks_per_cycle"] == [32, 32]
    g = goals([b], records, BASE, [])
    assert g["emitted_vs_valid_plus_0.10"]["met"] is True  # margin 0.2
    assert g["emitted_vs_2x_untrained"]["met"] is True  # 0.6 ≥ 2 × 0.2
    worse = [rec(0, [0.45], [0.4])]
    assert goals([block(worse)], worse, BASE, [])["emitted_vs_valid_plus_0.10"]["met"] is False


def test_block_reports_the_untrained_generators_candidates_apart_from_the_policys_sample() -> None:
    plain = block([rec(0, [0.7, 0.5], [0.3, 0.5])])
    assert plain["reference_in_band"] is None and plain["emitted_reference_share"] == 0.0
    with_ref = [rec(0, [0.7, 0.5], [0.3, 0.5]), rec(1, [0.6, 0.2], [0.4])]
    with_ref[0].reference_in_band, with_ref[1].reference_in_band = [0.1, 0.3], [0.5]
    with_ref[0].emitted_reference, with_ref[1].emitted_reference = 1, 2
    b = block(with_ref)
    assert b["reference_in_band"] == pytest.approx(0.3) and b["emitted_reference_share"] == pytest.approx(0.75)
    assert b["valid_in_band"] == pytest.approx(0.4), "the margin's baseline stays the policy's own sample"
    assert block([rec(0, [], [0.3])])["emitted_reference_share"] is None


def test_spot_gap_counts_cycles_and_seconds_since_the_last_spot_check() -> None:
    records = [rec(0, [], [], spot=32), rec(1, [], [], spot=0), rec(2, [], [], spot=0), rec(3, [], [], spot=4),
               rec(4, [], [], spot=0)]
    assert spot_gaps(records) == (2, 20.0)
    long_gap = [rec(0, [0.5], [0.3], spot=32, wall=10), rec(1, [0.5], [0.3], spot=0, wall=400)]
    assert goals([block(long_gap)], long_gap, BASE, [])["spotcheck_gap_le_10pct_window"]["met"] is False


def test_a_silent_emission_stall_fails_and_one_with_a_named_reason_passes() -> None:
    silent = [rec(c, [], [0.3]) for c in range(10)]
    g = goals([block(silent)], silent, BASE, [])["emission_never_stops_silently"]
    assert g["met"] is False and g["stalls"] == [{"cycles": [0, 9], "raised": []}]
    said = [rec(c, [], [0.3], degraded=["emission_stalled"] if c >= 9 else []) for c in range(10)]
    assert goals([block(said)], said, BASE, [])["emission_never_stops_silently"]["met"] is True
    short = [rec(c, [] if c < 9 else [0.5], [0.3]) for c in range(10)]  # 9 empty cycles: no stall
    assert goals([block(short)], short, BASE, [])["emission_never_stops_silently"]["stalls"] == []


def test_a_trickle_the_stall_goal_passes_is_a_dry_stretch_of_the_supply_goal() -> None:
    """One task every third cycle for 30 cycles: never 10 empty cycles in a row (no stall), under a task a cycle."""
    trickle = [rec(c, [0.5] if c % 3 == 0 else [], [0.3]) for c in range(30)]
    g = goals([block(trickle)], trickle, BASE, [])
    assert g["emission_never_stops_silently"] == {"met": True, "stalls": []}
    assert g["supply_ge_1_per_cycle"] == {"met": False, "dry_cycles": 30,
                                          "stretches": [{"cycles": [0, 29], "emitted": 10, "raised": []}]}
    fed = [rec(c, [0.5] * (12 if c < 10 else 0), [0.3]) for c in range(25)]  # 120 in the first window, then none
    fed[24].degraded = ["emission_stalled"]
    assert goals([block(fed)], fed, BASE, [])["supply_ge_1_per_cycle"]["stretches"] == [
        {"cycles": [10, 24], "emitted": 0, "raised": ["emission_stalled"]}]
    for r in trickle:
        r.metrics["backpressure"] = 1.0  # a full queue: nothing may be emitted, nothing is short
    assert goals([block(trickle)], trickle, BASE, [])["supply_ge_1_per_cycle"]["met"] is True


def test_a_full_queue_is_backpressure_not_a_stall() -> None:
    full = [rec(c, [], [0.3]) for c in range(12)]
    for r in full[2:]:
        r.metrics["backpressure"] = 1.0  # the queue at its high-water mark from cycle 2 on
    g = goals([block(full)], full, BASE, [])["emission_never_stops_silently"]
    assert g == {"met": True, "stalls": []} and block(full)["queue_full_cycles"] == 10
    full[11].metrics["backpressure"] = 0.0  # room again, still nothing emitted: counting restarts there
    stalled = full + [rec(c, [], [0.3]) for c in range(12, 21)]
    assert goals([block(stalled)], stalled, BASE, [])["emission_never_stops_silently"]["stalls"] == [
        {"cycles": [11, 20], "raised": []}]


def test_recovery_compares_cycles_12_to_19_after_the_jump_with_the_8_before() -> None:
    records = [rec(c, [0.5] if c < 8 else [0.2] if c < 20 else [0.45], [0.3]) for c in range(28)]
    jump = [{"version": "v1", "before_cycle": 8, "skill": 7.0}]
    g = goals([block(records)], records, BASE, jump)["recovery_after_jump"]
    assert g["met"] is True and abs(g["jumps"][0]["after"] - 0.45) < 1e-9  # 0.45 ≥ 0.8 × 0.5
    cut = records[:20]  # the run ended before the 20 cycles after the jump: not measurable
    assert goals([block(cut)], cut, BASE, jump)["recovery_after_jump"]["met"] is None


def test_rss_topic_and_validity_goals() -> None:
    first = [rec(0, [0.5], [0.3], top=0.2, rss=100.0)]
    last = [rec(1, [0.5], [0.3], top=0.35, validity=0.8, rss=115.0)]
    g = goals([block(first), block(last)], first + last, BASE, [])
    assert g["rss_growth_lt_10pct"]["met"] is False and g["top_topic_le_first_plus_0.10"]["met"] is False
    assert g["validity_ge_0.90"]["met"] is False and g["validity_ge_0.90"]["blocks_met"] == 1


def test_rising_scenario_names_one_version_per_jump() -> None:
    assert Scenario("rising", 500, rise_every=100).versions(6.0) == {"v1": 7.0, "v2": 8.0, "v3": 9.0, "v4": 10.0}
    assert Scenario("frozen", 500).versions(6.0) == {}


def test_the_untrained_reference_follows_the_blocks_solver_version() -> None:
    records = [rec(0, [0.5], [0.3])]
    b = block(records) | {"version": "v1"}
    jump = [{"version": "v1", "before_cycle": 0, "skill": 7.0, "untrained_in_band": 0.3}]
    g = goals([b], records, BASE, jump)["emitted_vs_2x_untrained"]
    assert g["met"] is False and g["untrained_in_band"] == {"": 0.2, "v1": 0.3}  # 0.5 < 2 × 0.3


def test_spearman_uses_ranks_with_ties_and_is_none_when_a_side_is_constant() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 1000]) == 1.0
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert abs(spearman([1, 1, 2, 3], [1, 2, 3, 4]) - 0.9486832980505138) < 1e-12  # tied scores share a rank
    assert spearman([1, 1, 1], [1, 2, 3]) is None and spearman([1, 2], [1, 2]) is None


def test_ranking_says_what_a_top_quarter_gate_would_gain_over_all_valid_tasks() -> None:
    r = rec(0, [], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.9])
    r.valid_scores = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, None]  # the unscored task is left out
    rho, gain = ranking(r)
    assert rho == 1.0 and abs(gain - (0.65 - 0.4)) < 1e-12  # top 2 of 7: (0.6 + 0.7) / 2 vs the mean 0.4
    b = block([r])
    assert b["probe_spearman"] == 1.0 and abs(b["top_quarter_margin"] - 0.25) < 1e-12
    assert block([rec(1, [], [0.3, 0.4])])["probe_spearman"] is None  # no scores recorded


def test_overrides_set_a_section_key_or_a_top_level_setting_and_name_an_unknown_one() -> None:
    raw = {"seed": 0, "rl": {"kl_beta": 0.04}}
    assert apply_overrides(raw, ["seed=3", "rl.kl_beta=0.1"]) == {"seed": 3, "rl": {"kl_beta": 0.1}}
    for bad, says in (("rl.nope=1", "no setting rl.nope"), ("rl=1", "no setting rl"), ("seed", "KEY=VALUE"),
                      (".seed=1", "KEY=VALUE")):
        with pytest.raises(ValueError, match=says):
            apply_overrides(raw, [bad])


def test_summary_leaves_the_first_block_out_and_counts_emitted_per_cycle() -> None:
    first = block([rec(0, [0.9] * 40, [0.1] * 4)])  # cycle 0's start-up emission
    later = [block([rec(1, [0.6, 0.4], [0.3, 0.5]), rec(2, [], [0.4])]), block([rec(3, [0.5], [0.5])])]
    s = summary([first, *later])
    assert s["emitted_per_cycle"] == 1.0 and abs(s["emitted_in_band"] - (0.5 + 0.5) / 2) < 1e-12
    assert abs(s["gate_margin"] - (0.1 + 0.0) / 2) < 1e-12 and s["probe_spearman"] is None
    assert summary([first]) == dict.fromkeys((*SUMMARY_KEYS, "emitted_per_cycle"))


def test_an_arm_is_a_name_and_its_settings() -> None:
    assert parse_arm("defaults") == ("defaults", ())
    assert parse_arm("paced:spotcheck.budget_per_hour=2048; seed=1") == ("paced", ("spotcheck.budget_per_hour=2048",
                                                                                    "seed=1"))
    with pytest.raises(click.BadParameter, match="NAME:KEY=VALUE"):
        parse_arm("two words")

"""testkit.closed_loop_stats.pair_rounds (benchmarks/closed_loop_pairs.py): two closed-loop results paired by seed."""

from __future__ import annotations

from typing import Any

import pytest

from testkit.closed_loop_stats import pair_rounds as pair


def _rounds(*in_band: float) -> list[dict[str, Any]]:
    return [{"steps": 50 * (i + 1), "in_band": v, "useful_share": v / 2, "heldout_accuracy": 0.5}
            for i, v in enumerate(in_band)]


def test_pairs_only_common_seeds_and_differences_within_a_seed() -> None:
    a = {0: _rounds(0.1, 0.3), 1: _rounds(0.2, 0.5), 7: _rounds(0.9, 0.9)}  # seed 7 has no partner
    b = {0: _rounds(0.1, 0.2), 1: _rounds(0.1, 0.3), 2: _rounds(0.0, 0.0)}
    got = pair(a, b)
    assert got["seeds"] == [0, 1]
    last = got["rounds"][1]["in_band"]
    assert last["a_per_seed"] == [0.3, 0.5] and last["b_per_seed"] == [0.2, 0.3]
    assert last["a_minus_b"]["mean"] == pytest.approx(0.15) and last["a_minus_b"]["n"] == 2
    assert last["a_minus_b"]["lo"] < 0.15 < last["a_minus_b"]["hi"]
    assert got["rounds"][0]["steps"] == 50 and got["rounds"][1]["useful_share"]["a"]["mean"] == pytest.approx(0.2)


def test_no_common_seed_pairs_nothing() -> None:
    assert pair({0: _rounds(0.1)}, {1: _rounds(0.2)}) == {"seeds": [], "rounds": []}

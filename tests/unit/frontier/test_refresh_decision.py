"""Champion/challenger decision and the recent-holdout split (pure functions, tables)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest

from curriculum.frontier.refresh import HoldoutScore, decide, foreign_champion, relabel, split_recent
from curriculum.frontier.staleness import LabelRecord
from probes import Probe
from probes.band import Band


def hs(bacc: float, ece: float, n: int = 40) -> HoldoutScore:
    return HoldoutScore(bacc, ece, n)


@pytest.mark.parametrize(("champion", "challenger", "kwargs", "promote", "why"), [
    (hs(0.60, 0.10), hs(0.70, 0.08), {}, True, "→"),
    (hs(0.60, 0.10), hs(0.70, 0.10), {}, True, "→"),                       # equal ECE is not worse
    (hs(0.60, 0.10), hs(0.70, 0.12), {}, False, "ECE"),                    # better accuracy, worse calibration
    (hs(0.60, 0.10), hs(0.70, 0.12), {"ece_tolerance": 0.05}, True, "→"),
    # a champion at chance is calibrated by predicting the base rate: its ECE guards nothing (#35's stalled seed)
    (hs(0.500, 0.027), hs(0.578, 0.056), {}, True, "ranks at chance"),
    (hs(0.498, 0.073), hs(0.594, 0.076), {}, True, "ranks at chance"),
    (hs(0.500, 0.027), hs(0.500, 0.010), {}, False, "does not beat"),        # still has to rank better
    (hs(0.500, 0.027), hs(0.510, 0.056), {"min_gain": 0.02}, False, "does not beat"),
    (hs(0.510, 0.027), hs(0.578, 0.056), {}, False, "ECE"),                  # above chance: the ECE guard holds
    (hs(0.70, 0.10), hs(0.70, 0.05), {}, False, "does not beat"),          # a tie keeps the champion
    (hs(0.70, 0.10), hs(0.65, 0.05), {}, False, "does not beat"),
    (hs(0.60, 0.10), hs(0.62, 0.05), {"min_gain": 0.05}, False, "does not beat"),
    (None, hs(0.55, 0.30), {}, True, "champion could not be scored"),
    (hs(0.60, 0.10), None, {}, False, "no challenger"),
    (hs(0.50, 0.10), hs(0.90, 0.01, n=5), {}, False, "holdout"),
    # a champion that learned another solver's labels does not guard this one's frontier, even when it scores higher
    (hs(0.40, 0.26), hs(0.38, 0.44), {"foreign": "the champion learned a's labels, not b's"}, True, "not b's"),
    (hs(0.40, 0.26), hs(0.38, 0.44, n=5), {"foreign": "the champion learned a's labels"}, False, "holdout"),
    (hs(0.40, 0.26), hs(0.38, 0.44), {"foreign": None}, False, "does not beat"),
])
def test_decision_table(champion: HoldoutScore | None, challenger: HoldoutScore | None, kwargs: dict[str, object],
                        promote: bool, why: str) -> None:
    verdict = decide(champion, challenger, **kwargs)  # type: ignore[arg-type]
    assert verdict.promote is promote and why in verdict.reason


@pytest.mark.parametrize(("n", "share", "n_train", "n_hold"), [
    (100, 0.25, 75, 25), (10, 0.25, 8, 2), (3, 0.25, 2, 1), (1, 0.5, 1, 0), (0, 0.25, 0, 0), (10, 0.99, 1, 9),
])
def test_split_recent_holds_out_the_newest(n: int, share: float, n_train: int, n_hold: int) -> None:
    train, hold = split_recent(list(range(n)), share)
    assert (len(train), len(hold)) == (n_train, n_hold)
    assert train + hold == list(range(n))  # the holdout is the most recent tail


@pytest.mark.parametrize(("n", "exclude", "hold"), [
    (8, {6, 7}, [4, 5]),  # the newest two are the champion's training tasks: the next newest are held out
    (8, {0, 1}, [6, 7]),  # excluded old tasks change nothing
    (8, {5, 6, 7}, [3, 4]),
    (4, {1, 2, 3}, [0]),  # fewer eligible tasks than the share: the holdout shrinks
    (4, {0, 1, 2, 3}, []),  # every task trained the champion: nothing to judge it on
])
def test_split_recent_never_holds_out_what_the_champion_trained_on(n: int, exclude: set[int], hold: list[int]) -> None:
    train, got = split_recent(list(range(n)), 0.25, frozenset(exclude))
    assert got == hold and not set(got) & exclude
    assert sorted(train + got) == list(range(n)) and set(exclude) <= set(train)


def trained_for(*solvers: str | None) -> list[Probe]:
    """Champion members whose ``training`` names ``solvers`` (None: an artifact from before probes said)."""
    return [cast(Probe, SimpleNamespace(training={} if who is None else {"solver": who})) for who in solvers]


@pytest.mark.parametrize(("solvers", "followed", "foreign"), [
    (("synthetic:x",), "my-policy", "the champion learned synthetic:x's labels, not my-policy's"),
    (("synthetic:x", "synthetic:x"), "synthetic:x", None),  # its own solver's champion
    (("my-policy", "synthetic:x"), "my-policy", None),  # one member learned this solver's labels: it guards
    ((None,), "my-policy", None),  # an artifact that does not say whose labels: the accuracy gate decides
    (("synthetic:x",), "", None),  # a spec that names no solver judges nothing foreign
    ((), "my-policy", None),
])
def test_foreign_champion(solvers: tuple[str | None, ...], followed: str, foreign: str | None) -> None:
    assert foreign_champion(trained_for(*solvers), followed) == foreign


def aimed_at(*bands: tuple[int, int]) -> list[Probe]:
    """Champion members of one solver's labels, each aimed at a band of 8 attempts."""
    return [cast(Probe, SimpleNamespace(training={"solver": "my-policy"}, band=b, k=8)) for b in bands]


@pytest.mark.parametrize(("bands", "refresh", "foreign"), [
    (((0, 2),), Band(8, 1, 3), "the champion aims at 0-2 of 8 solves, this refresh at 1-3 of 8"),  # lead 1 → 0
    (((1, 3),), Band(8, 1, 3).lowered(1), "the champion aims at 1-3 of 8 solves, this refresh at 0-2 of 8"),
    (((1, 3), (1, 3)), Band(8, 1, 3), None),  # the same band: the accuracy gate decides
    (((1, 3),), Band(16, 1, 3), "the champion aims at 1-3 of 8 solves, this refresh at 1-3 of 16"),
    (((0, 2), (1, 3)), Band(8, 1, 3), None),  # one member aims here: it guards
])
def test_a_champion_aimed_at_another_band_does_not_guard_this_one(
        bands: tuple[tuple[int, int], ...], refresh: Band, foreign: str | None) -> None:
    assert foreign_champion(aimed_at(*bands), "my-policy", refresh) == foreign
    assert foreign_champion(aimed_at(*bands), "my-policy") is None  # a spec without a band judges no band


def test_a_foreign_band_promotes_the_challenger_on_a_tie() -> None:
    tie = HoldoutScore(0.6, 0.05, 40)
    assert not decide(tie, tie).promote
    why = foreign_champion(aimed_at((0, 2)), "my-policy", Band(8, 1, 3))
    verdict = decide(tie, tie, foreign=why)
    assert verdict.promote and "aims at 0-2 of 8" in verdict.reason


@pytest.mark.parametrize(("source", "solved", "valid", "verdict"), [
    ("consumer", 0, 8, True), ("consumer", 2, 8, True), ("consumer", 3, 8, False),  # band 1-3 lowered to 0-2
    ("consumer", 4, 16, True), ("consumer", 6, 16, False),  # a trainer's group of 16: the rate counts
    ("spotcheck", 3, 8, False), ("spotcheck", 0, 8, True),
    ("spotcheck", 4, 4, False),  # stopped early, too easy for 1-3: more than 2 of 8 whatever followed
    ("spotcheck", 1, 6, None),   # stopped early, in band for 1-3: 1-3 of 8, and 3 is out of 0-2
    ("spotcheck", 0, 7, True),   # 0 or 1 of 8: in 0-2 either way
])
def test_relabel_under_a_lowered_band_keeps_only_verdicts_no_remaining_attempt_changes(
        source: str, solved: int, valid: int, verdict: bool | None) -> None:
    label = LabelRecord(1, "policy", "step-1", source, solved, valid, None)
    assert relabel(label, Band(8, 1, 3).lowered(1)) is verdict

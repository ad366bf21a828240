"""Following a trainer (issue #36): the exploration share is a capped share of what is emitted, and a
trainer's solver refreshes its primary probe on its own label count."""

from __future__ import annotations

import pytest

from curriculum.frontier.frontier_labels import AckSides
from daemon.loop.follow import below_bar_plan, explore_picks, frontier_settings, mark
from daemon.loop.frontier import FrontierSettings
from daemon.loop.phases import Candidate


def _cands(n: int, topic: str = "add:1") -> list[Candidate]:
    return [Candidate(i, 0.9 if i < 10 else 0.1, topic) for i in range(n)]


def test_explore_is_a_share_of_the_emitted_never_a_filler() -> None:
    cands = _cands(100)
    plan = list(range(17))
    picks = explore_picks(cands, plan, 0.15, frozenset(), seed=3)
    assert len(picks) == 3  # ceil(17 * 0.15 / 0.85): 3 of 20 emitted, 15 %
    assert not set(picks) & set(plan) and len(set(picks)) == 3
    assert explore_picks(cands, plan, 0.15, frozenset(), seed=3) == picks  # deterministic in the seed
    assert explore_picks(cands, [], 0.15, frozenset(), seed=3) == []  # the probes selected nothing: nothing
    assert explore_picks(cands, plan, 0.0, frozenset(), seed=3) == []
    assert len(explore_picks(_cands(18), plan, 0.5, frozenset(), seed=1)) == 1  # no more than the rest


def test_explore_skips_paused_topics() -> None:
    cands = [*_cands(20, "mul:3"), Candidate(50, 0.1, "add:1")]
    assert explore_picks(cands, [0, 1, 2, 3, 4], 0.5, frozenset({"mul:3"}), seed=0) == [50]


def test_mark_flags_explored_messages_only() -> None:
    assert mark({"id": 1}, True) == {"id": 1, "explore": True}
    assert mark({"id": 1}, False) == {"id": 1}
    assert mark({"id": 1}, False, below_bar=True) == {"id": 1, "below_bar": True}


def test_a_stall_serves_the_top_quarter_below_the_bar_only_into_an_empty_queue() -> None:
    cands = [Candidate(i, i / 100, "add:1" if i % 2 else "mul:2") for i in range(40)]
    top = below_bar_plan(cands, stalled=True, ready=0, paused=frozenset(), max_topic_share=1.0)
    assert top == list(range(39, 29, -1))  # a quarter of 40, highest score first, whatever the bar
    assert below_bar_plan(cands, stalled=False, ready=0, paused=frozenset(), max_topic_share=1.0) == []
    assert below_bar_plan(cands, stalled=True, ready=1, paused=frozenset(), max_topic_share=1.0) == []
    assert below_bar_plan([], stalled=True, ready=0, paused=frozenset(), max_topic_share=1.0) == []
    paused = below_bar_plan(cands, stalled=True, ready=0, paused=frozenset({"add:1"}), max_topic_share=1.0)
    assert paused == list(range(38, 18, -2))  # paused topics take none
    rejected = [Candidate(99, 0.99, "add:1", in_band=False), *cands]
    assert 99 not in below_bar_plan(rejected, stalled=True, ready=0, paused=frozenset(), max_topic_share=1.0)


def test_a_trainer_refreshes_on_its_own_label_count() -> None:
    base = FrontierSettings(refresh_every_labels=0, refresh_every_trainer_labels=128)
    assert frontier_settings(base, trainer=True).refresh_every_labels == 128
    assert frontier_settings(base, trainer=False).refresh_every_labels == 0


def test_a_trainer_refreshes_on_its_newest_labels_only() -> None:
    base = FrontierSettings(refresh_trainer_label_window=256)
    assert frontier_settings(base, trainer=True).refresh_recent_labels == 256
    assert frontier_settings(base, trainer=False).refresh_recent_labels == 0  # a spot-checked solver: all usable
    assert frontier_settings(FrontierSettings(), trainer=True).refresh_recent_labels == 0  # the default: all


def test_a_trainer_refresh_aims_below_the_band_by_its_lead() -> None:
    base = FrontierSettings(trainer_band_lead=1)
    assert frontier_settings(base, trainer=True).band_lead == 1
    assert frontier_settings(base, trainer=False).band_lead == 0  # a spot-checked solver: the band itself
    assert frontier_settings(FrontierSettings(), trainer=True).band_lead == "auto"  # the default
    assert frontier_settings(FrontierSettings(trainer_band_lead="auto"), trainer=True).band_lead == "auto"
    assert frontier_settings(FrontierSettings(trainer_band_lead="auto"), trainer=False).band_lead == 0


@pytest.mark.parametrize(("easy", "in_band", "hard", "lead"), [
    (0, 0, 0, 0),  # no acks yet: the band itself
    (5, 10, 5, 0),  # as many above as below: the band itself
    (6, 10, 5, 1),  # more above than below: the served mix is behind the trainer
    (30, 2, 0, 1),
    (0, 2, 30, 0),  # a weak trainer failing most tasks: never aimed ahead (its failures would count in band)
])
def test_an_auto_lead_aims_ahead_only_while_more_acks_lie_above_the_band(easy: int, in_band: int, hard: int,
                                                                          lead: int) -> None:
    sides = AckSides(easy, in_band, hard)
    assert sides.lead == lead
    assert str(sides) == f"{easy} of the newest {easy + in_band + hard} acks above the band, {hard} below"

"""The reward's topic-share term (#34): a penalty on tasks of a topic above its target share of the recent window."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from curriculum.reward.rewards import HardGateReward, SoftGateReward, build_reward
from curriculum.reward.topic_share import TopicShareTerm
from tests.unit.rl.test_rewards import FixedScorer

# arith topics: "<dominant operator>:<operator count>"
MUL3 = ["2*3*4*5", "3*4*5*6", "4*5*6*7", "5*6*7*8"]
MIXED = ["1+2", "9-8", "12*3-4", "(5+6)*7"]
INVALID = ["1+", "hello", "", "((3"]


def test_a_topic_at_or_below_target_costs_nothing_and_the_share_above_is_scaled() -> None:
    term = TopicShareTerm(weight=1.0, target=0.2, window=100)
    term.observe(["a"] * 20 + ["b"] * 80)
    # shares over window + batch: a 21/101, b 80/101 (None: invalid, ignored)
    out = term.penalties(["a", None])
    assert out[1] == 0.0
    assert out[0] == pytest.approx((21 / 101 - 0.2) / 0.8)
    # the window kept its last 100 (the oldest "a" left): b 80 + this call's 1 of 101
    assert term.penalties(["b"])[0] == pytest.approx((81 / 101 - 0.2) / 0.8)


def test_the_window_is_a_fifo_of_valid_topics() -> None:
    term = TopicShareTerm(weight=1.0, target=0.1, window=4)
    term.penalties(["a", None, "a", "b"])
    assert len(term) == 3 and term.shares() == pytest.approx({"a": 2 / 3, "b": 1 / 3})
    term.observe(["c", "c", "c"])  # the two "a"s age out
    assert len(term) == 4 and term.shares() == pytest.approx({"b": 0.25, "c": 0.75})


def test_a_single_topic_gets_the_full_penalty_and_an_empty_window_none() -> None:
    assert TopicShareTerm(weight=1.0).penalties([None, None]) == [0.0, 0.0]
    assert TopicShareTerm(weight=1.0, target=0.15).penalties(["x", "x"]) == [1.0, 1.0]


@pytest.mark.parametrize(("weight", "target", "window"), [(-1.0, 0.15, 8), (1.0, 0.0, 8), (1.0, 1.0, 8),
                                                          (1.0, 0.5, -1)])
def test_bad_settings_are_refused(weight: float, target: float, window: int) -> None:
    with pytest.raises(ValueError, match="need weight"):
        TopicShareTerm(weight, target, window)


@pytest.mark.parametrize("kind", ["hard_gate", "soft_gate", "probe_only"])
def test_the_reward_pays_less_for_the_dominant_topic_and_logs_the_penalty(domain, kind: str) -> None:
    """A batch mostly of one topic: those tasks lose ``weight × penalty``, invalid ones keep the floor."""
    scorer = FixedScorer(default=0.5)
    term = TopicShareTerm(weight=0.4, target=0.15, window=64)
    reward = build_reward(kind, domain, scorer, ["Q:1+2"], group_size=4, topic_share=term)
    plain = build_reward(kind, domain, scorer, ["Q:1+2"], group_size=4)
    completions = [*MUL3[:3], "1+2", *MUL3[3:], "9-8", *INVALID[:2]]
    metrics: dict[str, float] = {}
    out = reward(["Q:"] * 8, completions, log_metric=metrics.__setitem__)
    base = plain(["Q:"] * 8, completions)
    checks = domain.validate_batch(completions)
    topics = [domain.topic(c.task) if c.valid else None for c in checks]
    assert topics[:3] == ["mul:3"] * 3 and topics[6:] == [None, None]
    penalties = TopicShareTerm(weight=0.4, target=0.15, window=64).penalties(topics)
    assert penalties[0] == pytest.approx((4 / 6 - 0.15) / 0.85)
    assert penalties[3] == pytest.approx((1 / 6 - 0.15) / 0.85)
    assert out == pytest.approx([b - 0.4 * p for b, p in zip(base, penalties, strict=True)])
    assert out[0] < out[3]  # the over-represented topic earns less than the rare one of the same score
    valid_mean = float(np.mean(penalties[:6]))
    assert reward.logs[-1].topic_share_penalty == pytest.approx(valid_mean)
    assert metrics["propel/topic_share_penalty"] == pytest.approx(valid_mean)
    assert plain.logs[-1].topic_share_penalty is None and "topic_share_penalty" not in plain.logs[-1].to_dict()
    assert len(term) == 6  # the call's valid topics joined the window


@pytest.mark.parametrize("kind", ["hard_gate", "soft_gate"])
def test_gated_valid_rewards_stay_above_the_floor_with_the_term_on(domain, kind: str) -> None:
    term = TopicShareTerm(weight=50.0, target=0.15)
    scorer = FixedScorer(default=-7.0)
    reward = build_reward(kind, domain, scorer, ["Q:1+2", "Q:9-8"], group_size=4, topic_share=term)
    out = reward(["Q:"] * 8, MUL3 + INVALID)  # one topic: penalty 1 each
    assert isinstance(reward, HardGateReward | SoftGateReward)
    assert out[4:] == [reward.floor] * 4 and all(r == reward.valid_minimum > reward.floor for r in out[:4])
    assert reward.logs[-1].topic_share_penalty == 1.0


def test_the_reward_with_the_term_pickles_with_its_window(domain) -> None:
    term = TopicShareTerm(weight=1.0)
    reward = build_reward("hard_gate", domain, FixedScorer(default=0.5), ["Q:1+2"], group_size=4, topic_share=term)
    reward(["Q:"] * 4, MIXED)
    copy = pickle.loads(pickle.dumps(reward))
    assert copy.topic_share is not None and copy.topic_share.shares() == term.shares()

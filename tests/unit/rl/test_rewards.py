"""Reward contracts: floor below the probe range, WCO minimum, aux constraint, errors, pickling."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np
import pytest

from curriculum.reward.novelty import DiversityTerm
from curriculum.reward.rewards import (
    HardGateReward,
    ProbeOnlyReward,
    RewardError,
    SoftGateReward,
    SolverInTheLoopReward,
    build_reward,
    floor_below,
    zero_spread_share,
)
from curriculum.solvers.synthetic import SyntheticArithSolver
from probes import ProbeEnsemble, ProbeScorer
from probes.band import Band
from tests.unit.rl.conftest import arith_texts, train_test_probe

VALID = ["1+2", "12*3-4", "(5+6)*7", "9-8"]
INVALID = ["1+", "hello", "", "((3"]


class FixedScorer:
    """Hand-written fake: logits looked up by text (default −8: the 'MLP logits near −8' case)."""

    def __init__(self, logits: dict[str, float] | None = None, default: float = -8.0) -> None:
        self.logits = logits or {}
        self.default = default

    def score(self, texts):
        z = np.array([self.logits.get(t, self.default) for t in texts], dtype=float)
        return SimpleNamespace(logits=z, probabilities=1 / (1 + np.exp(-z)))


class BrokenScorer:
    def score(self, texts):
        raise RuntimeError("probe head exploded")


class NanScorer:
    def score(self, texts):
        return SimpleNamespace(logits=np.full(len(texts), np.nan), probabilities=np.full(len(texts), np.nan))


def test_floor_lies_below_a_negative_logit_range(domain) -> None:
    scorer = FixedScorer({"Q:1+2": -9.5, "Q:9-8": -7.0})
    reward = HardGateReward.calibrated(domain, scorer, ["Q:1+2", "Q:9-8", "Q:12*3-4"], group_size=4, margin=1.0)
    assert reward.floor == pytest.approx(-10.5)
    out = reward(["Q:"] * 8, VALID + INVALID)
    assert out[4:] == [reward.floor] * 4
    assert min(out[:4]) > reward.floor  # a fixed −1 would have rewarded invalid output here
    assert out[0] == pytest.approx(-9.5)


def test_valid_logits_below_floor_are_clipped_above_it(domain) -> None:
    reward = HardGateReward(domain, FixedScorer(default=-50.0), floor=-10.0, group_size=2, margin=2.0)
    out = reward(["Q:"] * 2, ["1+2", "oops"])
    assert out == [-9.0, -10.0]
    assert reward.logs[-1].clipped_share == 0.5


def test_hard_gate_with_real_probe_and_logs(domain, scorer) -> None:
    reward = HardGateReward.calibrated(domain, scorer, arith_texts(32, 3), group_size=4)
    metrics: dict[str, float] = {}
    out = reward(["Q:"] * 8, VALID + INVALID, log_metric=metrics.__setitem__)
    valid_logits = scorer.score(["Q:" + t for t in VALID]).logits
    assert out[:4] == pytest.approx(np.maximum(valid_logits, reward.valid_minimum).tolist())
    log = reward.logs[-1]
    assert log.validity_rate == 0.5 and log.zero_spread_share == 0.5  # second group: all invalid
    assert metrics["propel/validity_rate"] == 0.5


def test_ensemble_minimum_and_aux_constraint(domain, reference) -> None:
    p1, p2 = train_test_probe(reference, seed=1, name="a"), train_test_probe(reference, "linear", seed=2, name="b")
    aux = train_test_probe(reference, seed=3, name="aux")
    texts = ["Q:" + t for t in VALID]
    one = [ProbeScorer(reference, p).score(texts).logits for p in (p1, p2, aux)]
    wco = ProbeScorer(reference, ProbeEnsemble([p1, p2], combine="min"))
    constrained = ProbeScorer(reference, ProbeEnsemble([p1, p2], combine="min", constraints=[aux]))
    r_wco = HardGateReward(domain, wco, floor=-1e3, group_size=4)
    r_aux = HardGateReward(domain, constrained, floor=-1e3, group_size=4)
    assert r_wco(["Q:"] * 4, VALID) == pytest.approx(np.minimum(one[0], one[1]).tolist())
    assert r_aux(["Q:"] * 4, VALID) == pytest.approx(np.minimum.reduce(one).tolist())


def test_soft_gate_and_probe_only(domain, scorer) -> None:
    soft = SoftGateReward(domain, scorer, group_size=4)
    out = soft(["Q:"] * 8, VALID + INVALID)
    assert all(0.0 <= r <= 1.0 for r in out[:4]) and out[4:] == [-1.0] * 4
    only = ProbeOnlyReward(domain, scorer, group_size=4)(["Q:"] * 8, VALID + INVALID)
    assert only == pytest.approx(scorer.score(["Q:" + t for t in VALID + INVALID]).logits.tolist())
    with pytest.raises(ValueError, match="below the probability range"):
        SoftGateReward(domain, scorer, group_size=4, floor=0.0)


@pytest.mark.parametrize("bad", [BrokenScorer(), NanScorer()])
def test_probe_failure_raises_never_zero(domain, bad) -> None:
    reward = HardGateReward(domain, bad, floor=-10.0, group_size=2)
    with pytest.raises((RuntimeError, RewardError)):
        reward(["Q:"] * 2, ["1+2", "3*4"])
    assert reward.logs == []
    with pytest.raises(RewardError):
        HardGateReward.calibrated(domain, NanScorer(), ["Q:1+2"], group_size=2)


def test_rewards_pickle_and_score_the_same(domain, scorer) -> None:
    reward = HardGateReward.calibrated(domain, scorer, arith_texts(16, 5), group_size=4)
    clone = pickle.loads(pickle.dumps(reward))
    assert clone(["Q:"] * 4, VALID) == pytest.approx(reward(["Q:"] * 4, VALID))
    sil = pickle.loads(pickle.dumps(SolverInTheLoopReward(domain, SyntheticArithSolver(), Band(), group_size=4)))
    assert len(sil(["Q:"] * 4, VALID)) == 4


def test_sil_counts_trials_and_matches_labels(domain) -> None:
    solver = SyntheticArithSolver(offset=5.0)
    sil = SolverInTheLoopReward(domain, solver, Band(k=8, lo=1, hi=3), group_size=4)
    out = sil(["Q:"] * 8, VALID + INVALID)
    assert sil.solver_trials == 4 * 8 and sil.logs[-1].solver_trials == 32
    assert set(out[:4]) <= {0.0, 1.0} and out[4:] == [-1.0] * 4


def test_helpers() -> None:
    assert zero_spread_share([1, 1, 2, 3], 2) == 0.5
    assert np.isnan(zero_spread_share([1, 2, 3], 2))
    assert floor_below([-3.0, 2.0], 0.5) == -3.5
    with pytest.raises(RewardError):
        floor_below([], 1.0)


class CountingScorer(FixedScorer):
    def __init__(self) -> None:
        super().__init__({"Q:1+2": 2.0, "Q:12*3-4": -1.0}, default=0.5)
        self.texts: list[str] = []

    def score(self, texts):
        self.texts += list(texts)
        return super().score(texts)


@pytest.mark.parametrize("kind", ["hard_gate", "soft_gate", "probe_only"])
def test_from_valid_scores_equals_the_full_reward_without_a_second_pass(domain, kind: str) -> None:
    """The daemon's sample phase validates and scores once; the reward reuses those scores."""
    def make(scorer):
        if kind == "hard_gate":
            return HardGateReward(domain, scorer, floor=-10.0, group_size=4)
        return SoftGateReward(domain, scorer, group_size=4) if kind == "soft_gate" else ProbeOnlyReward(
            domain, scorer, group_size=4)

    completions = VALID + INVALID
    full = make(FixedScorer({"Q:1+2": 2.0, "Q:12*3-4": -1.0}, default=0.5))(["Q:"] * 8, completions)
    checks = domain.validate_batch(completions)
    valid_texts = [domain.reference_text(c.task) for c in checks if c.valid]
    first = FixedScorer({"Q:1+2": 2.0, "Q:12*3-4": -1.0}, default=0.5).score(valid_texts)  # the sample's pass
    counting = CountingScorer()
    reused = make(counting).from_valid_scores(checks, first.logits.tolist(), first.probabilities.tolist())
    assert reused == pytest.approx(full)
    invalid_texts = [domain.reference_text(c.task) for c in checks if not c.valid]
    assert counting.texts == (invalid_texts if kind == "probe_only" else []), "valid tasks are not scored again"


@pytest.mark.parametrize("kind", ["hard_gate", "soft_gate", "probe_only"])
def test_diversity_term_lowers_repeated_valid_tasks_and_logs_the_penalty(domain, kind: str) -> None:
    """Duplicates lose ``weight × penalty``; invalid completions keep the floor; the mean is logged."""
    scorer = FixedScorer(default=0.5)
    term = DiversityTerm("arith", weight=0.4)
    reward = build_reward(kind, domain, scorer, ["Q:1+2"], group_size=4, diversity=term)
    plain = build_reward(kind, domain, scorer, ["Q:1+2"], group_size=4)
    completions = ["1+2", "1 + 2", "12*3-4", "oops", *VALID]  # group 1 repeats a task (spacing aside)
    metrics: dict[str, float] = {}
    out = reward(["Q:"] * 8, completions, log_metric=metrics.__setitem__)
    base = plain(["Q:"] * 8, completions)
    penalties = term.penalties([c if c != "oops" else None for c in completions], 4)
    assert penalties[0] == penalties[1] == pytest.approx(0.5) and penalties[3] == 0.0
    assert out == pytest.approx([b - 0.4 * p for b, p in zip(base, penalties, strict=True)])
    assert out[0] < out[2] and out[3] == base[3]  # the repeated task earns less; the invalid one is untouched
    valid_mean = float(np.mean([p for i, p in enumerate(penalties) if i != 3]))
    assert reward.logs[-1].diversity_penalty == pytest.approx(valid_mean)
    assert metrics["propel/diversity_penalty"] == pytest.approx(valid_mean)
    assert plain.logs[-1].diversity_penalty is None and "diversity_penalty" not in plain.logs[-1].to_dict()


@pytest.mark.parametrize("kind", ["hard_gate", "soft_gate"])
def test_gated_valid_rewards_stay_above_the_floor_with_the_term_on(domain, kind: str) -> None:
    """Even a weight far above the reward's range never takes a valid task down to an invalid one."""
    term = DiversityTerm("arith", weight=50.0)
    term.observe(VALID, ["t"] * len(VALID))  # every valid completion repeats the archive: penalty 1
    scorer = FixedScorer({"Q:1+2": -9.5}, default=-7.0)
    reward = build_reward(kind, domain, scorer, ["Q:1+2", "Q:9-8"], group_size=4, diversity=term)
    out = reward(["Q:"] * 8, VALID + INVALID)
    assert isinstance(reward, HardGateReward | SoftGateReward)
    assert out[4:] == [reward.floor] * 4
    assert all(r == reward.valid_minimum > reward.floor for r in out[:4])
    assert reward.logs[-1].diversity_penalty == 1.0 and reward.logs[-1].clipped_share == 0.5


def test_a_reward_hands_over_the_rollouts_it_validated_once_and_bounded(domain, monkeypatch) -> None:
    """What TRL scored is what the daemon's sample phase offers for emission (daemon.emit_rollouts)."""
    import curriculum.reward.rewards as rewards

    reward = HardGateReward(domain, FixedScorer(), floor=-10.0, group_size=4)
    reward(["Q:"] * 8, VALID + INVALID)
    reward(["Q:"] * 4, VALID)
    assert reward.take_rollouts() == VALID + INVALID + VALID  # every generation, valid or not, oldest first
    assert reward.take_rollouts() == []
    monkeypatch.setattr(rewards, "ROLLOUT_KEEP", 3)
    small = HardGateReward(domain, FixedScorer(), floor=-10.0, group_size=4)
    small(["Q:"] * 4, VALID)
    assert small.take_rollouts() == VALID[-3:], "a reward nobody drains keeps only the newest"

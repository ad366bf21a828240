"""Evaluation numbers on hand-built samples; co-evolution data mining and the aux probe."""

from __future__ import annotations

import numpy as np
import pytest

from curriculum.common.solver_api import Completion, Sampling
from curriculum.domains.arith import analyse
from curriculum.labelling.spotcheck import LabelValue
from curriculum.probing.coevolution import LabelledSample, build_aux_dataset, dominant_topic, train_aux_probe
from curriculum.probing.evaluation import TaskOutcome, evaluate_texts, summarise
from probes import FeatureExtractor, ProbeScorer
from probes.band import Band
from tests.unit.rl.conftest import SPEC, arith_texts


class ScriptedSolver:
    """Solves task i exactly ``solves[text]`` times out of n (correct answers first)."""

    solver_id = "scripted:test"

    def __init__(self, solves: dict[str, int]) -> None:
        self.solves = solves
        self.calls = 0

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        self.calls += len(prompts) * n
        out = []
        for prompt in prompts:
            expr = prompt.split("Compute: ", 1)[1].split("\n", 1)[0]
            value = analyse(expr).value
            good = self.solves[expr]
            out.append([Completion(str(value if i < good else value + 1)) for i in range(n)])
        return out


def test_utility_counts_all_generations(domain) -> None:
    solves = {"1+2": 8, "2*3": 2, "(4+5)*6": 1, "7-1": 0, "9*9": 3}
    texts = [*solves, "oops", "1+", "+"]  # 5 valid, 3 invalid
    solver = ScriptedSolver(solves)
    res = evaluate_texts(texts, domain, solver, Band(k=8, lo=1, hi=3))
    assert res.n == 8 and res.n_valid == 5 and res.n_in_band == 3
    assert res.utility == pytest.approx(3 / 8)  # not 3/5: invalid generations count in the denominator
    assert res.validity == pytest.approx(5 / 8)
    assert res.solver_trials == 5 * 8 == solver.calls
    hist = res.solve_histogram
    assert (hist["8"], hist["2"], hist["1"], hist["0"], hist["3"], hist["invalid"]) == (1, 1, 1, 1, 1, 3)
    assert sum(hist.values()) == 8
    assert res.top_topic_share == pytest.approx(2 / 5)  # mul:1 twice among 5 valid tasks
    data = res.to_dict()
    assert data["band"] == {"k": 8, "lo": 1, "hi": 3} and "outcomes" not in data
    assert 0 <= data["self_bleu3"] <= 1 and 0 < data["distinct3"] <= 1


def test_summarise_unlabelled_and_diversity() -> None:
    band = Band(k=4, lo=1, hi=2, min_valid_trials=3)
    outcomes = [
        TaskOutcome("1+1", True, "add:1", LabelValue(1, 4, True)),
        TaskOutcome("2+2", True, "add:1", LabelValue(0, 2, None)),  # too few valid trials
        TaskOutcome("x", False, None, None),
        TaskOutcome("3*3", True, "mul:1", LabelValue(4, 4, False)),
    ]
    res = summarise(outcomes, band, solver_trials=12)
    assert res.utility == 0.25 and res.solve_histogram["unlabelled"] == 1 and res.solve_histogram["4"] == 1
    assert res.top_topic == "add:1" and res.top_topic_share == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        summarise([], band, 0)


def _samples() -> list[LabelledSample]:
    band_in, too_hard, too_easy = LabelValue(2, 8, True), LabelValue(0, 8, False), LabelValue(8, 8, False)
    rows = [
        (1, "Q:1+2*3", True, 0.9, band_in, "mul:1"),
        (2, "Q:9*9*9*9", True, 0.95, too_hard, "mul:3"),   # false positive (too hard)
        (3, "Q:1+1", True, 0.8, too_easy, "add:1"),        # false positive (too easy)
        (4, "Q:2*2*2*2", True, 0.3, None, "mul:3"),        # collapsed family, unlabelled
        (5, "Q:5*5*5*5", True, 0.2, too_hard, "mul:3"),    # low probability: not a false positive
        (6, "Q:3*4*5*6", True, 0.9, band_in, "mul:3"),     # in band: stays positive
        (7, "Q:((", False, 0.99, None, None),
    ]
    return [LabelledSample(*r) for r in rows]


def test_aux_dataset_mines_false_positives_and_collapse_family() -> None:
    samples = _samples()
    topic, share = dominant_topic(samples)
    assert topic == "mul:3" and share == pytest.approx(4 / 6)
    data = build_aux_dataset(samples, Band(), threshold=0.5, collapse_topic=topic, extra_positives=["Q:7-2*3"])
    assert data.false_positive_ids == [2, 3]
    assert data.collapse_negative_ids == [4, 5]
    pos = [t for t, y in zip(data.texts, data.labels, strict=True) if y == 1]
    neg = [t for t, y in zip(data.texts, data.labels, strict=True) if y == 0]
    assert pos == ["Q:1+2*3", "Q:3*4*5*6", "Q:7-2*3"]
    assert neg == ["Q:9*9*9*9", "Q:1+1", "Q:2*2*2*2", "Q:5*5*5*5"]
    plain = build_aux_dataset(samples, Band(), threshold=0.5)
    assert plain.collapse_negative_ids == [] and int((plain.labels == 0).sum()) == 2
    with pytest.raises(ValueError, match="both classes"):
        build_aux_dataset(samples[:1], Band(), threshold=0.5)


def test_train_aux_probe_returns_a_constraint_for_the_reference(reference, probe) -> None:
    samples = _samples()
    extra = arith_texts(24, 1)
    result = train_aux_probe(samples, FeatureExtractor(reference), SPEC, Band(), threshold=0.5,
                             collapse_topic="mul:3", extra_positives=extra[:12], extra_negatives=extra[12:])
    aux = result.probe
    assert aux.reference_fingerprint == reference.fingerprint and aux.spec == SPEC
    assert aux.training["false_positives"] == 2 and result.metrics["train_rows"] > 0
    from probes import ProbeEnsemble

    scorer = ProbeScorer(reference, ProbeEnsemble([probe], constraints=[aux]))
    scores = scorer.score(["Q:1+2", "Q:9*9*9*9"])
    assert np.all(scores.logits <= scores.member_logits.min(axis=0) + 1e-12)

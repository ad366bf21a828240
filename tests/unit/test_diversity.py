"""Diversity metrics equal nltk's reference computations and keep their pinned definitions."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
from nltk.util import ngrams

from curriculum.reward.diversity import (
    collapse_metrics,
    distinct_n,
    fixed_sample,
    self_bleu,
    self_bleu_scores,
    tokenize,
    top_topic_share,
    topic_shares,
)


def _arith(rng: random.Random, depth: int = 0) -> str:
    if depth > 2 or rng.random() < 0.3:
        return str(rng.randint(0, 20))
    expr = f"{_arith(rng, depth + 1)}{rng.choice('+-*')}{_arith(rng, depth + 1)}"
    return f"({expr})" if rng.random() < 0.4 else expr


def _sample() -> list[str]:
    rng = random.Random(1234)
    arith = [_arith(rng) for _ in range(120)]
    prose = ["def f(x): return x + 1", "def f(y): return y * 2", "Compute the sum of 3 and 4.",
             "Compute the sum of 3 and 5.", "What is 12*(3+4)?", "1+2", "1+2", "1+2", "", "7"]
    return arith + prose


def _nltk_self_bleu(texts: list[str], n: int = 3) -> list[float]:
    toks = [tokenize(t) for t in texts]
    smooth = SmoothingFunction().method1
    return [float(sentence_bleu([r for j, r in enumerate(toks) if j != i], h, weights=(1 / n,) * n,
                                smoothing_function=smooth)) for i, h in enumerate(toks)]


def _nltk_distinct(texts: list[str], n: int = 3) -> float:
    grams = [g for t in texts for g in ngrams(tokenize(t), n)]
    return len(set(grams)) / len(grams)


def test_tokenisation_is_pinned() -> None:
    assert tokenize("12*(3+4)") == ["12", "*", "(", "3", "+", "4", ")"]
    assert tokenize("12 * (3 + 4)") == tokenize("12*(3+4)")
    assert tokenize("x_1 = 3.5; print(x_1)") == ["x_1", "=", "3.5", ";", "print", "(", "x_1", ")"]
    assert tokenize("  \n\t") == []


def test_self_bleu3_equals_nltk_leave_one_out() -> None:
    texts = _sample()
    reference = _nltk_self_bleu(texts)
    ours = self_bleu_scores(texts).tolist()
    assert max(abs(a - b) for a, b in zip(ours, reference, strict=True)) < 1e-6
    assert self_bleu(texts) == pytest.approx(sum(reference) / len(reference), abs=1e-6)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_self_bleu_other_orders_equal_nltk(n: int) -> None:
    texts = _sample()[:60]
    reference = _nltk_self_bleu(texts, n)
    assert self_bleu(texts, n) == pytest.approx(sum(reference) / len(reference), abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["1", "2", "+", "*", "(", ")"]), max_size=9), min_size=2, max_size=12))
def test_self_bleu_matches_nltk_on_random_small_vocabularies(token_lists: list[list[str]]) -> None:
    texts = [" ".join(t) for t in token_lists]
    reference = _nltk_self_bleu(texts)
    assert self_bleu(texts) == pytest.approx(sum(reference) / len(reference), abs=1e-6)


def test_distinct3_equals_reference() -> None:
    texts = _sample()
    assert distinct_n(texts, 3) == pytest.approx(_nltk_distinct(texts, 3), abs=1e-12)
    assert distinct_n(["1+2", "1+2"], 3) == pytest.approx(0.5)
    assert distinct_n(["1+2", "3*4"], 3) == pytest.approx(1.0)


def test_collapse_moves_the_metrics_the_right_way() -> None:
    rng = random.Random(7)
    diverse = [_arith(rng) for _ in range(200)]
    collapsed = [f"{rng.randint(0, 9)}+{rng.randint(0, 9)}" for _ in range(200)]
    assert self_bleu(collapsed) > self_bleu(diverse)
    assert distinct_n(collapsed) < distinct_n(diverse)


def test_self_bleu_of_2000_texts() -> None:  # its speed is measured by benchmarks/self_bleu.py
    rng = random.Random(3)
    texts = [_arith(rng) for _ in range(2000)]
    assert 0.0 < self_bleu(texts) < 1.0


def test_undefined_metrics_raise() -> None:
    with pytest.raises(ValueError, match="at least 2 texts"):
        self_bleu(["1+2"])
    with pytest.raises(ValueError, match="no text in the sample has 3 tokens"):
        distinct_n(["1", "2"])
    with pytest.raises(ValueError, match="no task has a topic"):
        top_topic_share([None, None])


def test_top_topic_share_ignores_missing_topics() -> None:
    topics = ["add"] * 6 + ["mul"] * 2 + ["sub"] * 2 + [None] * 5
    assert top_topic_share(topics) == pytest.approx(0.6)
    assert topic_shares(["b", "a"]) == [("a", 0.5), ("b", 0.5)]


def test_fixed_sample_is_deterministic_and_sized() -> None:
    items = list(range(1000))
    a = fixed_sample(items, 50, seed=9)
    assert a == fixed_sample(items, 50, seed=9)
    assert a != fixed_sample(items, 50, seed=10)
    assert len(a) == 50 and a == sorted(a) and len(set(a)) == 50
    assert fixed_sample(items[:10], 50, seed=9) == items[:10]
    with pytest.raises(ValueError):
        fixed_sample(items, 0, seed=1)


def test_collapse_metrics_leaves_out_text_metrics_of_short_samples() -> None:
    rng = random.Random(5)
    texts = [_arith(rng) for _ in range(300)]
    full = collapse_metrics(texts, ["add"] * 3 + ["mul"], sample_size=64, seed=1)
    assert full.sample_size == 64 and full.dominant_topic == "add"
    assert set(full.as_metrics()) == {"self_bleu3", "distinct3", "top_topic_share"}
    assert full.as_metrics()["self_bleu3"] == pytest.approx(self_bleu(fixed_sample(texts, 64, 1)))
    short = collapse_metrics(texts[:10], [None], sample_size=64, seed=1)
    assert short.as_metrics() == {} and short.self_bleu3 is not None

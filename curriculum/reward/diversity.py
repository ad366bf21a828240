"""Diversity (mode-collapse) metrics of generated tasks: Self-BLEU-n, Distinct-n, top-topic share.

PROPEL §6 reports the generator collapsing onto one topic (73% of tasks); these metrics are what the
daemon watches each cycle to catch that early.

Definitions (pinned — changing any of them changes the metric and invalidates alert thresholds):

* **Tokenisation** (:func:`tokenize`): a task text is split into *numbers* (``12``, ``3.5``),
  *words/identifiers* (``[A-Za-z_][A-Za-z_0-9]*``) and *single non-space symbols* (operators,
  brackets, punctuation: ``* ( + )``); whitespace only separates and never forms a token. Plain
  whitespace splitting would turn the arith task ``12*(3+4)`` into a single token, and character
  splitting would cut ``12`` into ``1 2``; this tokenizer gives ``12 * ( 3 + 4 )`` for both
  ``12*(3+4)`` and ``12 * (3 + 4)``, and ordinary words for prose and code.
* **Self-BLEU-n** (:func:`self_bleu`): every text of the sample is a hypothesis scored against all
  *other* texts of the sample as references (leave-one-out), with sentence BLEU up to n-grams,
  uniform weights ``1/n``, clipped counts against the maximum count over the references, the
  brevity penalty with the closest reference length (ties → the shorter), and nltk's
  ``SmoothingFunction().method1`` (a zero n-gram match count becomes ``0.1``; a text with no unigram
  match scores 0). The result is the mean over texts. Equal to averaging nltk's ``sentence_bleu``
  per text (tested to 1e-6). Higher = less diverse.
* **Distinct-n** (:func:`distinct_n`): distinct n-grams over total n-grams of the whole sample
  (corpus level; a text shorter than n contributes none). Lower = less diverse.
* **Top-topic share** (:func:`top_topic_share`): the share of the most common topic among the given
  topics (the daemon passes the topics of the cycle's valid tasks; ``None`` topics are ignored).

Both text metrics depend on the sample size (Self-BLEU grows with it, Distinct-n shrinks), so the
size is part of their definition: compute them on :func:`fixed_sample` of a configured size
(``alerts.sample_size``) and compare values only across equal sizes. :func:`collapse_metrics` does
all of this for one cycle.

Self-BLEU is computed with integer n-gram ids and numpy: for each n-gram the largest and the
second-largest per-text count over the sample are kept, so the maximum count over "all texts but
this one" is the second-largest when this text holds the largest, the largest otherwise — one pass
instead of the O(N²) loop of calling ``sentence_bleu`` per text.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

T = TypeVar("T")

_TOKEN = re.compile(r"\d+(?:\.\d+)?|[A-Za-z_][A-Za-z_0-9]*|[^\sA-Za-z_0-9]")
SMOOTHING_EPSILON = 0.1  # nltk SmoothingFunction().method1 default


def tokenize(text: str) -> list[str]:
    """The pinned tokenisation of all diversity metrics (see the module docstring)."""
    return _TOKEN.findall(text)


def fixed_sample(texts: Sequence[T], size: int, seed: int) -> list[T]:
    """A deterministic sample of ``size`` items without replacement (all items when fewer).

    The same ``(len(texts), size, seed)`` always picks the same positions; the order of the input
    is kept.
    """
    if size < 1:
        raise ValueError(f"sample size must be ≥ 1, got {size}")
    if len(texts) <= size:
        return list(texts)
    picked = sorted(random.Random(seed).sample(range(len(texts)), size))
    return [texts[i] for i in picked]


def _token_ids(token_lists: Sequence[Sequence[str]]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Concatenated integer token ids and the start offset of each text (length ``N + 1``)."""
    vocab: dict[str, int] = {}
    flat = [vocab.setdefault(tok, len(vocab)) for toks in token_lists for tok in toks]
    offsets = np.zeros(len(token_lists) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in token_lists], out=offsets[1:])
    return np.asarray(flat, dtype=np.int64), offsets


def _ngram_counts(ids: NDArray[np.int64], offsets: NDArray[np.int64], n: int
                  ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Per-text n-gram counts as parallel arrays ``(text_index, ngram_id, count)``."""
    lengths = np.diff(offsets)
    per_text = np.maximum(lengths - n + 1, 0)
    total = int(per_text.sum())
    if total == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    text_idx = np.repeat(np.arange(len(lengths), dtype=np.int64), per_text)
    # start position of every window: offset of its text + rank of the window inside the text
    rank = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(per_text) - per_text, per_text)
    starts = offsets[:-1][text_idx] + rank
    windows = ids[starts[:, None] + np.arange(n, dtype=np.int64)[None, :]]
    _, gram = np.unique(windows, axis=0, return_inverse=True)
    gram = gram.reshape(-1).astype(np.int64)
    n_grams = int(gram.max()) + 1
    pair, counts = np.unique(text_idx * n_grams + gram, return_counts=True)
    return pair // n_grams, pair % n_grams, counts.astype(np.int64)


def _clipped_matches(text: NDArray[np.int64], gram: NDArray[np.int64], count: NDArray[np.int64],
                     n_texts: int) -> NDArray[np.int64]:
    """Per text: Σ over its n-grams of min(count, max count of that n-gram in any *other* text)."""
    if len(gram) == 0:
        return np.zeros(n_texts, dtype=np.int64)
    n_grams = int(gram.max()) + 1
    order = np.lexsort((-count, gram))  # by n-gram, then count descending
    g_sorted, c_sorted = gram[order], count[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = g_sorted[1:] != g_sorted[:-1]
    top1 = np.zeros(n_grams, dtype=np.int64)
    top1[g_sorted[first]] = c_sorted[first]
    second = np.zeros(len(order), dtype=bool)
    second[1:] = first[:-1] & ~first[1:]
    top2 = np.zeros(n_grams, dtype=np.int64)
    top2[g_sorted[second]] = c_sorted[second]
    best_other = np.where(count == top1[gram], top2[gram], top1[gram])
    clipped = np.minimum(count, best_other)
    return np.bincount(text, weights=clipped, minlength=n_texts).astype(np.int64)


def _closest_other_lengths(lengths: NDArray[np.int64]) -> NDArray[np.int64]:
    """For each text, the reference length nltk's BLEU uses: closest among the others, ties → shorter."""
    values, counts = np.unique(lengths, return_counts=True)
    out = np.empty_like(lengths)
    for i, length in enumerate(lengths.tolist()):
        pos = int(np.searchsorted(values, length))
        if counts[pos] > 1:
            out[i] = length
            continue
        below = int(values[pos - 1]) if pos > 0 else None
        above = int(values[pos + 1]) if pos + 1 < len(values) else None
        if below is None:
            out[i] = above if above is not None else length
        elif above is None or length - below <= above - length:
            out[i] = below
        else:
            out[i] = above
    return out


def self_bleu_scores(texts: Sequence[str], n: int = 3) -> NDArray[np.float64]:
    """Leave-one-out BLEU-n of every text against all the others (see the module docstring)."""
    if n < 1:
        raise ValueError(f"n must be ≥ 1, got {n}")
    if len(texts) < 2:
        raise ValueError(f"Self-BLEU needs at least 2 texts (each is scored against the others), got {len(texts)}")
    token_lists = [tokenize(t) for t in texts]
    ids, offsets = _token_ids(token_lists)
    lengths = np.diff(offsets)
    n_texts = len(texts)
    log_sum = np.zeros(n_texts, dtype=np.float64)
    no_unigram_match = np.zeros(n_texts, dtype=bool)
    for order in range(1, n + 1):
        matches = _clipped_matches(*_ngram_counts(ids, offsets, order), n_texts=n_texts)
        denominators = np.maximum(lengths - order + 1, 1).astype(np.float64)
        if order == 1:
            no_unigram_match = matches == 0
        numerators = np.where(matches == 0, SMOOTHING_EPSILON, matches.astype(np.float64))
        log_sum += np.log(numerators / denominators) / n
    ref_lengths = _closest_other_lengths(lengths)
    safe_len = np.maximum(lengths, 1).astype(np.float64)
    brevity = np.where(lengths > ref_lengths, 1.0, np.exp(1.0 - ref_lengths / safe_len))
    scores = brevity * np.exp(log_sum)
    return np.where(no_unigram_match | (lengths == 0), 0.0, scores)


def self_bleu(texts: Sequence[str], n: int = 3) -> float:
    """Mean leave-one-out BLEU-n of the sample (Self-BLEU-n); needs ≥ 2 texts. Higher = less diverse."""
    return float(np.mean(self_bleu_scores(texts, n)))


def distinct_n(texts: Sequence[str], n: int = 3) -> float:
    """Distinct n-grams / total n-grams over the whole sample; raises if the sample has no n-gram."""
    if n < 1:
        raise ValueError(f"n must be ≥ 1, got {n}")
    seen: set[tuple[str, ...]] = set()
    total = 0
    for text in texts:
        toks = tokenize(text)
        grams = [tuple(toks[i:i + n]) for i in range(len(toks) - n + 1)]
        total += len(grams)
        seen.update(grams)
    if total == 0:
        raise ValueError(f"Distinct-{n} is undefined: no text in the sample has {n} tokens")
    return len(seen) / total


def topic_shares(topics: Sequence[str | None]) -> list[tuple[str, float]]:
    """Share of each topic (``None`` ignored), most common first; ties in name order."""
    counts = Counter(t for t in topics if t is not None)
    total = sum(counts.values())
    if total == 0:
        raise ValueError("top-topic share is undefined: no task has a topic")
    return sorted(((t, c / total) for t, c in counts.items()), key=lambda tc: (-tc[1], tc[0]))


def top_topic_share(topics: Sequence[str | None]) -> float:
    """Share of the most common topic among ``topics`` (``None`` ignored)."""
    return topic_shares(topics)[0][1]


@dataclass(frozen=True)
class CollapseMetrics:
    """One cycle's diversity metrics; a field is ``None`` where the metric is undefined."""

    self_bleu3: float | None
    distinct3: float | None
    top_topic_share: float | None
    dominant_topic: str | None
    sample_size: int
    requested_size: int

    @property
    def full_sample(self) -> bool:
        return self.sample_size >= self.requested_size

    def as_metrics(self) -> dict[str, float]:
        """Metric-table values (``self_bleu3``, ``distinct3``, ``top_topic_share``).

        The text metrics are left out when the sample is smaller than the requested size: they are
        not comparable with full-size values and would trip the alert thresholds spuriously.
        """
        out: dict[str, float] = {}
        if self.full_sample and self.self_bleu3 is not None:
            out["self_bleu3"] = self.self_bleu3
        if self.full_sample and self.distinct3 is not None:
            out["distinct3"] = self.distinct3
        if self.top_topic_share is not None:
            out["top_topic_share"] = self.top_topic_share
        return out


def collapse_metrics(texts: Sequence[str], topics: Sequence[str | None], sample_size: int,
                     seed: int) -> CollapseMetrics:
    """Self-BLEU-3 and Distinct-3 on :func:`fixed_sample` of ``texts``; top-topic share of all ``topics``."""
    sample = fixed_sample(texts, sample_size, seed) if texts else []
    sb = self_bleu(sample, 3) if len(sample) >= 2 else None
    try:
        d3: float | None = distinct_n(sample, 3)
    except ValueError:
        d3 = None
    shares = topic_shares(topics) if any(t is not None for t in topics) else []
    return CollapseMetrics(self_bleu3=sb, distinct3=d3,
                           top_topic_share=shares[0][1] if shares else None,
                           dominant_topic=shares[0][0] if shares else None,
                           sample_size=len(sample), requested_size=sample_size)


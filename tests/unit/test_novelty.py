"""The reward's diversity term: canonical forms, penalty bounds and ranking, the topic-quota archive."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from curriculum.domains.arith import random_expression
from curriculum.reward.diversity import distinct_n, tokenize
from curriculum.reward.novelty import DiversityTerm, canonical_form, hashed_ngrams

AZR = """```python
def f(words, k):
    # keep the long ones
    out = [w for w in words if len(w) > k]
    return sorted(out, key=len)
```
```input
["apple", "kiwi"], 2
```
```message
Sort the long words by length.
```"""

# the same task: other names, other spacing and quoting, a comment gone, prose outside the fences
AZR_RENAMED = """Here is my puzzle!
```python
def solve(items,   limit):
    kept = [item for item in items if len(item)>limit]
    return sorted(kept, key = len)
```
```input
["apple",  "kiwi"],  2
```
```message
Sort the long   words by length.
```
thanks"""

AZR_OTHER = """```python
def f(n):
    total = 0
    while n:
        total += n % 10
        n //= 10
    return total
```
```input
1234
```
```message
Digit sum.
```"""


def _noise(text: str, rng: random.Random) -> str:
    """``text``'s tokens separated by random whitespace."""
    return "".join(tok + rng.choice([" ", "  ", "\t", "\n ", " \t "]) for tok in tokenize(text))


def test_canonical_form_ignores_whitespace_in_every_domain() -> None:
    rng = random.Random(0)
    cases = {"arith": "Q:(3+4)*12-5", "math": r"Find $x$ if $\dfrac{x}{2} = 3$.", "swe": "fix the bug in foo()"}
    for domain, text in cases.items():
        assert canonical_form(domain, _noise(text, rng)) == canonical_form(domain, text), domain
    assert canonical_form("arith", "Q: ( 3 + 4 ) * 12") == canonical_form("arith", "(3+4)*12") == "( 3 + 4 ) * 12"
    assert canonical_form("math", r"$\left(\tfrac{1}{2}\right)\,x$") == canonical_form("math", r"(\frac{1}{2}) X")


def test_azr_canonical_form_renames_identifiers_and_drops_layout() -> None:
    assert canonical_form("azr", AZR_RENAMED) == canonical_form("azr", AZR)
    assert canonical_form("azr", AZR) != canonical_form("azr", AZR_OTHER)
    form = canonical_form("azr", AZR)
    assert "v0 ( v1 , v2 )" in form and "sorted" in form and "len" in form and "key = len" in form
    assert form.count("words") == 1 and "#" not in form  # the parameter was renamed, the message kept
    # a builtin keeps its name: renaming `sorted` would be a different program
    assert canonical_form("azr", AZR.replace("sorted(", "reversed(")) != form


def test_azr_falls_back_to_whitespace_form_when_code_does_not_parse() -> None:
    broken = AZR.replace("return sorted", "return sorted(")
    assert canonical_form("azr", broken) == canonical_form("azr", broken.replace("    ", "\t "))
    assert canonical_form("azr", "no fences at all") == "no fences at all"


def test_penalty_ignores_surface_noise() -> None:
    rng = random.Random(1)
    base = [random_expression(rng, 4) for _ in range(8)]
    term = DiversityTerm("arith", weight=1.0)
    term.observe(base, ["t"] * len(base))
    noisy = [_noise(t, rng) for t in base]
    assert term.penalties(noisy, group_size=1) == [1.0] * len(base)  # archived tasks, whatever the spacing
    azr = DiversityTerm("azr", weight=1.0)
    azr.observe([AZR], ["sort"])
    assert azr.penalties([AZR_RENAMED, AZR_OTHER], group_size=1) == [1.0, pytest.approx(0.0, abs=0.1)]


def test_penalties_are_deterministic_bounded_and_rank_duplicates_below_variety() -> None:
    rng = random.Random(2)
    varied = [random_expression(rng, rng.randint(3, 6)) for _ in range(8)]
    duplicates = [varied[0]] * 8
    archive = [random_expression(rng, 4) for _ in range(50)]

    def run() -> list[float]:
        term = DiversityTerm("arith", weight=0.5, archive_size=64)
        term.observe(archive, [str(i % 5) for i in range(len(archive))])
        return term.penalties([*duplicates, *varied, None, "7"], group_size=8)

    first = run()
    assert first == run()  # a fresh term on the same inputs: bit-identical
    assert all(0.0 <= p <= 1.0 for p in first)
    dup, var = np.mean(first[:8]), np.mean(first[8:16])
    assert dup == 1.0 and var < 0.5, (dup, var)
    assert first[16] == 0.0  # an invalid completion (None) has no penalty


def test_group_term_is_the_share_of_the_group_that_repeats_a_task() -> None:
    term = DiversityTerm("arith", weight=1.0)
    group = ["1+2*3", "1+2*3", "(4-5)*6+7", "8*9-10/2"]
    p = term.penalties(group, group_size=4)
    assert p[0] == p[1] == pytest.approx(1 / 3)  # one of three mates is an exact copy
    assert p[2] < p[0] and p[3] < p[0]
    assert term.penalties(group, group_size=1) == [0.0] * 4  # no mates, empty archive


def test_hashed_ngrams_are_the_distinct_n_grams() -> None:
    rng = random.Random(3)
    texts = [random_expression(rng, 5) for _ in range(20)]
    grams = np.unique(np.concatenate([hashed_ngrams(tokenize(t), 3) for t in texts]))
    total = sum(max(0, len(tokenize(t)) - 2) for t in texts)
    assert len(grams) == round(distinct_n(texts, 3) * total)  # same windows as Distinct-3, no collision
    assert len(hashed_ngrams(["1"], 3)) == 1 and hashed_ngrams(["1"], 3)[0] != hashed_ngrams(["2"], 3)[0]


def test_topic_quota_holds_and_old_tasks_are_evicted_first() -> None:
    term = DiversityTerm("arith", weight=1.0, archive_size=10, topic_quota=0.3)
    rng = random.Random(4)
    flood = [random_expression(rng, 5) for _ in range(40)]
    term.observe(flood, ["+"] * len(flood))
    assert term.topic_counts() == {"+": 3}  # the quota, not the whole archive
    assert term.penalties(flood[-3:], group_size=1) == [1.0, 1.0, 1.0]  # the newest are kept
    assert max(term.penalties(flood[:3], group_size=1)) < 1.0  # the oldest were evicted
    others = [f"{i}*{i + 1}-{i + 2}" for i in range(20)]
    term.observe(others, [f"t{i % 4}" for i in range(20)])
    counts = term.topic_counts()
    assert len(term) == sum(counts.values()) <= 10 and max(counts.values()) <= 3
    assert term.observe([others[-1]], ["t3"]) == 0  # already archived: not added twice


def test_term_is_picklable_and_rejects_bad_settings() -> None:
    term = DiversityTerm("arith", weight=0.2)
    term.observe(["1+2"], ["+"])
    clone = pickle.loads(pickle.dumps(term))
    assert clone.penalties(["1+2"], 1) == term.penalties(["1+2"], 1) == [1.0]
    for kwargs in ({"weight": -1.0}, {"weight": 1.0, "archive_size": 0}, {"weight": 1.0, "topic_quota": 0.0}):
        with pytest.raises(ValueError):
            DiversityTerm("arith", **kwargs)  # type: ignore[arg-type]


# ---- measure "self_bleu" ----------------------------------------------------------------------------


def test_self_bleu_measure_is_deterministic_bounded_and_ranks_duplicates_below_variety() -> None:
    rng = random.Random(5)
    varied = [random_expression(rng, rng.randint(3, 6)) for _ in range(8)]
    archive = [random_expression(rng, 4) for _ in range(50)]

    def run() -> list[float]:
        term = DiversityTerm("arith", weight=1.0, measure="self_bleu", archive_size=64, rollout_window=0)
        term.observe(archive, [str(i % 5) for i in range(len(archive))])
        return term.penalties([*[varied[0]] * 8, *varied, None], group_size=8)

    first = run()
    assert first == run()
    assert all(0.0 <= p <= 1.0 for p in first) and first[16] == 0.0
    assert np.mean(first[:8]) == 1.0 and np.mean(first[8:16]) < 0.6, first  # the batch holds the copies


def test_self_bleu_measure_sees_shared_patterns_that_jaccard_misses() -> None:
    """Tasks that are not near-copies but reuse the same few numbers in the same operator pattern (what a
    narrowing policy emits): their 3-gram Jaccard is ≈ 0 (≤ 0.1), the per-text Self-BLEU is not, and it ranks
    the patterned batch far above a varied one."""
    patterned = [f"{a}*{b}-{c}" for a, b, c in ((1, 2, 3), (2, 3, 1), (3, 1, 2), (1, 3, 2), (2, 1, 3), (3, 2, 1),
                                                (4, 1, 2), (1, 4, 3))]
    rng = random.Random(6)
    varied = [random_expression(rng, 3) for _ in range(8)]
    assert max(DiversityTerm("arith", weight=1.0).penalties(patterned, group_size=8)) <= 0.1
    bleu = [DiversityTerm("arith", weight=1.0, measure="self_bleu", rollout_window=0) for _ in range(2)]
    assert np.mean(bleu[0].penalties(patterned, 8)) > 0.6 > 0.2 > np.mean(bleu[1].penalties(varied, 8))


def test_self_bleu_rollout_window_remembers_recent_completions() -> None:
    term = DiversityTerm("arith", weight=1.0, measure="self_bleu", rollout_window=2)
    # nothing to compare with: every order smoothed, 0.1 / (7 uni-, 6 bi-, 5 trigrams), geometric mean
    assert term.penalties(["12*(3+4)"], group_size=1) == [pytest.approx(0.1 / (7 * 6 * 5) ** (1 / 3), rel=1e-12)]
    assert term.penalties(["12 * ( 3+4 )"], group_size=1) == [1.0]  # seen in the last call, whatever the spacing
    term.penalties(["5-6", "7-8"], group_size=1)  # pushes it out of a window of 2
    assert term.penalties(["12*(3+4)"], group_size=1)[0] < 0.2
    off = DiversityTerm("arith", weight=1.0, measure="self_bleu", rollout_window=0)
    off.penalties(["12*(3+4)"], group_size=1)
    assert off.penalties(["12*(3+4)"], group_size=1)[0] < 0.2  # no window: nothing remembered


def test_self_bleu_measure_ignores_surface_noise_and_uses_the_archive() -> None:
    rng = random.Random(7)
    base = [random_expression(rng, 4) for _ in range(8)]
    term = DiversityTerm("arith", weight=1.0, measure="self_bleu", rollout_window=0)
    term.observe(base, ["t"] * len(base))
    assert term.penalties([_noise(t, rng) for t in base], group_size=1) == [1.0] * len(base)
    azr = DiversityTerm("azr", weight=1.0, measure="self_bleu", rollout_window=0)
    azr.observe([AZR], ["sort"])
    assert azr.penalties([AZR_RENAMED], group_size=1) == [1.0]
    assert azr.penalties([AZR_OTHER], group_size=1)[0] < 0.9
    with pytest.raises(ValueError):
        DiversityTerm("arith", weight=1.0, measure="bleu")
    with pytest.raises(ValueError):
        DiversityTerm("arith", weight=1.0, measure="self_bleu", rollout_window=-1)
    clone = pickle.loads(pickle.dumps(term))
    assert clone.penalties(base[:2], 1) == term.penalties(base[:2], 1)

"""``Band.settled``: a label settled early is the label every completion of the remaining attempts gives."""

from __future__ import annotations

import itertools

import pytest

from probes.band import Band, Side

BANDS = [Band(8, 1, 3, 1), Band(8, 1, 3, 6), Band(3, 1, 2, 2), Band(1, 1, 1, 1), Band(1, 0, 0, 1),
         Band(4, 0, 4, 4), Band(5, 2, 2, 3)]
OUTCOMES = ("pass", "fail", "null")


def _side(band: Band, outcomes: tuple[str, ...]) -> Side:
    solved = outcomes.count("pass")
    return band.side(solved, solved + outcomes.count("fail"))


def _counts(prefix: tuple[str, ...]) -> tuple[int, int, int]:
    solved = prefix.count("pass")
    return solved, solved + prefix.count("fail"), len(prefix)


@pytest.mark.parametrize("band", BANDS, ids=lambda b: f"k{b.k}-{b.lo}-{b.hi}-min{b.min_valid_trials}")
def test_settled_is_exactly_the_side_every_completion_gives(band: Band) -> None:
    """Exhaustive: for every prefix of outcomes, ``settled`` is the common side of all its completions
    when they share one and ``None`` otherwise (so it never stops early on a label that could change,
    and never runs an attempt it could have spared)."""
    for n in range(band.k + 1):
        for prefix in itertools.product(OUTCOMES, repeat=n):
            finals = {_side(band, prefix + rest) for rest in itertools.product(OUTCOMES, repeat=band.k - n)}
            expected = next(iter(finals)) if len(finals) == 1 else None
            assert band.settled(*_counts(prefix)) is expected, (band, prefix, finals)


@pytest.mark.parametrize("band", BANDS, ids=lambda b: f"k{b.k}-{b.lo}-{b.hi}-min{b.min_valid_trials}")
def test_stopping_at_the_first_settled_prefix_gives_the_full_k_label(band: Band) -> None:
    """The property sequential labelling relies on: for every full sequence of k outcomes, the label at
    the first settled prefix equals the full-k label, and equals ``side`` of that prefix's counts."""
    for outcomes in itertools.product(OUTCOMES, repeat=band.k):
        stop = next(n for n in range(band.k + 1) if band.settled(*_counts(outcomes[:n])) is not None)
        solved, valid, _ = _counts(outcomes[:stop])
        assert band.settled(*_counts(outcomes[:stop])) is _side(band, outcomes) is band.side(solved, valid)


def test_the_examples_of_the_docstring() -> None:
    assert Band(8, 1, 3, 1).settled(4, 4, 4) is Side.TOO_EASY          # 4 of the first 4: too easy
    assert Band(8, 1, 3, 1).settled(3, 3, 3) is None                   # 3/8 .. 8/8: not yet
    assert Band(8, 1, 3, 6).settled(1, 7, 7) is Side.IN_BAND            # 1/8 .. 2/8 whatever the last is
    assert Band(3, 1, 2, 2).settled(1, 2, 2) is Side.IN_BAND            # SWE: 1 solved + 1 failed
    assert Band(3, 1, 2, 2).settled(1, 1, 2) is None                   # 1 solved + 1 null: needs a valid third
    assert Band(3, 1, 2, 2).settled(0, 0, 2) is Side.INSUFFICIENT       # 2 nulls: 2 valid are out of reach
    assert Band(8, 1, 3, 6).settled(0, 0, 0) is None


@pytest.mark.parametrize("counts", [(1, 0, 1), (0, 2, 1), (0, 0, 9), (-1, 0, 0)])
def test_impossible_counts_are_refused(counts: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError, match="attempted"):
        Band(8, 1, 3, 1).settled(*counts)

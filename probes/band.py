"""The utility band: the one definition of "in band", used by spot-checks, probes, retraining and the API.

A task attempted ``k`` times is *in band* when its solve rate over the **valid** attempts lies in the
band's rate range: ``lo / k ≤ solved / valid ≤ hi / k``. Null attempts (timeouts, infrastructure
errors) are not failures: they are left out of ``valid``. With every attempt valid this is simply
``lo ≤ solved ≤ hi``; with some null attempts the realised rate is compared with the band's rate
range, as in the PROPEL paper (Appendix 14.2; SWE: 1 solved of 2 valid out of 3 is in the 1–2 band).
Fewer than ``min_valid_trials`` valid attempts give no label at all (``insufficient``).

A label is often *settled* before all ``k`` attempts have run (:meth:`Band.settled`): with band 1–3 of
8, four solved of the first four is too easy whatever follows; with the SWE band 1–2 of 3 (at least 2
valid), one solved and one failed is in band. Sequential labelling (:func:`curriculum.labelling.spotcheck.label_tasks`,
:func:`curriculum.labelling.spotcheck.run_spotcheck`) stops attempting a task there: same label, fewer attempts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class Side(StrEnum):
    """Where a solve count falls relative to the band."""

    IN_BAND = "in_band"
    TOO_EASY = "too_easy"
    TOO_HARD = "too_hard"
    INSUFFICIENT = "insufficient"


@dataclass(frozen=True)
class Band:
    """``k`` attempts; in band when ``lo / k ≤ solved / valid ≤ hi / k`` with ``valid ≥ min_valid_trials``."""

    k: int = 8
    lo: int = 1
    hi: int = 3
    min_valid_trials: int = 1

    def __post_init__(self) -> None:
        if self.k < 1 or not 0 <= self.lo <= self.hi <= self.k:
            raise ValueError(f"band {self.lo}-{self.hi} of k={self.k} must satisfy 0 ≤ lo ≤ hi ≤ k, k ≥ 1")
        if not 1 <= self.min_valid_trials <= self.k:
            raise ValueError(f"min_valid_trials must be in [1, k={self.k}], got {self.min_valid_trials}")

    @classmethod
    def parse(cls, band: str, k: int, min_valid_trials: int = 1) -> Band:
        """``"1-3"`` (or ``"2"``) with ``k`` → a band; ``ValueError`` with the expected form otherwise."""
        parts = band.split("-")
        try:
            lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) in (1, 2) else (None, None)
        except ValueError:
            lo = hi = None
        if lo is None or hi is None:
            raise ValueError(f"band {band!r} must look like LO-HI, e.g. 1-3")
        return cls(k, lo, hi, min_valid_trials)

    def side(self, solved: int, valid: int) -> Side:
        """In band, too easy (above), too hard (below), or insufficient (too few valid attempts)."""
        if not 0 <= solved <= valid:
            raise ValueError(f"solved={solved} must lie in 0…valid={valid}")
        if valid < self.min_valid_trials or valid == 0:
            return Side.INSUFFICIENT
        if solved * self.k < self.lo * valid:
            return Side.TOO_HARD
        if solved * self.k > self.hi * valid:
            return Side.TOO_EASY
        return Side.IN_BAND

    def settled(self, solved: int, valid: int, attempted: int) -> Side | None:
        """The final side when no outcome of the ``k − attempted`` attempts still to run can change it,
        else ``None``. ``solved ≤ valid ≤ attempted ≤ k`` count the attempts run so far (``attempted −
        valid`` of them null).

        Nulls already seen do not matter (they are out of ``valid`` for good); each remaining attempt may
        pass, fail or be null. Once ``valid ≥ min_valid_trials`` every completion is labelled and its rate
        lies between ``solved / (valid + r)`` (all fail) and ``(solved + r) / (valid + r)`` (all pass);
        each side is an interval of rates, so the label is settled exactly when those two agree. Below
        ``min_valid_trials`` the all-null completion is insufficient: settled only if the others are too.
        A settled side always equals :meth:`side` of the counts so far.
        """
        if not 0 <= solved <= valid <= attempted <= self.k:
            raise ValueError(f"need 0 ≤ solved={solved} ≤ valid={valid} ≤ attempted={attempted} ≤ k={self.k}")
        remaining = self.k - attempted
        if valid + remaining < self.min_valid_trials:
            return Side.INSUFFICIENT  # even all-valid remaining attempts leave too few
        if valid < self.min_valid_trials:
            return None  # all-null remaining attempts: insufficient; all-valid: a verdict
        low, high = self.side(solved, valid + remaining), self.side(solved + remaining, valid + remaining)
        return low if low is high else None

    def in_band(self, solved: int, valid: int) -> bool | None:
        """``True``/``False``, or ``None`` when there are too few valid attempts to say."""
        side = self.side(solved, valid)
        return None if side is Side.INSUFFICIENT else side is Side.IN_BAND

    def probability(self, p: float) -> float:
        """The chance that ``k`` valid attempts at success rate ``p`` land in the band (exact: the
        binomial mass of the solve counts :meth:`in_band` accepts)."""
        return sum(math.comb(self.k, j) * p ** j * (1 - p) ** (self.k - j)
                   for j in range(self.k + 1) if self.in_band(j, self.k))

    def lowered(self, lead: int) -> Band:
        """The band ``lead`` solves lower (each end floored at 0): where a task must lie *now* for a solver that
        gains about ``lead`` solves of ``k`` before it trains on the task. ``lead = 0`` is the band itself."""
        if lead < 0:
            raise ValueError(f"lead must be ≥ 0, got {lead}")
        return Band(self.k, max(0, self.lo - lead), max(0, self.hi - lead), self.min_valid_trials)

    def label(self, solved: int, valid: int) -> int:
        """The probe-training label (1 in band, 0 otherwise); rows with too few valid attempts count as 0."""
        return int(self.side(solved, valid) is Side.IN_BAND)

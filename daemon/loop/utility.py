"""Verified utility next to predicted utility (#34): what the probes believe vs what the solver says.

*Predicted utility* is the mean probe probability of the cycle's valid samples — the probes' own
belief, which is exactly what a generator hacking the probes inflates (the cycle summary kept saying
"pred. util 51–61 %" while emitted tasks were 0–7 % in band). *Verified utility* is the in-band share
among the spot-check labels (current solver version) of the recent tasks the emission gate would emit
on the probe's word: valid tasks of the last ``emission.verified_window_cycles`` cycles whose probe
score is at least ``emission.min_probability``. Tasks emitted *because* a label verified them are
left out on purpose — their label was in band by selection and would flatter the probe. With no such
label in the window the utility is *unverified*, and every surface says so.

The hacking gap (:mod:`daemon.loop.hacking`) compares like with like: ``labelled_predicted``, the mean
probe probability of the *same* labelled tasks, against their verified in-band share (the sample's
mean score is the RL reward, which rises by design: comparing it with the verified share made the
long run's probes suspect on ordinary learning).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select

from curriculum.store import lineage
from curriculum.store.db import Store
from curriculum.store.models import Label, ProbeScore, TaskRow


class UtilityView(BaseModel):
    """The last spot-check phase's utilities (stored in the driver state for ``/v1/status``)."""

    model_config = ConfigDict(extra="forbid")
    cycle: int
    predicted: float | None = None
    verified: float | None = None  # None: unverified (no label of a probe-high task in the window)
    labels: int = Field(0, ge=0, description="labels the verified share is over")
    labelled_predicted: float | None = Field(None, description="mean probe probability of those labelled tasks "
                                             "(the hacking gap's predicted side)")
    window_cycles: int = 0

    def as_status(self) -> dict[str, object]:
        return {**self.model_dump(), "unverified": self.verified is None, "line": describe(self)}


def verified_counts(store: Store, run_id: int, solver_id: str, cycle: int, window_cycles: int,
                    min_probability: float) -> tuple[int, int, float]:
    """(in band, labelled, sum of their probe probabilities) among the window's probe-high tasks labelled
    on ``solver_id``."""
    with store.session() as s:
        rows = s.execute(
            select(Label.in_band, ProbeScore.probability).select_from(TaskRow)
            .join(Label, (Label.task_id == TaskRow.id) & (Label.source == "spotcheck") & (Label.solver_id == solver_id)
                  & (Label.run_id == run_id))  # the run's own labels (#37: labels are per run)
            .join(ProbeScore, lineage.latest_score_of(TaskRow.id))
            .where(TaskRow.run_id == run_id, TaskRow.valid, TaskRow.cycle > cycle - window_cycles,
                   TaskRow.cycle <= cycle, ProbeScore.probability >= min_probability,
                   Label.in_band.is_not(None))).all()
    return sum(1 for r in rows if r.in_band), len(rows), sum(float(r.probability) for r in rows)


def view(cycle: int, predicted: float | None, in_band: int, labelled: int, window_cycles: int,
         labelled_probability: float = 0.0) -> UtilityView:
    """The utilities of a cycle (pure); ``labelled_probability``: the labelled tasks' summed probe scores."""
    return UtilityView(cycle=cycle, predicted=predicted, verified=in_band / labelled if labelled else None,
                       labels=labelled, window_cycles=window_cycles,
                       labelled_predicted=labelled_probability / labelled if labelled else None)


def describe(v: UtilityView) -> str:
    """One readable line: ``predicted 55% · verified 12% (30 labels, last 30 cycles)`` or ``… · unverified``."""
    pred = "–" if v.predicted is None else f"{v.predicted:.0%}"
    if v.verified is None:
        return f"predicted {pred} · unverified (no label of a probe-high task in the last {v.window_cycles} cycles)"
    return f"predicted {pred} · verified {v.verified:.0%} ({v.labels:,} labels, last {v.window_cycles} cycles)"

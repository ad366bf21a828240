"""Spot-check bookkeeping of the driver: the harvest (label tasks whose trials landed, record false positives,
precision metrics) and the deadline of pending checks."""

from __future__ import annotations

import logging
from datetime import datetime

from curriculum.labelling.spotcheck import false_positives, harvest_labels
from curriculum.store import lineage
from curriculum.store.db import Store
from daemon.loop.state import DriverState, PendingCheck
from probes.band import Band

log = logging.getLogger("propel.driver")


def merge_harvests(first: dict[str, float], second: dict[str, float]) -> dict[str, float]:
    """One phase's two harvests (before and after its dispatch): counts add up, ratios come from the
    harvest that labelled anything (the later one when both did)."""
    out = {**first, **{k: v for k, v in second.items() if second.get("labelled", 0.0) > 0 or k not in first}}
    for key in ("labelled", "false_positives"):
        out[key] = first.get(key, 0.0) + second.get(key, 0.0)
    return out


def harvest(store: Store, run_id: int, solver_id: str, band: Band, threshold: float,
            state: DriverState) -> dict[str, float]:
    """Label tasks whose trials all landed; record false positives; compute precision metrics."""
    pending = list(state.spotcheck_pending)
    if not pending:
        return {}
    by_sid: dict[str, list[int]] = {}
    for t in pending:  # each task is harvested under the version it was dispatched against
        by_sid.setdefault(state.spotcheck_pending[t].solver_id or solver_id, []).append(t)
    # a task is harvested once its stored trials settle its label: all k always do, and a spot-checker with
    # spotcheck.sequential stops there (so the harvest rule needs no setting that could disagree with it)
    labels = {t: lab for sid, ids in by_sid.items()
              for t, lab in harvest_labels(store, ids, sid, band, run_id=run_id, sequential=True).items()}
    with store.session() as s:
        scores = lineage.latest_scores(s, list(labels))
        labelled = [(t, True, scores[t][1] if t in scores else 0.0, lab) for t, lab in labels.items()]
        fps = false_positives(labelled, threshold, band)
        lineage.add_false_positives(s, [(t, scores[t][0], side, solved, k, p)  # a false positive was scored
                                        for t, side, solved, k, p in fps])
    for task_id in labels:
        state.spotcheck_pending.pop(task_id, None)
    known = [lab for lab in labels.values() if lab.in_band is not None]
    high = [t for t, _, p, lab in labelled if p >= threshold and lab.in_band is not None]
    out = {"labelled": float(len(labels)), "false_positives": float(len(fps))}
    if known:
        out["spotcheck_utility"] = sum(1 for lab in known if lab.in_band) / len(known)
    if high:
        out["probe_precision"] = sum(1 for t in high if labels[t].in_band) / len(high)
        out["false_positive_rate"] = len(fps) / len(high)
    return out


def expire_spotchecks(state: DriverState, now: datetime, deadline_s: float,
                      redispatches: int) -> tuple[list[int], dict[str, float]]:
    """Pending checks past ``deadline_s``: sent again (up to ``redispatches`` times; only missing trials
    are attempted), then abandoned. Both are counted in the totals."""
    again, abandoned = [], 0
    for task_id, check in sorted(state.spotcheck_pending.items()):
        if (now - check.dispatched_at).total_seconds() < deadline_s:
            continue
        if check.redispatches < redispatches:
            state.spotcheck_pending[task_id] = PendingCheck(dispatched_at=now, redispatches=check.redispatches + 1,
                                                            solver_id=check.solver_id)
            again.append(task_id)
        else:
            del state.spotcheck_pending[task_id]
            abandoned += 1
    if again or abandoned:
        log.warning("spot-checks past their %.0f s deadline: %d sent again, %d abandoned", deadline_s, len(again),
                    abandoned)
    state.totals.spotchecks_redispatched += len(again)
    state.totals.spotchecks_abandoned += abandoned
    return again, {"spotchecks_redispatched": float(len(again)), "spotchecks_abandoned": float(abandoned)}

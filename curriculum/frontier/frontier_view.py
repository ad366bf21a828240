"""What an operator sees of a moving solver, per solver version: labels (spot-check and trainer),
the in-band rate of each, the drift measured on that version, and the champion primary probe.

One reader for ``propel status``, ``GET /v1/status`` and the dashboard's frontier panel.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from curriculum.frontier import drift
from curriculum.store import repo, solver_versions
from curriculum.store.models import Label, ProbeRow, QueueItem, SolverVersionRow


def _rate(in_band: int, known: int) -> float | None:
    return None if known == 0 else in_band / known


def version_rows(sess: Session, run_id: int | None) -> list[dict[str, Any]]:
    """One row per (solver name, version) with labels the run wrote (labels are per run: another run
    replaying a task keeps its own), a drift measurement, or a registration (an announced version without
    labels yet is listed too), newest version first per name. Registrations are not per run: a store
    shared by runs lists every run's solver versions."""
    q = (select(Label.solver_name, Label.solver_version, Label.source, Label.in_band, func.count())
         .where(Label.run_id == run_id)
         .group_by(Label.solver_name, Label.solver_version, Label.source, Label.in_band))
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for name, version, source, in_band, n in sess.execute(q):
        c = counts.setdefault((name, version), {})
        c[f"{source}_labels"] = c.get(f"{source}_labels", 0) + int(n)
        if in_band is not None:
            c[f"{source}_known"] = c.get(f"{source}_known", 0) + int(n)
            c[f"{source}_in_band"] = c.get(f"{source}_in_band", 0) + int(bool(in_band)) * int(n)
    drifts = {} if run_id is None else {(m.solver, m.new_version): m for m in drift.measurements(sess, run_id)}
    rows = []
    registered = {(n, v) for n, v in sess.execute(select(SolverVersionRow.solver, SolverVersionRow.version))}
    for name in sorted({n for n, _ in counts} | {n for n, _ in drifts} | {n for n, _ in registered}):
        known = solver_versions.versions(sess, name)
        ages = solver_versions.ages(known)
        orders = {v.version: v.order for v in known}
        cur = solver_versions.current(sess, name)
        versions = {v for n, v in (*counts, *drifts, *registered) if n == name}
        for version in sorted(versions, key=lambda v: (orders.get(v) is None, -(orders.get(v) or -1), v)):
            c = counts.get((name, version), {})
            m = drifts.get((name, version))
            rows.append({
                "solver": name, "version": version, "order": orders.get(version), "age": ages.get(version),
                "current": cur is not None and cur.version == version,
                "spotcheck_labels": c.get("spotcheck_labels", 0), "trainer_labels": c.get("consumer_labels", 0),
                "spotcheck_in_band_rate": _rate(c.get("spotcheck_in_band", 0), c.get("spotcheck_known", 0)),
                "trainer_in_band_rate": _rate(c.get("consumer_in_band", 0), c.get("consumer_known", 0)),
                "drift_score": None if m is None else m.score, "drift_measured": None if m is None else m.measured,
                "drift_state": None if m is None else m.state, "drift_from": None if m is None else m.old_version,
                "transitions": None if m is None else m.matrix,
            })
    return rows


def champion(sess: Session, run_id: int) -> dict[str, Any] | None:
    """The active primary probe of the run and since when it leads (its refresh decision, if any)."""
    primaries = [p for p in repo.active_probes(sess, run_id) if p.role == "primary"]
    if not primaries:
        return None
    p = primaries[0]
    decision = p.meta.get("refresh") if isinstance(p.meta, dict) else None
    refreshes = int(sess.execute(select(func.count()).select_from(ProbeRow).where(
        ProbeRow.run_id == run_id, ProbeRow.role == "primary")).scalar_one())
    since = p.meta.get("promoted_at") if isinstance(p.meta, dict) else None
    return {"probe": p.name, "since": since or p.created_at.isoformat(timespec="seconds"),
            "decision": None if not decision else decision.get("reason"), "primary_probes_trained": refreshes}


def frontier_summary(sess: Session, run_id: int | None) -> dict[str, Any]:
    """Per-version rows, the champion probe and the stale queue count of a run (an unknown run: the
    registered versions, no champion)."""
    if run_id is None:  # no run yet: the registered (announced) versions only
        return {"versions": version_rows(sess, None), "champion": None, "stale_tasks": 0}
    stale = int(sess.execute(select(func.count()).select_from(QueueItem).where(
        QueueItem.run_id == run_id, QueueItem.state == "stale")).scalar_one())
    return {"versions": version_rows(sess, run_id), "champion": champion(sess, run_id), "stale_tasks": stale}

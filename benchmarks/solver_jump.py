"""Does the frontier follow the solver? The daemon across a solver jump (issue #16, end to end).

A trainer's solver gets much stronger between two checkpoints and the trainer announces the new one.
Each arm is the daemon itself — its driver (:func:`daemon.service.runtime.assemble_driver` with the
service hooks, as ``propel run`` builds it) cycle after cycle on the toy table's embedded run (its
generator, first probe and synthetic solver) — for ``before`` cycles under the first version, then the
announce (:func:`curriculum.store.solver_versions.register`, what ``POST /v1/solvers/{name}/versions``
calls) and ``after`` more cycles, in which the spot-check solver serves the new, stronger version:

* ``follow`` — the defaults of ``[frontier]``: drift re-measurement, champion/challenger refresh of the
  primary probe, stale ready tasks retired;
* ``follow + periodic refresh`` — the same with ``refresh_every_labels = periodic_refresh_labels``: the
  primary is also challenged as new-version labels accumulate, not only once on drift;
* ``no refresh`` — the same run with ``drift_budget_share = 0``: no drift is measured, so the primary
  probe is never refreshed and the queue never re-scored (aux retraining still follows spot-checks:
  what the daemon did before issue #16).

The benchmark compresses hours into minutes, so the hourly spot-check cap is lifted to the per-cycle
budget times the number of cycles: each cycle spends ``spot_budget`` trials, as cycles spread over real
time would (with the default cap of 512 trials an hour, these fast cycles would spend it in four
cycles and then measure nothing).

After every cycle the tasks the daemon **emitted** that cycle and the tasks **servable** (ready) in its
queue are scored by their exact probability of landing in the band (1–3 of 8) under the solver version
*current at that moment* — computed from the SYNTHETIC solver's success probability, so no sampling
noise. The issue asks that this in-band rate recovers after the jump; reported: the rate before the
jump, in the first cycle after it, and over the last cycles, with the drift score, the refresh decisions
and the stale tasks retired.

    .venv/bin/python -m benchmarks.solver_jump            # 3 seeds (~20-40 min on 2 shared cores)
    .venv/bin/python -m benchmarks.solver_jump --quick    # checks the pipeline
"""

from __future__ import annotations

import logging
import math
import re
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import click
import numpy as np
import torch
from sqlalchemy import select

from benchmarks import toy_propel as toy
from benchmarks._common import RESULTS, write_result
from curriculum.solvers.synthetic import SyntheticArithSolver
from curriculum.store import solver_versions
from curriculum.store.db import Store
from curriculum.store.models import DriftMeasurement, QueueItem, RetrainJob, TaskRow
from daemon.config import PropelConfig
from daemon.loop.progress import Progress
from daemon.ops.metrics import build_metrics
from daemon.service.runtime import ServiceHooks, assemble_driver
from probes.band import Band

ARMS = ("follow", "follow + periodic refresh", "no refresh")
SOLVER = "arith-solver"
NEW_VERSION = "step-1"
log = logging.getLogger("benchmarks.solver_jump")


@dataclass(frozen=True)
class Settings:
    seeds: int = 3
    before: int = 3
    after: int = 8
    chunk: int = 10
    old_skill: float = 6.0
    new_skill: float = 8.0
    periodic_refresh_labels: int = 256
    corpus: int = 1536
    spot_n: int = 256
    spot_budget: int = 128
    batch: int = 16
    group: int = 8
    bootstrap_steps: int | None = None

    @staticmethod
    def quick() -> Settings:
        return Settings(seeds=1, before=1, after=2, chunk=2, corpus=256, spot_n=64, spot_budget=48, batch=8,
                        group=4, bootstrap_steps=60, periodic_refresh_labels=32)

    def toy(self) -> toy.Settings:
        return replace(toy.Settings(), seeds=self.seeds, corpus=self.corpus, spot_n=self.spot_n,
                       spot_budget=self.spot_budget, batch=self.batch, group=self.group,
                       bootstrap_steps=self.bootstrap_steps)


def arm_config(shared: toy.Shared, settings: Settings, root: Path, arm: str, seed: int) -> PropelConfig:
    """The toy row's daemon config with the trainer's solver name, the new version's skill, and the
    arm's ``[frontier]`` (``no refresh``: no drift measurement, hence no primary refresh)."""
    run = re.sub(r"[^A-Za-z0-9]+", "-", arm)
    cfg = toy.row_config(shared, settings.toy(), root, f"{run}-{seed}", seed, settings.chunk)
    raw = cfg.model_dump(mode="json")
    raw["solver"].update(name=SOLVER, synthetic_skill_by_version={NEW_VERSION: settings.new_skill})
    raw["spotcheck"]["budget_per_hour"] = settings.spot_budget * (settings.before + settings.after)
    if arm == "no refresh":
        raw["frontier"]["drift_budget_share"] = 0.0
    if arm == "follow + periodic refresh":
        raw["frontier"]["refresh_every_labels"] = settings.periodic_refresh_labels
    return PropelConfig.model_validate(raw)


def queue_in_band(store: Store, run_id: int, band: Band, skill: float, after_id: int) -> dict[str, Any]:
    """Exact in-band rates under ``skill``: of queue rows newer than ``after_id`` (this cycle's
    emissions) and of every ready row (what a trainer can lease now)."""
    solver = SyntheticArithSolver(offset=skill)
    with store.session() as s:
        rows = s.execute(select(QueueItem.id, QueueItem.state, TaskRow.text)
                         .join(TaskRow, TaskRow.id == QueueItem.task_id).where(QueueItem.run_id == run_id)).all()
    rate = {qid: band.probability(solver.success_probability(text)) for qid, _, text in rows}
    emitted = [rate[qid] for qid, _, _ in rows if qid > after_id]
    ready = [rate[qid] for qid, state, _ in rows if state == "ready"]
    return {"emitted": len(emitted), "emitted_in_band": float(np.mean(emitted)) if emitted else None,
            "ready": len(ready), "ready_in_band": float(np.mean(ready)) if ready else None,
            "stale": sum(1 for _, state, _ in rows if state == "stale"),
            "max_id": max((qid for qid, _, _ in rows), default=after_id)}


def frontier_events(store: Store, run_name: str) -> dict[str, Any]:
    """The drift measurement and the primary refresh jobs of the run, as the store records them."""
    with store.session() as s:
        drifts = s.execute(select(DriftMeasurement.new_version, DriftMeasurement.score, DriftMeasurement.measured)
                           ).all()
        jobs = s.execute(select(RetrainJob.name, RetrainJob.state, RetrainJob.result, RetrainJob.reason)
                         .where(RetrainJob.name.like(f"{run_name}-primary-r%")).order_by(RetrainJob.id)).all()
    return {"drift": [{"version": v, "score": sc, "measured": m} for v, sc, m in drifts],
            "refreshes": [{"name": n, "state": st, "reason": rs or (res or {}).get("reason"),
                           "promote": (res or {}).get("promote")} for n, st, res, rs in jobs]}


def run_arm(shared: toy.Shared, settings: Settings, root: Path, arm: str, seed: int) -> dict[str, Any]:
    """The daemon's driver for ``before + after`` cycles, the announce between; one point per cycle."""
    cfg = arm_config(shared, settings, root, arm, seed)
    store, run_id, engine = toy.open_row(cfg, shared, ["mlp"])
    metrics = build_metrics()
    hooks = ServiceHooks(cfg, store, run_id, metrics, Progress())
    driver = assemble_driver(cfg, store, run_id, engine, hooks, toy.never_stop, metrics)
    band = Band(k=cfg.spotcheck.k, lo=cfg.spotcheck.band_lo, hi=cfg.spotcheck.band_hi)
    points: list[dict[str, Any]] = []
    last_id, skill, started = 0, settings.old_skill, time.perf_counter()
    try:
        for cycle in range(settings.before + settings.after):
            if cycle == settings.before:  # the trainer announces its stronger checkpoint
                with store.session() as s:
                    solver_versions.register(s, SOLVER, NEW_VERSION, source="announce")
                skill = settings.new_skill
                points.append({"cycle": cycle - 0.5, "event": "announce",
                               **queue_in_band(store, run_id, band, skill, last_id), "emitted": 0,
                               "emitted_in_band": None})
            while driver.tick().phase != "emit":
                pass
            point = queue_in_band(store, run_id, band, skill, last_id)
            last_id = point["max_id"]
            points.append({"cycle": cycle, "version": NEW_VERSION if skill != settings.old_skill else "", **point})
            log.info("%s seed %d cycle %d (%s): emitted %d, in band %s; ready %d, in band %s; stale %d (%.0fs)",
                     arm, seed, cycle, points[-1]["version"] or "first version", point["emitted"],
                     _fmt(point["emitted_in_band"]), point["ready"], _fmt(point["ready_in_band"]), point["stale"],
                     time.perf_counter() - started)
        return {"arm": arm, "seed": seed, "points": points, **frontier_events(store, cfg.run_name)}
    finally:
        hooks.close()
        store.dispose()


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _series(runs: list[dict[str, Any]], key: str) -> np.ndarray:
    """``key`` per cycle (announce point excluded) × seed; NaN where a cycle emitted nothing."""
    return np.array([[np.nan if p[key] is None else p[key] for p in r["points"] if "event" not in p] for r in runs],
                    dtype=float)


def _mean(x: Any, axis: int | None = None) -> Any:
    """Mean ignoring NaN (cycles that emitted nothing); NaN, without a warning, where all are NaN."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.asarray(x, dtype=float), axis=axis)


def summarise(results: list[dict[str, Any]], settings: Settings) -> dict[str, Any]:
    """Per arm: in-band of emissions before the jump, in the first cycle after it, over the last three
    cycles; the servable queue at the announce and at the end; recovery = last / before."""
    out: dict[str, Any] = {}
    b, tail = settings.before, min(3, settings.after)
    for arm in ARMS:
        runs = [r for r in results if r["arm"] == arm]
        if not runs:
            continue
        emitted, ready = _series(runs, "emitted_in_band"), _series(runs, "ready_in_band")
        at_announce = [next(p for p in r["points"] if p.get("event"))["ready_in_band"] for r in runs]
        before, first, last = (_mean(emitted[:, :b]), _mean(emitted[:, b]),
                               _mean(emitted[:, -tail:]))
        out[arm] = {
            "emitted_in_band_by_cycle": _mean(emitted, axis=0).tolist(),
            "ready_in_band_by_cycle": _mean(ready, axis=0).tolist(),
            "emitted_before_jump": float(before), "emitted_first_cycle_after": float(first),
            "emitted_last_cycles": float(last), "recovery_last_vs_before": float(last / before) if before else None,
            "ready_at_announce": float(_mean([x for x in at_announce if x is not None] or [np.nan])),
            "ready_last": float(_mean(ready[:, -1])),
            "stale_retired": float(np.mean([r["points"][-1]["stale"] for r in runs])),
            "drift_scores": [d["score"] for r in runs for d in r["drift"]],
            "refreshes": [[f["state"] + (" promoted" if f["promote"] else "") for f in r["refreshes"]] for r in runs]}
    follow, frozen = out.get("follow"), out.get("no refresh")
    if follow:
        out["goal"] = {"recovery_target": 0.8, "recovered": (follow["recovery_last_vs_before"] or 0) >= 0.8,
                       "follow_vs_no_refresh_last": (follow["emitted_last_cycles"] / frozen["emitted_last_cycles"]
                                                     if frozen and frozen["emitted_last_cycles"] else None)}
    return out


def finite(obj: Any) -> Any:
    """``obj`` with every NaN replaced by None (JSON has no NaN)."""
    if isinstance(obj, float):
        return None if math.isnan(obj) else obj
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [finite(v) for v in obj]
    return obj


def plot(summary: dict[str, Any], settings: Settings, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    cycles = np.arange(settings.before + settings.after)
    for arm in ARMS:
        if arm not in summary:
            continue
        for ax, key in zip(axes, ("emitted_in_band_by_cycle", "ready_in_band_by_cycle"), strict=True):
            ax.plot(cycles, np.array(summary[arm][key], dtype=float), marker="o", ms=3, label=arm)
    for ax, title in zip(axes, ("tasks emitted in the cycle", "servable (ready) queue after the cycle"),
                         strict=True):
        ax.axvline(settings.before - 0.5, color="gray", ls="--", lw=1, label="new version announced")
        ax.set_xlabel("daemon cycle", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("P(in band) under the current solver", fontsize=8)
    fig.suptitle(f"Solver jump (skill {settings.old_skill:g} → {settings.new_skill:g}; arith, SYNTHETIC solver, "
                 f"mean of {settings.seeds} seeds)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(settings: Settings, data_dir: Path, name: str) -> dict[str, Any]:
    torch.set_num_threads(1)
    started = time.perf_counter()
    shared = toy.build_shared(settings.toy(), data_dir)
    results = []
    with tempfile.TemporaryDirectory(prefix="solver_jump_") as tmp:
        for seed in range(settings.seeds):
            for arm in ARMS:
                results.append(run_arm(shared, settings, Path(tmp), arm, seed))
            click.echo(f"seed {seed} done at {time.perf_counter() - started:.0f}s")
    summary = finite(summarise(results, settings))
    data = {"settings": asdict(settings), "solver": "SYNTHETIC arith solver (logistic in complexity)",
            "summary": summary, "runs": results, "total_wall_s": time.perf_counter() - started}
    write_result(name, data)
    plot(summary, settings, RESULTS / f"{name}.png")
    return data


@click.command()
@click.option("--quick", is_flag=True, help="tiny settings: checks the pipeline, not the goal")
@click.option("--seeds", type=int, default=None, help="number of seeds (default 3)")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".propel"), show_default=True,
              help="where the bootstrapped generator is cached")
@click.option("--name", default="solver_jump", show_default=True, help="result file name under benchmarks/results")
def main(quick: bool, seeds: int | None, data_dir: Path, name: str) -> None:
    """The daemon across a solver jump: in-band rate of emitted tasks before and after, follow vs no refresh."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    settings = Settings.quick() if quick else Settings()
    if seeds is not None:
        settings = replace(settings, seeds=seeds)
    summary = run(settings, data_dir, name)["summary"]
    for arm in ARMS:
        s = summary.get(arm)
        if s:
            click.echo(f"{arm}: emitted in band {_fmt(s['emitted_before_jump'])} before, "
                       f"{_fmt(s['emitted_first_cycle_after'])} first cycle after, {_fmt(s['emitted_last_cycles'])} "
                       f"last cycles (recovery {_fmt(s['recovery_last_vs_before'])}; goal ≥ 0.8)")


if __name__ == "__main__":
    main()

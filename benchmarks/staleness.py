"""Which staleness policy gives the best primary probe for a solver that keeps improving? (issue #16)

The daemon's labels age as the trainer announces versions: ``frontier.staleness`` decides which old
labels still train a refreshed primary probe (:mod:`curriculum.frontier.staleness`). This benchmark chooses
the default by measurement. For each pace at which the solver improves (the synthetic solver's
skill offset rises by ``pace`` per version — SYNTHETIC instrument) and each seed, one run store
receives, version after version, the labels the daemon would write: ``batch`` fresh tasks
spot-checked by the current version (:func:`curriculum.labelling.spotcheck.run_spotcheck`,
:func:`~curriculum.labelling.spotcheck.harvest_labels`, versions registered with
:func:`curriculum.store.solver_versions.register`). After every version, each policy's usable labels are
read exactly as a primary refresh reads them (:func:`curriculum.frontier.refresh.load_refresh_data`), a probe is
fitted on them (:func:`probes.fit.fit_probe`, the refresh's fit) and scored on a held-out set labelled
by the *current* version: balanced accuracy and ECE. Mean over versions ≥ 2, seeds and paces.

The labels come from both of the daemon's sources, as in a run with a trainer downstream: a
``trainer_share`` of each version's batch is acked by the trainer (its ``solved`` of ``n`` attempts,
with infrastructure ``errors`` excluded: :func:`curriculum.frontier.frontier_labels.record_trainer_outcomes`, what
the ack endpoint writes), the rest spot-checked; and after every announce the driver's own
:class:`daemon.loop.frontier.FrontierTracker` opens a drift measurement and re-measures its stratified
sample of older labelled tasks on the new version (its share of the spot-check budget), so re-measured
tasks carry labels of several versions exactly as in the daemon.

    .venv/bin/python -m benchmarks.staleness            # ~5-15 min on 2 shared cores
    .venv/bin/python -m benchmarks.staleness --quick
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import click
import numpy as np
import torch

from benchmarks._common import RESULTS, write_result
from curriculum.common.solver_api import Sampling
from curriculum.domains.arith import ArithDomain, random_expression
from curriculum.domains.base import Task
from curriculum.frontier import frontier_labels
from curriculum.frontier.refresh import load_refresh_data
from curriculum.frontier.staleness import StalenessPolicy
from curriculum.labelling.spotcheck import harvest_labels, label_tasks, run_spotcheck
from curriculum.rl.bootstrap import bootstrap
from curriculum.solvers.synthetic import SyntheticArithSolver
from curriculum.store import repo, solver_versions
from curriculum.store.db import Store
from daemon.config import FrontierConfig
from daemon.loop.frontier import FrontierSettings, FrontierTracker
from daemon.loop.state import DriverState
from migrations import upgrade
from probes import FeatureExtractor, FeatureSpec, FrozenReference, TrainConfig
from probes.band import Band
from probes.fit import fit_probe
from probes.metrics import evaluate

BAND = Band(k=8, lo=1, hi=3, min_valid_trials=6)
SPEC = FeatureSpec(layer=-1, pooling="mean_full")
POLICIES: dict[str, StalenessPolicy] = {
    "keep_last 1": StalenessPolicy(keep_versions=1), "keep_last 2": StalenessPolicy(keep_versions=2),
    "keep_last 3": StalenessPolicy(keep_versions=3), "keep_last 5": StalenessPolicy(keep_versions=5),
    "keep all": StalenessPolicy(keep_versions=10_000),
    "half_life 1": StalenessPolicy(mode="half_life", half_life_versions=1.0),
    "half_life 2": StalenessPolicy(mode="half_life", half_life_versions=2.0),
}
log = logging.getLogger("benchmarks.staleness")


@dataclass(frozen=True)
class Settings:
    seeds: int = 3
    paces: tuple[float, ...] = (0.25, 0.5, 1.0)
    versions: int = 8
    batch: int = 64
    held_out: int = 400
    start_skill: float = 4.0
    trainer_share: float = 0.5
    trainer_error_rate: float = 0.1
    bootstrap_steps: int | None = None

    @staticmethod
    def quick() -> Settings:
        return Settings(seeds=1, paces=(0.5,), versions=3, batch=48, held_out=120, bootstrap_steps=60)


def task_pool(n: int, seed: int) -> list[Task]:
    """``n`` distinct valid arith tasks over a wide range of complexity."""
    domain, rng = ArithDomain(), random.Random(seed)
    seen: set[str] = set()
    out: list[Task] = []
    while len(out) < n:
        v = domain.validate_batch([random_expression(rng, rng.randint(1, 9))])[0]
        if v.valid and v.task.content_hash not in seen:
            seen.add(v.task.content_hash)
            out.append(v.task)
    return out


def scenario(settings: Settings, pace: float, seed: int, features: dict[str, np.ndarray], reference: FrozenReference,
             root: Path) -> list[dict[str, Any]]:
    """One store, ``versions`` announces; every policy's probe scored after each version ≥ 2."""
    domain, url = ArithDomain(), f"sqlite:///{root / f'st-{pace}-{seed}.db'}"
    upgrade(url)
    store = Store(url)
    pool = task_pool(settings.versions * settings.batch + settings.held_out, 1000 * seed + 7)
    held, fresh = pool[:settings.held_out], pool[settings.held_out:]
    with store.session() as s:
        run_id = repo.get_or_create_run(s, f"staleness-{pace}-{seed}", "h", {})
        ids = repo.add_tasks(s, run_id, [repo.NewTask("arith", t.content_hash, t.text, True, t.payload, cycle=0)
                                         for t in fresh])
    solver, rows = SyntheticArithSolver(seed=seed), []
    tracker = FrontierTracker(store, run_id, solver.solver_id, FrontierSettings(), BAND, seed=seed)
    state, rng = DriverState.model_validate({}), np.random.default_rng(seed)
    n_acked = round(settings.batch * settings.trainer_share)
    for v in range(1, settings.versions + 1):
        version = f"step-{v}"
        solver.set_skill(settings.start_skill + pace * (v - 1))
        with store.session() as s:
            solver_versions.register(s, solver.solver_id, version)
        start = (v - 1) * settings.batch
        batch = ids[start + n_acked: start + settings.batch]
        sid = solver_versions.qualified_id(solver.solver_id, version)
        drifted = tracker.plan_drift(v, state, settings.batch)  # opens a measurement on a new version
        run_spotcheck(store, domain, solver, batch + drifted, BAND.k, Sampling(), solver_id=sid)
        harvest_labels(store, batch + drifted, sid, BAND, run_id=run_id)
        trainer_acks(store, run_id, solver, version, list(zip(ids[start:start + n_acked], fresh[start:start + n_acked],
                                                      strict=True)), settings.trainer_error_rate, rng)
        tracker.observe_drift(v)
        if v < 2:
            continue
        truth = label_tasks(domain, solver, held, BAND, Sampling(seed=10_000 + v))
        keep = [i for i, lab in enumerate(truth) if lab.in_band is not None]
        y_held = np.array([int(bool(truth[i].in_band)) for i in keep])
        x_held = np.stack([features[domain.reference_text(held[i])] for i in keep])
        for name, policy in POLICIES.items():
            rows.append({"pace": pace, "seed": seed, "version": v, "policy": name,
                         **score_policy(store, run_id, solver.solver_id, policy, features, reference,
                                        x_held, y_held, seed)})
    store.dispose()
    return rows


def trainer_acks(store: Store, run_id: int, solver: SyntheticArithSolver, version: str, tasks: list[tuple[int, Task]],
                 error_rate: float, rng: np.random.Generator) -> None:
    """The trainer's outcomes for ``tasks``: ``BAND.k`` attempts each by the current version, each lost to
    an infrastructure error with probability ``error_rate`` (excluded from the count), acked as labels."""
    if not tasks:
        return
    sampling = Sampling(seed=int(rng.integers(1 << 30)))
    attempts = label_tasks(ArithDomain(), solver, [t for _, t in tasks], BAND, sampling)
    outcomes = []
    for (task_id, _), lab in zip(tasks, attempts, strict=True):
        errors = int(rng.binomial(BAND.k, error_rate))
        solved = int(rng.hypergeometric(lab.solved, BAND.k - lab.solved, BAND.k - errors)) if errors < BAND.k else 0
        outcomes.append(frontier_labels.TrainerOutcome(task_id, solver.solver_id, version, solved, BAND.k, errors,
                                                       {"temperature": 1.0}))
    with store.session() as s:
        frontier_labels.record_trainer_outcomes(s, outcomes, BAND, run_id=run_id)


def score_policy(store: Store, run_id: int, solver: str, policy: StalenessPolicy, features: dict[str, np.ndarray],
                 reference: FrozenReference, x_held: np.ndarray, y_held: np.ndarray, seed: int) -> dict[str, Any]:
    data = load_refresh_data(store, run_id, solver, policy, ArithDomain())
    out: dict[str, Any] = {"labels": len(data.task_ids), "positives": int(data.labels.sum())}
    if len(set(data.labels.tolist())) < 2 or len(set(y_held.tolist())) < 2:
        return out | {"balanced_accuracy": None, "ece": None}
    x = np.stack([features[t] for t in data.texts])
    probe = fit_probe(x, data.labels, reference=reference, spec=SPEC, band=BAND, arch="mlp",
                      config=TrainConfig(seed=seed, hidden_dim=64))
    m = evaluate(y_held, probe.head.probabilities(x_held))
    return out | {"balanced_accuracy": float(m.balanced_accuracy), "ece": float(m.ece)}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per policy: mean BA/ECE over every (pace, seed, version) it could train on, and per pace."""
    table: dict[str, Any] = {}
    for name in POLICIES:
        mine = [r for r in rows if r["policy"] == name and r["balanced_accuracy"] is not None]
        per_pace = {str(p): float(np.mean([r["balanced_accuracy"] for r in mine if r["pace"] == p]))
                    for p in sorted({r["pace"] for r in mine})}
        table[name] = {"balanced_accuracy": float(np.mean([r["balanced_accuracy"] for r in mine])) if mine else None,
                       "ece": float(np.mean([r["ece"] for r in mine])) if mine else None,
                       "labels": float(np.mean([r["labels"] for r in mine])) if mine else None,
                       "untrainable": sum(1 for r in rows if r["policy"] == name and r["balanced_accuracy"] is None),
                       "balanced_accuracy_by_pace": per_pace}
    ranked = sorted((n for n in table if table[n]["balanced_accuracy"] is not None),
                    key=lambda n: -table[n]["balanced_accuracy"])
    return {"policies": table, "best": ranked[0] if ranked else None, "current_default": _default_policy()}


def _default_policy() -> str:
    """The config's default staleness policy, in this benchmark's names."""
    cfg = FrontierConfig()
    return (f"keep_last {cfg.keep_versions}" if cfg.staleness == "keep_last"
            else f"half_life {cfg.half_life_versions:g}")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paces = sorted({r["pace"] for r in rows})
    fig, axes = plt.subplots(1, len(paces), figsize=(4.2 * len(paces), 3.4), sharey=True, squeeze=False)
    for ax, pace in zip(axes[0], paces, strict=True):
        for name in POLICIES:
            pts = [r for r in rows if r["pace"] == pace and r["policy"] == name and r["balanced_accuracy"] is not None]
            versions = sorted({r["version"] for r in pts})
            ax.plot(versions, [np.mean([r["balanced_accuracy"] for r in pts if r["version"] == v]) for v in versions],
                    marker="o", ms=3, label=name)
        ax.set_title(f"solver skill +{pace:g} per version", fontsize=9)
        ax.set_xlabel("solver version", fontsize=8)
    axes[0][0].set_ylabel("held-out balanced accuracy (current version)", fontsize=8)
    axes[0][-1].legend(fontsize=6)
    fig.suptitle("primary probe by staleness policy (arith, SYNTHETIC improving solver)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(settings: Settings, data_dir: Path, name: str) -> dict[str, Any]:
    torch.set_num_threads(1)
    started = time.perf_counter()
    boot = bootstrap("arith", data_dir, steps=settings.bootstrap_steps, show_progress=False)
    reference = FrozenReference.load(str(boot.path))
    domain = ArithDomain()
    texts = sorted({domain.reference_text(t) for seed in range(settings.seeds) for t in
                    task_pool(settings.versions * settings.batch + settings.held_out, 1000 * seed + 7)})
    feats = FeatureExtractor(reference).extract(texts, [SPEC])[SPEC]
    features = dict(zip(texts, feats, strict=True))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="staleness_") as tmp:
        for pace in settings.paces:
            for seed in range(settings.seeds):
                rows += scenario(settings, pace, seed, features, reference, Path(tmp))
                log.info("pace %g seed %d done at %.0f s", pace, seed, time.perf_counter() - started)
    summary = summarise(rows)
    data = {"settings": asdict(settings), "solver": "synthetic:arith-logistic (improving per version)",
            "policies": {k: asdict(v) for k, v in POLICIES.items()}, "summary": summary, "rows": rows,
            "total_wall_s": time.perf_counter() - started}
    write_result(name, data)
    plot(rows, RESULTS / f"{name}.png")
    return data


@click.command()
@click.option("--quick", is_flag=True, help="tiny settings: checks the pipeline, not the choice")
@click.option("--seeds", type=int, default=None, help="seeds per pace (default 3)")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".propel"), show_default=True)
@click.option("--name", default="staleness", show_default=True, help="result file name under benchmarks/results")
def main(quick: bool, seeds: int | None, data_dir: Path, name: str) -> None:
    """Score each staleness policy's refreshed probe against the current solver version."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    settings = Settings.quick() if quick else Settings()
    if seeds is not None:
        settings = replace(settings, seeds=seeds)
    summary = run(settings, data_dir, name)["summary"]
    for policy, entry in summary["policies"].items():
        ba, ece = entry["balanced_accuracy"], entry["ece"]
        click.echo(f"{policy:12s} BA {ba if ba is None else round(ba, 3)}  ECE {ece if ece is None else round(ece, 3)}"
                   f"  labels {entry['labels']}  untrainable {entry['untrainable']}")
    click.echo(f"best: {summary['best']} (current default: {summary['current_default']})")


if __name__ == "__main__":
    main()

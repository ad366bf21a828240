"""Utility against solver cost, PROPEL vs solver-in-the-loop RL, out to 300 RL steps (issue #22 item 4).

The toy table stops at 60 GRPO steps, before PROPEL's one-time cost (the labelled corpus that trains
its probe) can amortize. Here each arm trains on the daemon's engine (the toy table's
:func:`benchmarks.toy_propel.open_row`: a run store, the daemon's ``build_engine``) in chunks of
``chunk`` steps to ``steps``, and after every chunk the policy's utility (share of all generations
in band, k = 8 synthetic-solver attempts on a fresh sample — outside every budget) is measured.

Arms: ``PROPEL`` (hard-gate reward on one frozen MLP probe; cost = the corpus's offline trials, paid
once), ``PROPEL + co-evolution`` (the daemon itself: its driver cycle after cycle — RL chunk, sample,
spot-checks, false-positive mining, aux retrain, emission — so its cost also grows with the spot-checks),
``PROPEL (active corpus) + co-evolution`` (the same daemon arm, its primary probe trained on a corpus
labelled actively — the toy table's "PROPEL (active corpus)" probe, built by the same code,
:func:`benchmarks.toy_propel.build_active`, with ``probes.corpus_labelling = "active"`` and
``--active-share`` of the uniform corpus's trials; charged what active labelling spent) and ``SIL``
(reward = in-band indicator of k live attempts; cost grows with every step). ``--arms`` runs a subset. Axes:
cumulative solver trials, and solver-seconds = trials × trial cost + the generator's RL seconds, for
each configured trial cost (1 s ≈ a math answer, 600 s ≈ a SWE agent episode), so a reader sees
where each method wins. The goal (issue #22, reported as measured): at the final horizon PROPEL's lift
per 1,000 solver trials ≥ 3× SIL's; otherwise the horizon where the lines cross is reported.

    .venv/bin/python -m benchmarks.cost_curves             # 3 seeds × 300 steps (~30-60 min here)
    .venv/bin/python -m benchmarks.cost_curves --quick     # checks the pipeline in a few minutes
    .venv/bin/python -m benchmarks.cost_curves --arms "PROPEL (active corpus) + co-evolution,SIL" \
        --name cost_curves_active                          # the active-corpus arm next to SIL only
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import click
import numpy as np
import torch
from sqlalchemy import func, select

from benchmarks import toy_propel as toy
from benchmarks._common import RESULTS, write_result
from curriculum.store.models import SolverTrial
from daemon.loop.progress import Progress
from daemon.ops.metrics import build_metrics
from daemon.service.runtime import ServiceHooks, assemble_driver
from testkit.cost_summary import ACTIVE_ARM, ARMS, parse_arms, summarise

#: the daemon arms (driver cycle after cycle) and the toy row whose probe, members and offline trials they use
COEVOLUTION = {"PROPEL + co-evolution": "PROPEL", ACTIVE_ARM: toy.ACTIVE_ROW}
log = logging.getLogger("benchmarks.cost_curves")


@dataclass(frozen=True)
class Settings:
    seeds: int = 3
    steps: int = 300
    chunk: int = 30
    eval_n: int = 256
    corpus: int = 1536
    batch: int = 16
    group: int = 8
    trial_costs_s: tuple[float, ...] = (1.0, 600.0)
    bootstrap_steps: int | None = None
    active_share: float = 0.4  # the active arm's corpus trials, as a share of the uniform corpus's
    spot_per_hour: int | None = None  # the daemon arms' spotcheck.budget_per_hour (None: the toy table's, 512)

    @staticmethod
    def quick() -> Settings:
        return Settings(seeds=1, steps=4, chunk=2, eval_n=32, corpus=256, batch=8, group=4, bootstrap_steps=60)

    def toy(self) -> toy.Settings:
        """The toy table's settings the shared probes and row configs are built from."""
        return replace(toy.Settings(), seeds=self.seeds, steps=self.steps, corpus=self.corpus, eval_n=self.eval_n,
                       batch=self.batch, group=self.group, bootstrap_steps=self.bootstrap_steps,
                       active_share=self.active_share)


def coevolution_spec(shared: toy.Shared, settings: Settings, arm: str) -> toy.PairSpec:
    """A daemon arm's probe members, offline trials and config overrides: its toy row's
    (:func:`benchmarks.toy_propel.pair_specs`; the active arm's are the active corpus's)."""
    return next(s for s in toy.pair_specs(shared, settings.toy()) if s.names[0] == COEVOLUTION[arm])


def run_daemon(shared: toy.Shared, settings: Settings, root: Path, seed: int,
               arm: str = "PROPEL + co-evolution") -> list[dict[str, float]]:
    """PROPEL as the daemon runs it: its driver, cycle after cycle (RL chunk, sample, spot-checks, aux
    retrain, emission); one point after each RL chunk, its spot-check trials counted."""
    spec = coevolution_spec(shared, settings, arm)
    run = f"coevo-{seed}" if arm == "PROPEL + co-evolution" else toy.run_name(arm, seed)
    cfg = toy.row_config(shared, settings.toy(), root, run, seed, settings.chunk, spec.rl, spec.probes)
    if settings.spot_per_hour is not None:  # a sensitivity run: spot-checks not capped by a wall-clock hour
        cfg = cfg.model_copy(update={"spotcheck": cfg.spotcheck.model_copy(
            update={"budget_per_hour": settings.spot_per_hour})})
    store, run_id, engine = toy.open_row(cfg, shared, spec.members)
    metrics = build_metrics()
    hooks = ServiceHooks(cfg, store, run_id, metrics, Progress())
    driver = assemble_driver(cfg, store, run_id, engine, hooks, toy.never_stop, metrics)
    points, rl_s = [], 0.0
    try:
        while engine.trainer.global_step < settings.steps:
            report = driver.tick()
            if report.phase != "rl":
                continue
            rl_s += report.seconds
            with store.session() as s:
                trials = spec.offline + int(s.scalar(select(func.count()).select_from(SolverTrial)) or 0)
            result = toy.evaluate(engine.sample(settings.eval_n, 100 + seed), seed)
            points.append({"step": float(engine.trainer.global_step), "trials": float(trials),
                           "rl_s": rl_s, "utility": result.utility})
            log.info("%s seed %d step %d: utility %.3f, %d solver trials", arm, seed,
                     engine.trainer.global_step, result.utility, trials)
    finally:
        hooks.close()
        store.dispose()
    return points


def run_arm(shared: toy.Shared, settings: Settings, root: Path, seed: int, arm: str) -> list[dict[str, float]]:
    """Train ``arm`` chunk by chunk on the daemon's engine; one point (step, trials, RL s, utility) per chunk."""
    if arm in COEVOLUTION:
        return run_daemon(shared, settings, root, seed, arm)
    cfg = toy.row_config(shared, settings.toy(), root, f"{arm.lower()}-{seed}", seed, settings.chunk)
    store, _, engine = toy.open_row(cfg, shared, ["mlp"])
    sil = toy.sil_reward(settings.group)
    if arm == "SIL":
        toy.train_on(engine, sil)
    offline = shared.corpus_trials if arm == "PROPEL" else 0
    points, rl_s, step = [], 0.0, 0
    try:
        while step < settings.steps:
            started = time.perf_counter()
            engine.rl_chunk(min(settings.chunk, settings.steps - step), toy.never_stop, 1.0)
            rl_s += time.perf_counter() - started
            step = engine.trainer.global_step
            result = toy.evaluate(engine.sample(settings.eval_n, 100 + seed), seed)
            points.append({"step": float(step), "trials": float(offline + sil.solver_trials), "rl_s": rl_s,
                           "utility": result.utility})
            log.info("%s seed %d step %d: utility %.3f, %d solver trials", arm, seed, step, result.utility,
                     offline + sil.solver_trials)
    finally:
        store.dispose()
    return points


def plot(summary: dict[str, Any], trial_costs: tuple[float, ...], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 + len(trial_costs), figsize=(4.2 * (2 + len(trial_costs)), 3.4))
    for arm, entry in summary["arms"].items():
        mean, std = np.array(entry["utility_mean"]), np.array(entry["utility_std"])
        xs = [np.array(entry["step"]), np.array(entry["trials"])]
        xs += [np.array(entry["solver_seconds"][str(c)]) for c in trial_costs]
        for ax, x in zip(axes, xs, strict=True):
            ax.plot(x, mean, marker="o", ms=3, label=arm)
            ax.fill_between(x, mean - std, mean + std, alpha=0.2)
    titles = ["GRPO step", "cumulative solver trials"]
    titles += [f"solver-seconds (trial = {c:g} s) + RL s" for c in trial_costs]
    for i, (ax, title) in enumerate(zip(axes, titles, strict=True)):
        ax.axhline(summary["base_utility"], color="gray", ls="--", lw=1, label="base")
        if i > 0:
            ax.set_xscale("log")
        ax.set_xlabel(title, fontsize=8)
        ax.set_ylabel("utility (in-band share)", fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle("PROPEL vs SIL: utility against solver cost (arith, SYNTHETIC solver, mean ± std over seeds)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(settings: Settings, data_dir: Path, name: str, arms: tuple[str, ...] = ARMS) -> dict[str, Any]:
    torch.set_num_threads(1)
    started = time.perf_counter()
    curves: dict[str, list[list[dict[str, float]]]] = {arm: [] for arm in arms}
    base: list[float] = []
    with tempfile.TemporaryDirectory(prefix="cost_curves_") as tmp:
        # the active arm's probe: the toy table's active-corpus probe, labelled by the daemon's active code
        shared = toy.build_shared(settings.toy(), data_dir,
                                  active_root=Path(tmp) / "active" if ACTIVE_ARM in arms else None)
        for seed in range(settings.seeds):
            base.append(float(toy.run_base(shared, settings.toy(), seed)["utility"]))
            for arm in arms:
                curves[arm].append(run_arm(shared, settings, Path(tmp), seed, arm))
            click.echo(f"seed {seed} done at {time.perf_counter() - started:.0f}s")
    summary = summarise(curves, base, settings.trial_costs_s)
    data = {"settings": asdict(settings), "arms": list(arms), "solver": toy.benchmark_solver().solver_id,
            "corpus_solver_trials": shared.corpus_trials, "summary": summary, "curves": curves,
            "base_per_seed": base, "total_wall_s": time.perf_counter() - started,
            **({"active_corpus": shared.active.info} if shared.active is not None else {})}
    write_result(name, data)
    plot(summary, settings.trial_costs_s, RESULTS / f"{name}.png")
    return data


@click.command()
@click.option("--quick", is_flag=True, help="tiny settings: checks the pipeline, not the goal")
@click.option("--seeds", type=int, default=None, help="number of seeds (default 3)")
@click.option("--steps", type=int, default=None, help="GRPO steps per arm (default 300)")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".propel"), show_default=True)
@click.option("--name", default="cost_curves", show_default=True, help="result file name under benchmarks/results")
@click.option("--arms", default=",".join(ARMS), show_default=True, help="comma-separated arms to run")
@click.option("--active-share", type=click.FloatRange(0, 1, min_open=True), default=None,
              help=f"{ACTIVE_ARM}: its corpus's solver trials as a share of the uniform corpus's (default 0.4)")
@click.option("--spot-per-hour", type=click.IntRange(0), default=None,
              help="the co-evolution arms' spotcheck.budget_per_hour in tasks (default the toy table's 512; these "
                   "runs are shorter than an hour, so a large value lets spot-checks go on every cycle)")
def main(quick: bool, seeds: int | None, steps: int | None, data_dir: Path, name: str, arms: str,
         active_share: float | None, spot_per_hour: int | None) -> None:
    """Utility vs solver trials and solver-seconds, PROPEL vs SIL, on the daemon's engine."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    chosen = parse_arms(arms)
    settings = Settings.quick() if quick else Settings()
    overrides: dict[str, Any] = {k: v for k, v in (("seeds", seeds), ("steps", steps), ("active_share", active_share),
                                                   ("spot_per_hour", spot_per_hour)) if v is not None}
    settings = replace(settings, **overrides)
    for arm, goal in run(settings, data_dir, name, chosen)["summary"].get("goal", {}).items():
        click.echo(f"{arm}/SIL lift per solver trial at step {settings.steps}: "
                   f"{goal['vs_sil_lift_per_trial_final']} (goal ≥ 3; {goal['note'] or 'measured'}); passes SIL "
                   f"at step {goal['first_step_per_trial_at_least_sil']}, 3× SIL at step "
                   f"{goal['first_step_per_trial_at_least_target_x_sil']}")


if __name__ == "__main__":
    main()

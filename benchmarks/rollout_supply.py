"""Emission supply of the default daemon with and without the RL chunk's rollouts as candidates (#35).

Runs ``propel run --cycles N --no-api`` (the product's CLI, the embedded defaults: arith, the bootstrapped
tiny generator, SQLite, in-process synthetic spot-checks) once per (arm, seed), arms side by side in one
run: ``daemon.emit_rollouts = true`` (the default) and ``false``. The bootstrap is shared (one cache), each
run has its own store. From each store it reads the per-cycle metrics the daemon records: tasks emitted,
sampled and taken from the RL chunk, and the seconds of each phase (their sum is the cycle's time).

Usage: ``python -m benchmarks.rollout_supply [--cycles 12] [--seeds 2]``. Results:
``benchmarks/results/rollout_supply.json`` + ``.png``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, write_result

ARMS = {"rollouts": True, "sample_only": False}
PHASES = ("rl", "sample", "spotcheck", "retrain", "emit")


def run_daemon(workdir: Path, data_dir: Path, seed: int, rollouts: bool, cycles: int) -> dict[str, list[float]]:
    """One ``propel run`` for ``cycles`` cycles; its per-cycle metrics (name → values in cycle order)."""
    workdir.mkdir(parents=True, exist_ok=True)
    db = f"sqlite:///{workdir / 'propel.db'}"
    config = workdir / "propel.toml"
    config.write_text(f'data_dir = "{data_dir}"\nrun_name = "supply"\nseed = {seed}\n[store]\nurl = "{db}"\n'
                      f"[daemon]\nemit_rollouts = {str(rollouts).lower()}\n")
    env = {**os.environ, "PROPEL_CONFIG": str(config), "PYTHONUNBUFFERED": "1"}
    with (workdir / "propel.log").open("w") as log:
        proc = subprocess.run([sys.executable, "-m", "daemon.cli.main", "run", "--cycles", str(cycles), "--no-api"],
                              env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"propel run failed ({proc.returncode}): {(workdir / 'propel.log').read_text()[-2000:]}")
    return {**read_metrics(db), **emitted_quality(db)}


def emitted_quality(db: str) -> dict[str, list[float]]:
    """The exact P(in band) under the run's synthetic solver of each emitted task, by origin (the RL
    chunk's rollouts or the sample), and of every valid task stored (unfiltered)."""
    from sqlalchemy import select

    from curriculum.solvers.synthetic import SyntheticArithSolver
    from curriculum.store.db import Store
    from curriculum.store.models import QueueItem, TaskRow
    from testkit.follow_trainer import in_band_probability

    solver, store = SyntheticArithSolver(), Store(db)
    try:
        with store.session() as s:
            emitted = set(s.scalars(select(QueueItem.task_id)))
            tasks = s.execute(select(TaskRow.id, TaskRow.text, TaskRow.payload).where(TaskRow.valid)).all()
    finally:
        store.dispose()
    out: dict[str, list[float]] = {"p_in_band_valid": [], "p_in_band_emitted_rollout": [],
                                   "p_in_band_emitted_sample": []}
    for task_id, text, payload in tasks:
        p = in_band_probability(solver, text)
        out["p_in_band_valid"].append(p)
        if task_id in emitted:
            origin = "rollout" if payload.get("generator") == "rl_rollout" else "sample"
            out[f"p_in_band_emitted_{origin}"].append(p)
    return out


def read_metrics(db: str) -> dict[str, list[float]]:
    from sqlalchemy import select

    from curriculum.store.db import Store
    from curriculum.store.models import MetricPoint

    store = Store(db)
    try:
        with store.session() as s:
            rows = s.execute(select(MetricPoint.name, MetricPoint.cycle, MetricPoint.value)
                             .order_by(MetricPoint.cycle)).all()
    finally:
        store.dispose()
    out: dict[str, dict[int, float]] = {}
    for name, cycle, value in rows:
        out.setdefault(name, {})[cycle] = value
    return {name: [by_cycle[c] for c in sorted(by_cycle)] for name, by_cycle in out.items()}


def summarise(metrics: dict[str, list[float]]) -> dict[str, float | None]:
    """Per cycle: emitted, sampled, rollouts, cycle seconds; emitted per daemon second over the run."""
    cycles = len(metrics.get("emitted", []))
    seconds = [sum(metrics.get(f"{p}_seconds", [0.0] * cycles)[i] for p in PHASES) for i in range(cycles)]
    emitted = sum(metrics.get("emitted", []))
    return {"cycles": cycles, "emitted_per_cycle": emitted / max(1, cycles),
            "sampled_per_cycle": sum(metrics.get("sampled", [])) / max(1, cycles),
            "rollouts_per_cycle": sum(metrics.get("rollouts", [])) / max(1, cycles),
            "cycle_s": sum(seconds) / max(1, cycles), "emitted_per_s": emitted / max(1e-9, sum(seconds)),
            "validity": sum(metrics.get("validity", [])) / max(1, len(metrics.get("validity", []))),
            **{k: sum(v) / len(v) if v else None for k, v in metrics.items() if k.startswith("p_in_band")},
            "emitted_rollout": len(metrics.get("p_in_band_emitted_rollout", []))}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=12, help="cycles per daemon run (default %(default)s)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds, each run in both arms (default %(default)s)")
    parser.add_argument("--data-dir", type=Path, default=Path(".propel"),
                        help="where the bootstrap is cached (default: the embedded default's, %(default)s)")
    args = parser.parse_args(argv)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="propel-supply-") as tmp:
        for seed in range(args.seeds):
            for arm, on in ARMS.items():
                metrics = run_daemon(Path(tmp) / f"{arm}-{seed}", args.data_dir.resolve(), seed, on, args.cycles)
                per_cycle = {k: v for k, v in metrics.items() if not k.startswith("p_in_band")}  # per task: summarised
                runs.append({"arm": arm, "seed": seed, "summary": summarise(metrics), "metrics": per_cycle})
                print(f"{arm} seed {seed}: {runs[-1]['summary']}", flush=True)
    result = {"cycles": args.cycles, "seeds": args.seeds, "runs": runs, "paired": paired(runs)}
    write_result("rollout_supply", result)
    plot(runs)
    return result


def paired(runs: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per seed: the rollouts arm's emitted per cycle and per second over the sample-only arm's."""
    by = {(r["arm"], r["seed"]): r["summary"] for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    return {key: [by[("rollouts", s)][key] / max(1e-9, by[("sample_only", s)][key]) for s in seeds]
            for key in ("emitted_per_cycle", "emitted_per_s", "cycle_s")}


def plot(runs: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
    for r in runs:
        style = "-" if r["arm"] == "rollouts" else "--"
        ax.plot(r["metrics"].get("emitted", []), style, label=f"{r['arm']} s{r['seed']}")
    ax.set_xlabel("cycle")
    ax.set_ylabel("tasks emitted")
    ax.legend(fontsize=7)
    labels = [f"{r['arm']}\ns{r['seed']}" for r in runs]
    bx.bar(range(len(runs)), [r["summary"]["emitted_per_s"] for r in runs])
    bx.set_xticks(range(len(runs)), labels, fontsize=7)
    bx.set_ylabel("tasks emitted per daemon second")
    fig.suptitle("default daemon: the RL chunk's rollouts as candidates, on and off", fontsize=9)
    fig.savefig(RESULTS / "rollout_supply.png", dpi=120)


if __name__ == "__main__":
    main()

"""Spot-check throughput with 1 vs 2 Celery worker processes, and the pipeline's per-trial overhead.

The solver is the synthetic arith solver behind a fixed artificial latency per request, so the
measure is the pipeline (broker, worker, grading, idempotent PostgreSQL writes), not this
machine's CPU. Both arms run in the same invocation on the same tasks. Needs PostgreSQL and Redis.

    python benchmarks/spotcheck_scaling.py [--tasks 48] [--latency-s 0.25] [--k 8]
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

from sqlalchemy import delete, func, select

from benchmarks._common import RESULTS, scratch_postgres, write_result
from curriculum.common.solver_api import Sampling
from curriculum.domains.arith import ArithDomain, random_expression
from curriculum.solvers import DelayedSolver, build_solver
from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import SolverTrial
from workers.local import start_worker, stop

REDIS = "redis://127.0.0.1:6379/14"


def make_tasks(store: Store, n: int) -> list[int]:
    dom, rng = ArithDomain(), random.Random(1)
    seen: set[str] = set()
    new: list[repo.NewTask] = []
    while len(new) < n:
        v = dom.check(dom.parse(random_expression(rng, rng.randint(1, 6))).task)  # type: ignore[arg-type]
        if v.valid and v.task.content_hash not in seen:
            seen.add(v.task.content_hash)
            new.append(repo.NewTask("arith", v.task.content_hash, v.task.text, True, v.task.payload))
    with store.session() as s:
        return repo.add_tasks(s, None, new)


def write_config(folder: Path, pg_url: str, run: str, latency_s: float) -> Path:
    path = folder / f"{run}.toml"
    path.write_text(f'run_name = "{run}"\ndata_dir = "{folder}"\n[store]\nurl = "{pg_url}"\n'
                    f'[broker]\nurl = "{REDIS}"\n[solver]\nbackend = "synthetic"\n'
                    f"artificial_latency_s = {latency_s}\n")
    return path


def trial_count(store: Store) -> int:
    with store.session() as s:
        return int(s.execute(select(func.count()).select_from(SolverTrial)).scalar_one())


def wait_ready(n_workers: int, timeout_s: float = 60) -> None:
    from workers.app import app

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(app.control.ping(timeout=0.5) or []) >= n_workers:
            return
    raise TimeoutError(f"{n_workers} workers did not answer ping within {timeout_s} s")


def run_arm(store: Store, pg_url: str, ids: list[int], n_workers: int, k: int, latency_s: float,
            folder: Path) -> float:
    """Wall seconds from dispatch to the last trial row, with ``n_workers`` single-process workers."""
    from daemon.config import load_config
    from daemon.service.settings import worker_settings
    from workers import runtime
    from workers.app import configure_app
    from workers.tasks import dispatch_spotchecks

    with store.session() as s:
        s.execute(delete(SolverTrial))
    cfg = write_config(folder, pg_url, f"bench{uuid.uuid4().hex[:6]}", latency_s)
    settings = worker_settings(load_config(cfg))
    runtime.configure(settings)
    configure_app(settings)
    procs = [start_worker(cfg, folder / f"w{i}.log", concurrency=1) for i in range(n_workers)]
    try:
        wait_ready(n_workers)
        start = time.perf_counter()
        dispatch_spotchecks(ids, k, build_solver("synthetic").solver_id, settings.run_name, batch_size=1)
        while trial_count(store) < len(ids) * k:
            time.sleep(0.02)
        return time.perf_counter() - start
    finally:
        for p in procs:
            stop(p)


def bare_solver_seconds(store: Store, ids: list[int], k: int, latency_s: float) -> float:
    """The same solver calls, one per task, with no broker, grading or store: the floor."""
    dom = ArithDomain()
    solver = DelayedSolver(build_solver("synthetic"), latency_s)
    from curriculum.domains.base import Task
    from curriculum.store.models import TaskRow

    with store.session() as s:
        tasks = [Task("arith", r.text, dict(r.payload)) for r in s.scalars(select(TaskRow).where(TaskRow.id.in_(ids)))]
    start = time.perf_counter()
    for t in tasks:
        solver.generate([dom.solver_prompt(t)], k, Sampling())
    return time.perf_counter() - start


def plot(result: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    arms = ["bare solver\n(1 process)", "1 worker", "2 workers"]
    vals = [result["bare_trials_per_s"], result["one_worker_trials_per_s"], result["two_workers_trials_per_s"]]
    ax.bar(arms, vals, color=["#999", "#4c72b0", "#55a868"])
    ax.set_ylabel("trials / s")
    ax.set_title(f"spot-check throughput (scaling {result['scaling_ratio']:.2f}×)")
    for i, v in enumerate(vals):
        ax.text(i, v, f"{v:.1f}", ha="center", va="bottom")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=48)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--latency-s", type=float, default=0.25)
    args = ap.parse_args()
    with scratch_postgres() as url, TemporaryDirectory() as tmp:
        store = Store(url)
        ids = make_tasks(store, args.tasks)
        bare = bare_solver_seconds(store, ids, args.k, args.latency_s)
        one = run_arm(store, url, ids, 1, args.k, args.latency_s, Path(tmp))
        two = run_arm(store, url, ids, 2, args.k, args.latency_s, Path(tmp))
        store.dispose()
    trials = args.tasks * args.k
    result = {
        "tasks": args.tasks, "k": args.k, "latency_s_per_request": args.latency_s, "trials": trials,
        "bare_seconds": bare, "one_worker_seconds": one, "two_workers_seconds": two,
        "bare_trials_per_s": trials / bare, "one_worker_trials_per_s": trials / one,
        "two_workers_trials_per_s": trials / two, "scaling_ratio": one / two,
        "overhead_ms_per_trial": 1000 * (one - bare) / trials,
        "overhead_ms_per_task_message": 1000 * (one - bare) / args.tasks,
    }
    write_result("spotcheck_scaling", result)
    plot(result, RESULTS / "spotcheck_scaling.png")
    print(f"bare solver : {result['bare_trials_per_s']:.1f} trials/s")
    print(f"1 worker    : {result['one_worker_trials_per_s']:.1f} trials/s")
    print(f"2 workers   : {result['two_workers_trials_per_s']:.1f} trials/s  → scaling {result['scaling_ratio']:.2f}×")
    print(f"pipeline overhead: {result['overhead_ms_per_trial']:.2f} ms/trial "
          f"({result['overhead_ms_per_task_message']:.1f} ms per task message)")


if __name__ == "__main__":
    main()

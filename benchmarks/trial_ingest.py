"""Trial ingest on PostgreSQL: 100,000 solver-trial rows through ``repo.add_trials`` (idempotent
``INSERT … ON CONFLICT DO NOTHING … RETURNING``), at several transaction sizes, plus a replay of
the whole set (every row a conflict) to show that idempotency costs little and inserts nothing.

    python -m benchmarks.trial_ingest [--trials 100000] [--k 8] [--batches 100,1000,10000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, scratch_postgres, write_result


def seed_tasks(url: str, n: int) -> list[int]:
    from sqlalchemy import text

    from curriculum.store.db import Store

    store = Store(url)
    with store.engine.begin() as conn:
        conn.execute(text("TRUNCATE solver_trials, tasks RESTART IDENTITY CASCADE"))
        conn.execute(text("INSERT INTO tasks (domain, content_hash, text, payload, valid, created_at) "
                          "SELECT 'arith', md5(g::text), g::text, '{}', true, now() FROM generate_series(1, :n) g"),
                     {"n": n})
        ids = [int(r[0]) for r in conn.execute(text("SELECT id FROM tasks ORDER BY id"))]
    store.dispose()
    return ids


def trials_for(task_ids: list[int], k: int) -> list[Any]:
    from curriculum.store.repo import NewTrial

    return [NewTrial(t, "synthetic:bench", a, ("pass", "fail", "null")[(t + a) % 3], answer=str(t * a),
                     latency_s=0.01) for t in task_ids for a in range(k)]


def ingest(url: str, trials: list[Any], batch: int) -> dict[str, float]:
    """Insert ``trials`` in transactions of ``batch`` rows; returns rows, seconds, rows/s."""
    from curriculum.store import repo
    from curriculum.store.db import Store

    store = Store(url)
    t0 = time.perf_counter()
    inserted = 0
    for i in range(0, len(trials), batch):
        with store.session() as s:
            inserted += repo.add_trials(s, trials[i:i + batch])
    seconds = time.perf_counter() - t0
    store.dispose()
    return {"rows": len(trials), "inserted": inserted, "seconds": seconds, "rows_per_s": len(trials) / seconds}


def run(url: str, n_trials: int, k: int, batches: list[int]) -> dict[str, dict[str, float]]:
    res: dict[str, dict[str, float]] = {}
    trials: list[Any] = []
    for batch in batches:
        trials = trials_for(seed_tasks(url, n_trials // k), k)
        res[f"batch_{batch}"] = ingest(url, trials, batch)
        print(f"batch {batch:6d}: {res[f'batch_{batch}']['rows_per_s']:9.0f} rows/s "
              f"({res[f'batch_{batch}']['inserted']:.0f} inserted)")
    res["replay_batch_1000"] = ingest(url, trials, 1000)  # all conflicts: idempotent no-ops
    print(f"replay      : {res['replay_batch_1000']['rows_per_s']:9.0f} rows/s "
          f"({res['replay_batch_1000']['inserted']:.0f} inserted)")
    return res


def plot(res: dict[str, dict[str, float]], path: Path, n_trials: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    names = list(res)
    ax.bar(names, [res[x]["rows_per_s"] for x in names], color=["#4c72b0"] * (len(names) - 1) + ["#999"])
    ax.set_ylabel("trial rows / s")
    ax.set_title(f"{n_trials:,} trials into PostgreSQL via repo.add_trials")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--batches", default="100,1000,10000")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    with scratch_postgres() as url:
        res = run(url, args.trials, args.k, batches)
    assert all(r["inserted"] == args.trials for name, r in res.items() if name.startswith("batch_"))
    assert res["replay_batch_1000"]["inserted"] == 0
    write_result("trial_ingest", {"trials": args.trials, "k": args.k, "arms": res,
                                  "note": "single process, shared 2-core machine, PostgreSQL 15 on localhost"})
    plot(res, RESULTS / "trial_ingest.png", args.trials)


if __name__ == "__main__":
    main()

"""What putting the API first costs the training: RL chunks per minute of a ``propel run`` with its API
idle, paced or saturated.

For each arm of ``[api]`` settings (``--arms``; default ``no_yield``: ``yield_to_api = false`` and
``yield``: ``yield_to_api = true``, both at ``work_nice = 0``; ``nice10`` is also known), one ``propel
run`` (the e2e tests' small CPU daemon, tiny bootstrapped arith generator, API on — the ``http_in_run``
daemon of ``queue_throughput``) trains while, in alternating windows of ``--window`` seconds, its API is
idle, *paced* (4 consumer processes each leasing and acking a batch of 64, then pausing ``--pace``
seconds: a trainer that works between its pulls) or *saturated* (the same consumers without pauses).
Counted from the run's stored phase metrics (``rl_seconds`` rows, stamped when the phase ends): RL
chunks finished per minute and their mean duration, per window kind; plus the API's tasks/s.

    python -m benchmarks.api_priority [--window 60] [--repeats 2] [--arms no_yield yield] [--pace 1.0]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, scratch_postgres, write_result
from benchmarks.queue_throughput import start_http_arm, stop, yielded_seconds
from testkit.queue_load import RUN, run_id_of, seed

CONSUMERS, BATCH = 4, 64
ARMS: dict[str, dict[str, Any]] = {"no_yield": {"work_nice": 0, "yield_to_api": False},
                                   "yield": {"work_nice": 0, "yield_to_api": True},
                                   "nice10": {"work_nice": 10, "yield_to_api": False}}
KINDS = ("idle", "paced", "saturated")


def consume_for(base: str, seconds: float, out: Any, start: Any, pace: float = 0.0) -> None:
    """Lease and ack batches through the client until ``seconds`` after the start barrier, pausing
    ``pace`` seconds after each batch."""
    from propel_sdk.client import Ack, PropelClient

    done = 0
    with PropelClient(base) as client:
        client.status()
        start.wait()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            leased = client.lease(BATCH, 600, "bench")
            if leased:
                client.ack_many([Ack(x, 1, 8, "bench") for x in leased])
            done += len(leased)
            if pace:
                time.sleep(pace)
    out.put(done)


def saturate(api: str, seconds: float, pace: float = 0.0) -> tuple[float, datetime]:
    """``CONSUMERS`` processes on the API for ``seconds`` (pausing ``pace`` s between batches); returns
    tasks/s and when the load started."""
    ctx = mp.get_context("spawn")
    out, start = ctx.Queue(), ctx.Barrier(CONSUMERS + 1)
    procs = [ctx.Process(target=consume_for, args=(api, seconds, out, start, pace)) for _ in range(CONSUMERS)]
    for p in procs:
        p.start()
    start.wait(timeout=300)
    t0 = datetime.now(UTC)
    done = sum(out.get(timeout=seconds + 300) for _ in procs)
    for p in procs:
        p.join()
    return done / seconds, t0


def rl_chunks(url: str, since: datetime, until: datetime) -> list[float]:
    """Durations of the RL chunks of the run that ended in ``[since, until)``."""
    from sqlalchemy import select

    from curriculum.store.db import Store
    from curriculum.store.models import MetricPoint, Run

    store = Store(url)
    try:
        with store.session() as s:
            return list(s.scalars(select(MetricPoint.value).join(Run, Run.id == MetricPoint.run_id).where(
                Run.name == RUN, MetricPoint.name == "rl_seconds", MetricPoint.at >= since,
                MetricPoint.at < until)))
    finally:
        store.dispose()


def window(url: str, api: str | None, seconds: float, pace: float = 0.0) -> dict[str, Any]:
    """One window: idle (``api`` None), paced or saturated; RL chunks finished in it."""
    t0 = datetime.now(UTC)
    rate: float | None = None
    if api is None:
        time.sleep(seconds)
    else:
        rate, t0 = saturate(api, seconds, pace)  # the window starts once the consumers are connected
    t1 = datetime.now(UTC)
    got = rl_chunks(url, t0, t1)
    return {"rl_chunks": len(got), "rl_seconds": got, "api_tasks_per_s": rate, "seconds": (t1 - t0).total_seconds()}


def measure(url: str, work: Path, gen: Path, arm: str, args: argparse.Namespace) -> dict[str, Any]:
    daemon, api = start_http_arm(url, "http_in_run", work, gen, ARMS[arm])
    windows: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    try:
        run_id = run_id_of(url)
        for rep in range(args.repeats):
            for i, kind in enumerate(KINDS):
                if kind != "idle":  # more than 4 consumers can take in a window
                    seed(url, int(args.window * 5000), run_id, 1 + (rep * len(KINDS) + i) * 10**6)
                w = window(url, api if kind != "idle" else None, args.window, args.pace if kind == "paced" else 0)
                windows[kind].append(w)
                print(f"{arm:8s} {kind:9s} rl chunks {w['rl_chunks']:3d}  "
                      f"api {w['api_tasks_per_s'] or 0:7.0f} tasks/s", flush=True)
        yielded = yielded_seconds(api)
    finally:
        stop(daemon)
    return {**{kind: summary(ws) for kind, ws in windows.items()}, "training_yielded_s": yielded}


def summary(ws: list[dict[str, Any]]) -> dict[str, Any]:
    durations = [d for w in ws for d in w["rl_seconds"]]
    rates = [w["api_tasks_per_s"] for w in ws if w["api_tasks_per_s"] is not None]
    return {"rl_chunks_per_min": 60 * sum(w["rl_chunks"] for w in ws) / sum(w["seconds"] for w in ws),
            "rl_chunk_mean_s": statistics.fmean(durations) if durations else None,
            "api_tasks_per_s": statistics.fmean(rates) if rates else None,
            "windows": [{k: v for k, v in w.items() if k != "rl_seconds"} for w in ws]}


def plot(res: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    labels = [f"{arm}\n{kind}" for arm in res for kind in KINDS]
    ax.bar(labels, [res[arm][kind]["rl_chunks_per_min"] for arm in res for kind in KINDS],
           color=["#4c72b0", "#dd8452", "#c44e52"] * len(res))
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylabel("RL chunks / min")
    ax.set_title(f"training under API load ({CONSUMERS}×{BATCH} lease+ack), {os.cpu_count()} CPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--window", type=float, default=60.0, help="seconds per idle / saturated window")
    ap.add_argument("--repeats", type=int, default=2, help="idle, paced and saturated windows per arm")
    ap.add_argument("--arms", nargs="+", default=["no_yield", "yield"], choices=sorted(ARMS),
                    help="[api] settings to compare (see ARMS)")
    ap.add_argument("--pace", type=float, default=1.0, help="seconds each consumer pauses after a batch (paced)")
    args = ap.parse_args()
    from curriculum.rl.bootstrap import bootstrap

    gen = bootstrap("arith", data_dir=RESULTS.parent / ".cache", steps=300, show_progress=False).path
    load = {"start": os.getloadavg()}
    res: dict[str, dict[str, Any]] = {}
    for arm in args.arms:
        with scratch_postgres() as url, tempfile.TemporaryDirectory() as tmp:
            res[arm] = measure(url, Path(tmp), gen, arm, args)
    load["end"] = os.getloadavg()
    cost = {arm: {kind: (r[kind]["rl_chunks_per_min"] / r["idle"]["rl_chunks_per_min"] - 1
                         if r["idle"]["rl_chunks_per_min"] else None) for kind in KINDS[1:]}
            for arm, r in res.items()}
    write_result("api_priority", {"window_s": args.window, "repeats": args.repeats, "consumers": CONSUMERS,
                                  "batch": BATCH, "pace_s": args.pace, "benchmark_nice": os.nice(0),
                                  "arms": {arm: ARMS[arm] for arm in args.arms}, "load_average_1_5_15": load,
                                  "by_arm": res, "rl_rate_change_vs_idle": cost})
    plot(res, RESULTS / "api_priority.png")
    print(cost)


if __name__ == "__main__":
    main()

"""Soak: N mini-cycles of the daemon's phase driver on a real store, watching resident memory,
open file descriptors and database connections.

The driver (:class:`daemon.loop.driver.Driver`), the store, the in-process spot-check pipeline and the
synthetic solver are real; the generator engine is the hand-written fake from
``tests/integration/test_driver.py::FakeEngine`` (random arith samples, a fixed "probe") so a cycle
costs milliseconds, not GRPO steps. This measures leaks in the daemon's own loop, not in TRL/torch.

    python -m benchmarks.soak [--cycles 1000] [--warmup 100] [--db postgresql|sqlite]
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, scratch_postgres, write_result

PHASES_PER_CYCLE = 5


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() / 2**20


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def db_connections(store: Any) -> int:
    """Server-side connections to this database (PostgreSQL), or the pool's checked-in count (SQLite)."""
    from sqlalchemy import text

    if store.dialect != "postgresql":
        return int(store.engine.pool.checkedin())
    with store.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"))
                   .scalar_one())


def build_driver(store: Any) -> Any:
    """The integration tests' driver (fake engine, real store and spot-checks), retrains off."""
    from daemon.ops.metrics import build_metrics
    from probes.band import Band
    from tests.integration.test_driver import make_driver

    driver, _ = make_driver(store, Path(tempfile.gettempdir()), run_name="soak", sample_size=16,
                            band=Band(8, 1, 3, 6), budget_per_cycle=4, budget_per_hour=10**9,
                            retrain_min_false_positives=10**9, diversity_sample_size=16, probe_arch="mlp")
    driver.metrics = build_metrics()  # the Prometheus export runs every phase, as in `propel run`
    return driver


def soak(store: Any, cycles: int, warmup: int, every: int = 10) -> dict[str, Any]:
    """Run ``cycles`` full cycles; sample RSS/fds/connections every ``every`` cycles after ``warmup``."""
    driver = build_driver(store)
    samples: list[dict[str, float]] = []
    t0 = time.perf_counter()
    for cycle in range(1, cycles + 1):
        for _ in range(PHASES_PER_CYCLE):
            driver.tick()
        if (cycle >= warmup and (cycle - warmup) % every == 0) or cycle == cycles:
            gc.collect()
            samples.append({"cycle": cycle, "rss_mib": rss_mib(), "fds": open_fds(),
                            "db_connections": db_connections(store), "seconds": time.perf_counter() - t0})
    base, last = samples[0], samples[-1]
    return {"cycles": cycles, "warmup": warmup, "seconds": time.perf_counter() - t0,
            "cycles_per_s": cycles / (time.perf_counter() - t0),
            "rss_warm_mib": base["rss_mib"], "rss_end_mib": last["rss_mib"],
            "rss_growth_ratio": (last["rss_mib"] - base["rss_mib"]) / base["rss_mib"],
            "fds_range": [min(s["fds"] for s in samples), max(s["fds"] for s in samples)],
            "db_connections_range": [min(s["db_connections"] for s in samples),
                                     max(s["db_connections"] for s in samples)],
            "final_cycle": driver.state()[1], "samples": samples}


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [s["cycle"] for s in res["samples"]]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.plot(xs, [s["rss_mib"] for s in res["samples"]], color="#4c72b0")
    a.set_xlabel("cycle")
    a.set_ylabel("resident memory (MiB)")
    b.plot(xs, [s["fds"] for s in res["samples"]], label="open fds")
    b.plot(xs, [s["db_connections"] for s in res["samples"]], label="DB connections")
    b.set_xlabel("cycle")
    b.legend()
    fig.suptitle(f"driver soak: {res['cycles']} cycles ({res['db']}, fake engine)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--db", choices=["postgresql", "sqlite"], default="postgresql")
    args = ap.parse_args()
    from curriculum.store.db import Store

    if args.db == "postgresql":
        with scratch_postgres() as url:
            store = Store(url)
            res = soak(store, args.cycles, args.warmup, every=max(1, args.cycles // 100))
            store.dispose()
    else:
        from migrations import upgrade

        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/soak.db"
            upgrade(url)
            store = Store(url)
            res = soak(store, args.cycles, args.warmup, every=max(1, args.cycles // 100))
            store.dispose()
    res["db"] = args.db
    res["engine"] = "tests/integration/test_driver.py::FakeEngine (no model); real driver, store, spot-checks"
    print(f"{res['cycles']} cycles in {res['seconds']:.0f} s; RSS {res['rss_warm_mib']:.1f} → "
          f"{res['rss_end_mib']:.1f} MiB ({100 * res['rss_growth_ratio']:+.1f}%), fds {res['fds_range']}, "
          f"DB connections {res['db_connections_range']}")
    write_result("soak", res)
    plot(res, RESULTS / "soak.png")


if __name__ == "__main__":
    main()

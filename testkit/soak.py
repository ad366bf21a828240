"""The soak measurement (used by ``benchmarks/soak.py`` and the short soak test): N mini-cycles of the
real phase driver with the fake engine, sampling resident memory, open file descriptors and
server-side database connections."""

from __future__ import annotations

import gc
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from daemon.service.heap import rss_mib

PHASES_PER_CYCLE = 5


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
    from testkit.driver import make_driver

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

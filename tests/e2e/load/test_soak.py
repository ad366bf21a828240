"""Soak (short form): 80 mini-cycles of the real phase driver on PostgreSQL — resident memory grows
< 10 % after a 20-cycle warm-up; open file descriptors and server-side DB connections stay flat.

The engine is the hand-written fake of ``testkit/driver.py`` (no model); driver,
store and in-process spot-checks are real. The 1,000-cycle run is ``python -m benchmarks.soak``
(``benchmarks/results/soak.json``)."""

from __future__ import annotations

import pytest

from curriculum.store.db import Store
from testkit.soak import soak

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CYCLES, WARMUP = 80, 20


def test_driver_soak_is_flat(pg_store: Store) -> None:
    res = soak(pg_store, CYCLES, WARMUP, every=10)
    print(f"soak: {CYCLES} cycles in {res['seconds']:.0f} s, RSS {res['rss_warm_mib']:.1f} → "
          f"{res['rss_end_mib']:.1f} MiB, fds {res['fds_range']}, DB connections {res['db_connections_range']}")
    assert res["final_cycle"] == CYCLES
    assert res["rss_growth_ratio"] < 0.10
    lo, hi = res["fds_range"]
    assert hi - lo <= 2, res["samples"]
    lo, hi = res["db_connections_range"]
    assert hi - lo <= 1 and hi <= 6, res["samples"]

"""Soak: N mini-cycles of the daemon's phase driver on a real store, watching resident memory,
open file descriptors and database connections.

The driver (:class:`daemon.loop.driver.Driver`), the store, the in-process spot-check pipeline and the
synthetic solver are real; the generator engine is the hand-written fake from
``testkit/driver.py::FakeEngine`` (random arith samples, a fixed "probe") so a cycle
costs milliseconds, not GRPO steps. This measures leaks in the daemon's own loop, not in TRL/torch.

    python -m benchmarks.soak [--cycles 1000] [--warmup 100] [--db postgresql|sqlite]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, scratch_postgres, write_result
from testkit.soak import soak


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
    res["engine"] = "testkit/driver.py::FakeEngine (no model); real driver, store, spot-checks"
    print(f"{res['cycles']} cycles in {res['seconds']:.0f} s; RSS {res['rss_warm_mib']:.1f} → "
          f"{res['rss_end_mib']:.1f} MiB ({100 * res['rss_growth_ratio']:+.1f}%), fds {res['fds_range']}, "
          f"DB connections {res['db_connections_range']}")
    write_result("soak", res)
    plot(res, RESULTS / "soak.png")


if __name__ == "__main__":
    main()

"""Daemon overhead: the share of a cycle's wall time NOT spent in model or solver compute.

Runs the real driver in-process on SQLite with the real engine (tiny bootstrapped generator,
frozen reference, probe ensemble) and the in-process synthetic solver. A timing proxy around the
engine (RL, sampling, scoring, rewards), the aux-probe retrainer and the spot-checker measures compute time;
everything else — store writes, validity checks (one pass per sample batch), lineage records, metrics
and their Prometheus export, alert evaluation, emission — is overhead.

    python -m benchmarks.daemon_overhead [--cycles 3] [--bootstrap-steps 300]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from benchmarks._common import RESULTS, write_result


class Timed:
    """Proxy that adds the wall time of every method call to ``totals[name]``."""

    def __init__(self, inner: Any, totals: dict[str, float], prefix: str) -> None:
        self._inner, self._totals, self._prefix = inner, totals, prefix

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr) or name == "domain":
            return attr

        def call(*args: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return attr(*args, **kw)
            finally:
                self._totals[f"{self._prefix}.{name}"] += time.perf_counter() - t0
        return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--bootstrap-steps", type=int, default=300)
    ap.add_argument("--cache", default=".propel/bench-models")
    args = ap.parse_args()

    from curriculum.rl.bootstrap import bootstrap
    from daemon.config import config_from_mapping
    from daemon.loop.driver import Driver
    from daemon.ops.metrics import build_metrics
    from daemon.service.engine import build_engine
    from daemon.service.lifecycle import open_run
    from daemon.service.runtime import build_retrainer, build_spot
    from daemon.service.settings import driver_settings

    gen = bootstrap("arith", data_dir=Path(args.cache), steps=args.bootstrap_steps, show_progress=False).path
    with TemporaryDirectory() as tmp:
        cfg = config_from_mapping({
            "data_dir": tmp, "run_name": "bench", "generator": {"model": str(gen)},
            "daemon": {"sample_size": 64}, "alerts": {"sample_size": 48}, "probes": {"train_samples": 256},
            "rl": {"steps_per_chunk": 4, "batch_size": 8, "num_generations": 4},
            "spotcheck": {"budget_per_cycle": 16}}, env={})
        store, run_id = open_run(cfg)
        totals: dict[str, float] = defaultdict(float)
        engine = build_engine(cfg, store, run_id, say=lambda s: None)
        spot = build_spot(cfg, store, engine)
        retrainer = build_retrainer(cfg, store, engine)  # aux training incl. its labelled-set query
        driver = Driver(store, run_id, Timed(engine, totals, "engine"), Timed(spot, totals, "solver"),
                        Timed(retrainer, totals, "retrain"), driver_settings(cfg),
                        metrics=build_metrics())  # the Prometheus export, as `propel run` does
        phase_wall: dict[str, float] = defaultdict(float)
        for _ in range(args.cycles * 5):
            t0 = time.perf_counter()
            report = driver.tick()
            phase_wall[report.phase] += time.perf_counter() - t0
        store.dispose()
    wall = sum(phase_wall.values())
    compute = sum(totals.values())
    result = {"cycles": args.cycles, "wall_s": wall, "compute_s": compute, "overhead_s": wall - compute,
              "overhead_share": (wall - compute) / wall, "phase_wall_s": dict(phase_wall),
              "compute_breakdown_s": dict(totals), "goal_overhead_share": 0.05}
    write_result("daemon_overhead", result)
    plot(result, RESULTS / "daemon_overhead.png")
    print(f"cycle wall {wall / args.cycles:.2f} s, compute {compute / args.cycles:.2f} s, "
          f"overhead {result['overhead_share']:.1%} (goal < 5%)")
    for phase, secs in phase_wall.items():
        print(f"  {phase:<9} {secs / args.cycles:7.3f} s/cycle")


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = dict(result["compute_breakdown_s"])
    parts["daemon overhead"] = result["overhead_s"]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = sorted(parts, key=parts.get, reverse=True)  # type: ignore[arg-type]
    ax.barh(names, [parts[n] for n in names], color=["#c44e52" if n == "daemon overhead" else "#4c72b0" for n in names])
    ax.set_xlabel(f"seconds over {result['cycles']} cycles")
    ax.set_title(f"daemon overhead {result['overhead_share']:.1%} of cycle wall time")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()

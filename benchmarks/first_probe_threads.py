"""The first probe of a fresh run by torch thread count (why the first run's "first probe" stage was slow).

Runs ``propel run --no-api --cycles 1`` (the product's own start-up) from one already-bootstrapped
generator (copied per arm, so each arm is a fresh run that reuses the model), once per
``daemon.torch_threads`` setting (0 = torch's default, one thread per core), one after the other,
and stops each at ``reward … over N probe(s)``. Every output line is timestamped on arrival; the
first-probe stage runs from the bootstrap line to the reward line (the calibration sample, 512
base-policy samples, the labels, the probe features and the fit). Records the load average: on a
shared 2-core machine a second torch thread is what makes this stage slow.

Usage: ``python -m benchmarks.first_probe_threads BOOTSTRAP_DATA_DIR STEPS [THREADS ...]`` where
``BOOTSTRAP_DATA_DIR`` holds ``bootstrap/arith/<key>/`` for ``generator.bootstrap_steps = STEPS``
(``propel bootstrap arith --data-dir DIR --steps STEPS``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import write_result

ROOT = Path(__file__).resolve().parents[1]


def run_arm(base: Path, steps: int, threads: int, workdir: Path) -> dict[str, Any]:
    data = workdir / f"t{threads}"
    shutil.copytree(base, data)
    cfg = workdir / f"t{threads}.toml"
    cfg.write_text(f"data_dir = '{data}'\n[generator]\nbootstrap_steps = {steps}\n"
                   f"[daemon]\ntorch_threads = {threads}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli.main", "--config", str(cfg), "run", "--no-api",
                             "--cycles", "1"], cwd=workdir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout is not None
    lines: list[tuple[float, float, str]] = []
    marks: dict[str, float] = {}
    for line in proc.stdout:
        t = time.monotonic() - started
        lines.append((round(t, 1), os.getloadavg()[0], line.rstrip()))
        print(f"[threads={threads} {t:7.1f}s] {line.rstrip()}", flush=True)
        for key, needle in (("bootstrap", "valid ("), ("labelling", "labelling first-probe corpus: started"),
                            ("features", "probe features: started"), ("features_done", "probe features: done")):
            if needle in line and key not in marks:
                marks[key] = t
        if "reward " in line and " over " in line:
            marks["reward"] = t
            os.killpg(proc.pid, signal.SIGINT)  # the group this benchmark started
            break
    proc.wait(timeout=120)
    b = marks["bootstrap"]
    return {"threads_setting": threads, "first_probe_s": round(marks["reward"] - b, 1),
            "sampling_s": round(marks["labelling"] - b, 1),
            "features_s": round(marks["features_done"] - marks["features"], 1),
            "load_average": [v for _, v, _ in lines], "log": lines}


def main(argv: list[str]) -> dict[str, Any]:
    base, steps = Path(argv[0]), int(argv[1])
    arms = [int(a) for a in argv[2:]] or [0, 1]
    with tempfile.TemporaryDirectory(prefix="propel-probe-threads-") as tmp:
        results = [run_arm(base, steps, threads, Path(tmp)) for threads in arms]
    out = {"bootstrap_steps": steps, "arms": results, "cpus": os.cpu_count(),
           "first_probe_s": {str(r["threads_setting"]): r["first_probe_s"] for r in results}}
    write_result("first_probe_threads", out)
    print(out["first_probe_s"])
    return out


if __name__ == "__main__":
    main(sys.argv[1:])

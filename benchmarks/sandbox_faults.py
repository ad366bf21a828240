"""Page faults and wall time per program of the batch fork server, measured directly (no sandbox).

The fork server (``curriculum/sandbox/forkserver.py`` with ``harness.py``, or their versions at
``--commit``) runs as ``python -I -S -c SOURCE`` in a private temp dir with a batch of programs
(the AZR bodies of :mod:`benchmarks.sandbox_throughput`, 10 inputs each); a few lines appended to
its source report ``ru_minflt`` (minor faults: on this VM nearly all are copy-on-write or first-touch
faults at about 5 us each) of the server itself and of its reaped descendants when it ends, and,
where the server has a zygote (``serve_zygote``), of the zygote alone. Faults per program are the
difference between a batch of ``--programs`` and an empty batch, divided by ``--programs``.

Usage: ``.venv/bin/python -m benchmarks.sandbox_faults [--programs 300] [--repeats 3] [--commit C ...]``
Writes ``benchmarks/results/sandbox_faults.json``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from benchmarks._common import write_result
from benchmarks.sandbox_throughput import source_at
from curriculum.sandbox.batch import HARNESS_SOURCE
from testkit.fork_faults import instrumented, per_program


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--programs", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--commit", nargs="*", default=[], help="also measure the fork server of these commits")
    args = parser.parse_args()
    sources: dict[str, str] = {}
    for commit in args.commit:
        source = source_at(commit)
        if source is None:
            raise SystemExit(f"no fork server at {commit}")
        sources[commit] = source
    sources["now"] = HARNESS_SOURCE
    load_before = os.getloadavg()[0]
    results: dict[str, Any] = {name: per_program(instrumented(src), args.programs, args.repeats)
                               for name, src in sources.items()}
    for name, row in results.items():
        print(f"{name:>10}: " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()))
    write_result("sandbox_faults", {
        "programs": args.programs, "repeats": args.repeats, "inputs_per_program": 10,
        "faults_per_program": results,
        "load_average": {"before": load_before, "after": os.getloadavg()[0]},
        "notes": "minor faults (ru_minflt) per program, (batch - empty batch) / programs, median of repeats; "
                 "no sandbox; 'child' is every candidate process, 'zygote' the forking process where there is one",
    })


if __name__ == "__main__":
    main()

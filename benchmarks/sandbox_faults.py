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
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks._common import write_result
from benchmarks.sandbox_throughput import source_at, task_source
from curriculum.sandbox.batch import HARNESS_SOURCE

#: Appended to the fork server's source (in place of its ``main()`` call): report the faults.
DRIVER = """
import resource as _rs
def _usage(who, label):
    u = _rs.getrusage(who)
    os.write(2, ("%s %d\\n%s_cpu_ms %.3f\\n" % (label, u.ru_minflt, label, 1000 * (u.ru_utime + u.ru_stime))).encode())
_zygote = globals().get("serve_zygote")
if _zygote is not None:
    def serve_zygote(*args, **kwargs):
        try:
            return _zygote(*args, **kwargs)
        finally:
            _usage(_rs.RUSAGE_SELF, "zygote")
main()
_usage(_rs.RUSAGE_SELF, "server")
_usage(_rs.RUSAGE_CHILDREN, "children")
"""


def instrumented(source: str) -> str:
    main_call = 'if __name__ == "__main__":\n    main()'
    if main_call not in source:
        raise ValueError("fork server source without its main() call")
    return source.replace(main_call, "") + DRIVER


def run_batch(source: str, programs: int) -> dict[str, float]:
    """One fork server run; its fault counters and wall seconds."""
    progs = []
    for t in range(programs):
        code, inputs = task_source(t)
        progs.append({"id": f"p{t}", "code": code, "func": "f", "inputs": inputs})
    payload = json.dumps({"programs": progs, "call_timeout_s": 1.0, "hash_seed": None}).encode()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        out = subprocess.run([os.path.realpath(sys.executable), "-I", "-S", "-c", source], input=payload,
                             capture_output=True, cwd=tmp, env={"PATH": "/usr/bin:/bin", "TMPDIR": tmp}, check=True)
        seconds = time.perf_counter() - started
    records = [json.loads(line) for line in out.stdout.splitlines()]
    finals = [r for r in records if r.get("kind") == "program"]
    if len(finals) != programs or any(r["status"] != "ok" for r in finals) or records[-1].get("kind") != "done":
        raise RuntimeError(f"fork server run failed: {out.stdout[-500:]!r} {out.stderr[-500:]!r}")
    counts = {k: float(v) for k, v in (line.split() for line in out.stderr.decode().splitlines() if line)}
    counts.setdefault("zygote", 0.0)
    counts.setdefault("zygote_cpu_ms", 0.0)
    return {**counts, "seconds": seconds}


def per_program(source: str, programs: int, repeats: int) -> dict[str, float]:
    """Median over ``repeats`` of (batch of ``programs`` - empty batch) / ``programs``."""
    rows: list[dict[str, float]] = []
    for _ in range(repeats):
        full, empty = run_batch(source, programs), run_batch(source, 0)
        rows.append({k: (full[k] - empty[k]) / programs for k in full})
    out = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    out["child"] = out["children"] - out["zygote"]  # the zygote is a reaped descendant of the server
    out["child_cpu_ms"] = out["children_cpu_ms"] - out["zygote_cpu_ms"]
    out["total"] = out["server"] + out["children"]
    out["total_cpu_ms"] = out["server_cpu_ms"] + out["children_cpu_ms"]
    out["ms_per_program"] = 1000 * out.pop("seconds")
    return out


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

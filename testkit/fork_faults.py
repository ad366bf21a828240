"""Page faults, CPU and wall time per program of the batch fork server, measured on its own source.

A few lines appended to the fork server's source (in place of its ``main()`` call) report ``ru_minflt``
and CPU of the server itself, of its reaped descendants and, where it has one, of its zygote. Used by
``benchmarks/sandbox_faults.py`` and its test (shared here so neither imports the other).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from testkit.azr_programs import task_source

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

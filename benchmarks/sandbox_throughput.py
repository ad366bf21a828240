"""AZR validity checks per second: bubblewrap vs rlimit subprocess vs unsandboxed in-process exec.

Each check = parse + static policy + run f on 10 inputs + determinism. Sandboxed modes run the
whole batch in two separate processes (the real determinism check); the unsandboxed baseline is
AZR's own approach (``exec`` in the current process), which runs every input twice in the same
process and so cannot see hash-randomisation non-determinism. A fourth mode runs bubblewrap with
one sandbox start per task (no batching) to show what batching buys.

Usage: ``.venv/bin/python benchmarks/sandbox_throughput.py [--tasks 40] [--repeats 3]``
Writes ``benchmarks/results/sandbox_throughput.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from curriculum.domains.azr import AzrDomain
from curriculum.domains.azr_static import normalise_program
from curriculum.sandbox import BubblewrapSandbox, Limits, RlimitSandbox, bwrap_probe
from curriculum.sandbox.harness import run_program

RESULTS = Path(__file__).parent / "results"
BODIES = (
    "def f(nums, k):\n    return sorted(nums)[-k:]",
    "def f(nums, k):\n    return [x * k for x in nums if x % 2 == 0]",
    "def f(nums, k):\n    s = 0\n    for i, x in enumerate(nums):\n        s += (x ^ i) * k\n    return s",
    "def f(nums, k):\n    return {str(x): x % (k + 1) for x in nums}",
    "def f(nums, k):\n    out = ''\n    for x in nums:\n        out += chr(97 + (x + k) % 26)\n    return out",
)


def make_completions(n: int) -> list[str]:
    out = []
    for t in range(n):
        code = BODIES[t % len(BODIES)].replace("):\n", f"):\n    k = k + {t % 3}\n", 1)
        inputs = [f"[{t + i}, {i * 3 + 1}, {2 * i + t % 7}, {i * i}], {1 + (i + t) % 4}" for i in range(10)]
        text = f"```python\n{code}\n```\n" + "".join(f"```input\n{s}\n```\n" for s in inputs)
        out.append(text + f"```message\npuzzle {t}\n```\n")
    return out


def unsandboxed_validate(domain: AzrDomain, completions: list[str]) -> int:
    """AZR-style baseline: exec in this process, each input run twice and compared."""
    valid = 0
    for text in completions:
        parsed = domain.parse(text)
        if parsed.task is None:
            continue
        code = normalise_program(parsed.task.payload["code"])
        runs: list[list[dict[str, Any]]] = [[], []]
        for records in runs:
            run_program({"id": "x", "code": code, "func": "f", "inputs": parsed.task.payload["inputs"]},
                        1.0, 1_000_000, records.append)
        calls = [[r for r in records if r["kind"] == "call"] for records in runs]
        valid += all(c["status"] == "ok" for c in calls[0]) and calls[0] == calls[1]
    return valid


def timed(fn: Any, repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sweep", type=int, nargs="*", default=[10, 40, 160, 640],
                        help="batch sizes for the bubblewrap-vs-exec ratio curve")
    args = parser.parse_args()
    completions = make_completions(args.tasks)
    limits = Limits(cpu_s=20, wall_s=30.0)
    modes: dict[str, Any] = {}
    base = AzrDomain(sandbox=RlimitSandbox(limits))
    secs, valid = timed(lambda: unsandboxed_validate(base, completions), args.repeats)
    modes["unsandboxed_exec"] = {"seconds": secs, "valid": valid}
    backends: list[tuple[str, Any]] = [("rlimit_batched", RlimitSandbox(limits))]
    if bwrap_probe()[0]:
        backends.insert(0, ("bubblewrap_batched", BubblewrapSandbox(limits)))
    for name, sandbox in backends:
        domain = AzrDomain(sandbox=sandbox, limits=limits)
        secs, res = timed(lambda d=domain: d.validate_batch(completions), args.repeats)
        modes[name] = {"seconds": secs, "valid": sum(v.valid for v in res)}
    if bwrap_probe()[0]:
        domain = AzrDomain(sandbox=BubblewrapSandbox(limits), limits=limits)
        secs, res = timed(lambda: [domain.validate_batch([c])[0] for c in completions], 1)
        modes["bubblewrap_unbatched"] = {"seconds": secs, "valid": sum(v.valid for v in res)}
    for entry in modes.values():
        entry["checks_per_s"] = args.tasks / entry["seconds"]
    exec_rate = modes["unsandboxed_exec"]["checks_per_s"]
    sweep = batch_sweep(args.sweep, args.repeats, limits) if bwrap_probe()[0] else []
    report = {
        "benchmark": "azr_validity_checks_per_second",
        "tasks": args.tasks, "inputs_per_task": 10, "repeats": args.repeats,
        "determinism": "sandboxed: two separate processes; unsandboxed: same process twice",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release()},
        "modes": modes,
        "slowdown_vs_unsandboxed": {k: exec_rate / v["checks_per_s"] for k, v in modes.items()},
        "goal": "bubblewrap_batched within 3x of unsandboxed_exec",
        "notes": ("sandboxed modes run their two determinism processes concurrently (so they may use two "
                  "cores while exec uses one); the fixed cost is ~2 sandbox start-ups per validate_batch call, "
                  "so the slowdown depends on the batch size (see batch_size_sweep); timings are medians of "
                  f"{args.repeats} runs on a machine shared with other jobs, load average {os.getloadavg()[0]:.1f}"),
        "batch_size_sweep": sweep,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sandbox_throughput.json").write_text(json.dumps(report, indent=2))
    plot(report, RESULTS / "sandbox_throughput.png")
    print(json.dumps(report, indent=2))


def batch_sweep(sizes: list[int], repeats: int, limits: Limits) -> list[dict[str, float]]:
    """Bubblewrap (batched, two processes) vs unsandboxed exec as the batch grows."""
    domain = AzrDomain(sandbox=BubblewrapSandbox(limits), limits=limits)
    rows = []
    for n in sizes:
        completions = make_completions(n)
        exec_s, _ = timed(lambda c=completions: unsandboxed_validate(domain, c), repeats)
        bwrap_s, _ = timed(lambda c=completions: domain.validate_batch(c), repeats)
        rows.append({"tasks": n, "unsandboxed_checks_per_s": n / exec_s, "bubblewrap_checks_per_s": n / bwrap_s,
                     "slowdown": bwrap_s / exec_s})
    return rows


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["modes"])
    rates = [report["modes"][n]["checks_per_s"] for n in names]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4))
    bars = ax.bar(names, rates, color=["#888", "#2a7", "#d83", "#37b"][: len(names)])
    for bar, name in zip(bars, names, strict=True):
        ax.annotate(f"{report['slowdown_vs_unsandboxed'][name]:.1f}x slower" if name != "unsandboxed_exec"
                    else "baseline", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("AZR validity checks / s (10 inputs, determinism)")
    ax.set_title(f"Sandbox throughput, {report['tasks']} tasks, {report['machine']['cpus']} CPUs")
    ax.tick_params(axis="x", labelsize=7)
    sweep = report["batch_size_sweep"]
    if sweep:
        ax2.plot([r["tasks"] for r in sweep], [r["slowdown"] for r in sweep], marker="o")
        ax2.axhline(3.0, color="red", linestyle="--", label="goal: 3x")
        ax2.set_xscale("log")
        ax2.set_xlabel("tasks per validate_batch call")
        ax2.set_ylabel("bubblewrap slowdown vs unsandboxed exec")
        ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()

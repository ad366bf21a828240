"""Fresh clone → ``make run`` → first emitted task, timed per stage (issue #38 item 4).

What a new user does, measured: ``git clone`` of this repository's HEAD into a temporary directory,
then ``make run`` there (it creates ``.venv``, installs the runtime dependencies, bootstraps the tiny
generator, trains the first probe and runs cycles), stopped with SIGINT once a cycle summary reports a
task emitted. Each output line is timestamped on arrival and the stages are cut at the lines the
README's first-run table names:

==============  =====================================================================
stage           ends at
==============  =====================================================================
clone           ``git clone`` returns
install         make runs ``…/bin/propel run`` (venv, pip; ~0 with ``--reuse-venv``)
startup         ``bootstrapping the tiny arith generator …``
bootstrap       ``generator … · NN.N% valid (trained in N s)``
first probe     ``reward hard_gate over N probe(s) …`` (trainer, reference, labels, features, fit)
first emission  the first cycle summary row with ``emitted`` ≥ 1
==============  =====================================================================

The machine is shared: the 1-minute load average is sampled every 5 s and recorded with the result.
``--reuse-venv DIR`` skips the install (``make run VENV=DIR``, the clone first on ``PYTHONPATH``) for
quick reruns of the other stages. The API listens on a free port (a one-line config file), so a
daemon already on 8787 does not interfere. Results: ``benchmarks/results/first_run.json`` + ``.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, write_result
from testkit.first_run import GOAL_S, MARKERS, STAGES, STRETCH_S, StageClock, make_run_command

ROOT = Path(__file__).resolve().parents[1]
class LoadSampler(threading.Thread):
    """The 1-minute load average every ``every_s`` seconds, until stopped."""

    def __init__(self, every_s: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.every_s, self.samples = every_s, []  # type: float, list[tuple[float, float]]
        self._stop_event = threading.Event()
        self._t0 = time.monotonic()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.samples.append((round(time.monotonic() - self._t0, 1), os.getloadavg()[0]))
            self._stop_event.wait(self.every_s)

    def stop(self) -> dict[str, Any]:
        self._stop_event.set()
        values = [v for _, v in self.samples] or [os.getloadavg()[0]]
        return {"mean_1min": round(sum(values) / len(values), 2), "max_1min": max(values),
                "samples": self.samples}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clone(dest: Path) -> tuple[float, str]:
    """``git clone`` this repository's HEAD into ``dest``; (seconds, the clone's commit)."""
    started = time.monotonic()
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(dest)], check=True)
    seconds = time.monotonic() - started
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=dest, capture_output=True, text=True, check=True)
    return seconds, head.stdout.strip()


def watch(proc: subprocess.Popen[str], clock: StageClock, timeout_s: float, started: float) -> bool:
    """Feed ``proc``'s lines to ``clock`` until the first emission or ``timeout_s``; True when reached."""
    assert proc.stdout is not None
    timer = threading.Timer(timeout_s, lambda: _signal_group(proc, signal.SIGKILL))
    timer.start()
    try:
        for line in proc.stdout:
            stage = clock.feed(time.monotonic() - started, line.rstrip("\n"))
            if stage:
                print(f"[first_run] {stage} done at {time.monotonic() - started:6.1f} s: {line.strip()[:100]}",
                      flush=True)
            if clock.done:
                return True
    finally:
        timer.cancel()
    return False


def _signal_group(proc: subprocess.Popen[str], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)  # the group this benchmark started (make and the daemon it runs)


def stop(proc: subprocess.Popen[str]) -> int | None:
    """Ctrl-C the run (SIGINT to its process group), then SIGKILL if it has not exited in 60 s."""
    _signal_group(proc, signal.SIGINT)
    try:
        return proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        return proc.wait(timeout=10)


def measure(workdir: Path, reuse_venv: Path | None, timeout_s: float, write_bytecode: bool = False) -> dict[str, Any]:
    """Clone into ``workdir``, ``make run`` there, time each stage; the result record (no files written).
    ``write_bytecode``: run without ``PYTHONDONTWRITEBYTECODE`` (as a default Python environment does)."""
    repo = workdir / "propel-curriculum"
    load = LoadSampler()
    load.start()
    load_start = os.getloadavg()
    clock = StageClock()
    clock.clone_s, commit = clone(repo)
    (repo / "first_run.toml").write_text(f"[api]\nport = {free_port()}\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PROPEL_CONFIG": str(repo / "first_run.toml"), "TERM": "dumb"}
    env.pop("VIRTUAL_ENV", None)
    if write_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    if reuse_venv is not None:
        env["PYTHONPATH"] = str(repo)
    else:
        env.pop("PYTHONPATH", None)
    started = time.monotonic()
    proc = subprocess.Popen(make_run_command(reuse_venv), cwd=repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True)
    try:
        reached = watch(proc, clock, timeout_s, started)
    finally:
        exit_code = stop(proc)
    return {"commit": commit, "mode": "reuse-venv" if reuse_venv else "fresh", "reached_first_emission": reached,
            "timeout_s": timeout_s, "stages_s": clock.stage_seconds(), "total_s": clock.total_s(),
            "goal_s": GOAL_S, "stretch_s": STRETCH_S, "bootstrap_validity": clock.bootstrap_validity(),
            "packages_installed": clock.packages_installed(), "exit_code_after_sigint": exit_code,
            "load_average": {"at_start": load_start, **load.stop()},
            "cpus": os.cpu_count(), "python_env": {"PYTHONDONTWRITEBYTECODE": env.get("PYTHONDONTWRITEBYTECODE")},
            "log": _daemon_lines(clock.lines)}


def _daemon_lines(lines: Iterable[tuple[float, str]]) -> list[tuple[float, str]]:
    """The log from ``propel run`` on (pip's lines are only counted)."""
    out = list(lines)
    for i, (_, line) in enumerate(out):
        if MARKERS[0][1].search(line):
            return out[i:]
    return out[-200:]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reuse-venv", type=Path, default=None, metavar="DIR",
                        help="skip the install: run with this existing venv (e.g. .venv of a checkout)")
    parser.add_argument("--timeout-s", type=float, default=1500.0, help="give up after this long (default %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary clone (its path is printed)")
    parser.add_argument("--write-bytecode", action="store_true",
                        help="unset PYTHONDONTWRITEBYTECODE for the run, as in a default Python environment "
                             "(Python then caches the bytecode of what it imports)")
    parser.add_argument("--name", default=None,
                        help="result file stem (default: first_run; first_run_reuse with --reuse-venv)")
    args = parser.parse_args(argv)
    if args.reuse_venv is not None and not (args.reuse_venv / "bin" / "propel").exists():
        parser.error(f"--reuse-venv {args.reuse_venv}: no bin/propel there (run `make install-run` in a checkout)")
    workdir = Path(tempfile.mkdtemp(prefix="propel-first-run-"))
    try:
        result = measure(workdir, args.reuse_venv.resolve() if args.reuse_venv else None, args.timeout_s,
                         args.write_bytecode)
    finally:
        if args.keep:
            print(f"[first_run] clone kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    name = args.name or ("first_run" if args.reuse_venv is None else "first_run_reuse")
    write_result(name, result)
    _plot(result, name)
    print({k: result[k] for k in ("commit", "mode", "stages_s", "total_s", "bootstrap_validity")},
          "load", {k: result["load_average"][k] for k in ("mean_1min", "max_1min")})
    return result


def _plot(result: dict[str, Any], name: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(2, 1, figsize=(8, 4.2), layout="constrained", height_ratios=(1, 1.3))
    left = 0.0
    for stage in STAGES:
        sec = result["stages_s"].get(stage) or 0.0
        ax.barh([0], [sec], left=left, label=f"{stage.replace('_', ' ')} {sec:.0f} s")
        left += sec
    ax.axvline(GOAL_S, color="red", ls="--", lw=1)
    ax.axvline(STRETCH_S, color="orange", ls=":", lw=1)
    ax.set_yticks([])
    ax.set_xlim(0, max(GOAL_S, left) * 1.05)
    ax.legend(fontsize=7, ncol=3, loc="upper right")
    total = result["total_s"]
    ax.set_title(f"fresh clone → first emitted task ({result['mode']}): "
                 f"{'not reached' if total is None else f'{total:.0f} s'} · goal 300 s (red), stretch 180 s "
                 f"· {result['commit'][:8]}", fontsize=9)
    samples = result["load_average"]["samples"]
    bx.plot([t for t, _ in samples], [v for _, v in samples])
    bx.set_xlabel("seconds since the clone started")
    bx.set_ylabel("load average (1 min)")
    bx.set_xlim(0, max(GOAL_S, left) * 1.05)
    fig.savefig(RESULTS / f"{name}.png", dpi=120)


if __name__ == "__main__":
    main()

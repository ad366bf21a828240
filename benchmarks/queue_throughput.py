"""Frontier-queue throughput on PostgreSQL: tasks leased and acked by concurrent consumers.

Arms, side by side in one run, on the same machine and database, each draining the same number of
freshly seeded tasks (realistic ~0.7 kB messages) with the same consumers and batch size:

  * ``bare_sql``     — a hand-written queue in raw psycopg (autocommit): one ``UPDATE … WHERE id IN
                       (SELECT … FOR UPDATE SKIP LOCKED) RETURNING`` per lease batch (token, expiry,
                       attempts, consumer, message) and one ``UPDATE … FROM unnest(…)`` per ack batch
                       checking tokens. The floor.
  * ``store``        — the product's ``queue.lease`` + ``queue.ack_many`` through ``Store`` sessions
                       (run scoping, tokens, dead-lettering, late acks).
  * ``store_select`` — the same with a lease selection: a 70/30 domain mixture and a predicted
                       in-band range (the selection indexes at work).
  * ``http``         — ``propel serve`` (a subprocess, the real CLI) and the Python client:
                       ``lease`` + ``ack_many`` (labels written too).
  * ``http_in_run``  — the API inside a training ``propel run`` (tiny bootstrapped arith generator,
                       RL on the same cores), same client load; and ``http_beside_run``, the
                       ``propel serve`` of the first arms while that daemon trains, to separate the
                       cost of sharing the daemon's process from the cost of sharing the CPU.
  * ``http_run_paused`` — the same-round reference for ``http_in_run``: the API of a second ``propel
                       run`` (its own run, same config) whose training is idle (one phase, then a
                       day's tick interval), measured while the training daemon is frozen (SIGSTOP
                       after seeding, SIGCONT after the drain): a daemon's API with the CPU to itself.
                       The three are skipped with ``--no-in-run``.

Both daemons run with the config's ``api.work_nice`` (0 = off by default; ``--work-nice N`` sets it) and
``api.yield_to_api`` (the training pauses while trainers use the queue; ``--yield`` / ``--no-yield`` set it).
The training daemon's ``propel_work_yielded_seconds_total`` is read from its ``/metrics`` at the end.

Reports tasks/s, p50/p99 lease latency, and checks nothing was delivered twice or lost.

    python -m benchmarks.queue_throughput [--tasks 20000] [--consumers 4] [--batch 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, scratch_postgres, write_result
from testkit.queue_load import RUN, consume_http, drain, run_arm, run_id_of, seed

#: The idle daemon's run (its own queue, next to the training daemon's on the same database).
IDLE_RUN = f"{RUN}-idle"
#: Which run each HTTP arm's API serves.
ARM_RUN = {"http": RUN, "http_beside_run": RUN, "http_in_run": RUN, "http_run_paused": IDLE_RUN}
DAEMON_ARMS = ("http_in_run", "http_run_paused")


def config(path: Path, url: str, port: int, data_dir: Path, generator: Path | None, run: str = RUN,
           idle: bool = False, api: dict[str, Any] | None = None) -> Path:
    """``propel serve``: the store and port only; ``propel run``: the e2e tests' small CPU daemon
    (``idle``: one phase at start, then nothing for a day; ``api``: ``[api]`` settings, else the defaults)."""
    from testkit.configs import write_config

    if generator is None:
        path.write_text(f'data_dir = "{data_dir}"\nrun_name = "{run}"\n[store]\nurl = "{url}"\n[api]\nport = {port}\n')
        return path
    write_config(path, generator, data_dir, url, run, port=port)
    text = path.read_text()
    if idle:
        text = text.replace("tick_interval_s = 0.05", "tick_interval_s = 86400")
    lines = "".join(f"{key} = {str(value).lower() if isinstance(value, bool) else value}\n"
                    for key, value in (api or {}).items())
    text = text.replace(f"[api]\nport = {port}\n", f"[api]\nport = {port}\n{lines}")
    path.write_text(text)
    return path


def start_cli(args: list[str], cfg: Path, log: Path, port: int, timeout_s: float) -> subprocess.Popen[bytes]:
    from testkit.servers import wait_http

    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "daemon.cli.main", "--config", str(cfg), *args],
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    wait_http(f"http://127.0.0.1:{port}/openapi.json", timeout_s, proc)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def in_run_phase(url: str, run: str = RUN) -> str | None:
    from sqlalchemy import select

    from curriculum.store.db import Store
    from curriculum.store.models import DaemonState, Run

    store = Store(url)
    try:
        with store.session() as s:
            return s.scalars(select(DaemonState.phase).join(Run, Run.id == DaemonState.run_id)
                             .where(Run.name == run, DaemonState.heartbeat_at.is_not(None))).first()
    finally:
        store.dispose()


def start_http_arm(url: str, arm: str, work: Path, generator: Path | None,
                   api: dict[str, Any] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``propel serve`` or ``propel run`` (API on, ``api``: its ``[api]`` settings) for the arm's run;
    returns the process and API URL."""
    from testkit.servers import free_port

    port, run = free_port(), ARM_RUN[arm]
    cfg = config(work / f"{arm}.toml", url, port, work / f"data-{arm}", generator, run, arm == "http_run_paused",
                 api)
    proc = start_cli(["run"] if arm in DAEMON_ARMS else ["serve"], cfg, work / f"{arm}.log", port, 900)
    if arm in DAEMON_ARMS:  # wait until the daemon is past its start-up (first probe) and cycling;
        # the idle one (a fresh run starts at "rl") until its one phase is over
        ready = (lambda p: p is not None) if arm == "http_in_run" else (lambda p: p not in (None, "rl"))
        if not ready(wait_phase(url, run, proc, ready)):
            stop(proc)
            raise RuntimeError(f"propel run did not start cycling: {(work / f'{arm}.log').read_text()[-3000:]}")
    return proc, f"http://127.0.0.1:{port}"


def wait_phase(url: str, run: str, proc: subprocess.Popen[bytes], done: Callable[[str | None], bool],
               timeout_s: float = 1800) -> str | None:
    """Poll the run's stored phase until ``done(phase)`` (or the timeout, or the process exits); returns it."""
    deadline = time.monotonic() + timeout_s
    phase = in_run_phase(url, run)
    while not done(phase) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(1)
        phase = in_run_phase(url, run)
    return phase


def http_round(url: str, api: str, arm: str, n: int, consumers: int, batch: int, offset: int,
               freeze: subprocess.Popen[bytes] | None = None) -> dict[str, Any]:
    """Seed and drain through ``api``; ``freeze``: a process group stopped (SIGSTOP) for the drain only
    (after seeding: a stopped daemon may hold row locks the seeding's UPDATE would wait for)."""
    run = ARM_RUN[arm]
    run_id = run_id_of(url, run)
    seeded = seed(url, n, run_id, offset)
    if freeze is not None:
        os.killpg(freeze.pid, signal.SIGSTOP)
    try:
        res: dict[str, Any] = drain(consume_http, api, run_id, consumers, batch, seeded)
    finally:
        if freeze is not None:
            os.killpg(freeze.pid, signal.SIGCONT)
    if arm in DAEMON_ARMS:
        res["daemon_phase_after"] = in_run_phase(url, run)
    return res


def thread_nices(pid: int) -> dict[str, int]:
    """How many of a process's threads run at each niceness (``/proc/PID/task/*/stat`` field 19; Linux)."""
    from collections import Counter

    counts: Counter[str] = Counter()
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            counts[stat.read_text().rsplit(")", 1)[1].split()[16]] += 1
        except (OSError, IndexError):  # a thread that ended meanwhile
            continue
    return dict(sorted(counts.items()))


def plot(res: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    arms = list(res)
    a.bar(arms, [res[x]["tasks_per_s"] for x in arms], color="#4c72b0")
    a.set_ylabel("tasks / s (lease + ack)")
    a.tick_params(axis="x", labelrotation=20)
    b.bar([f"{x}\np50" for x in arms], [res[x]["lease_p50_ms"] for x in arms], color="#4c72b0")
    b.bar([f"{x}\np99" for x in arms], [res[x]["lease_p99_ms"] for x in arms], color="#c44e52")
    b.set_ylabel("lease latency (ms)")
    b.tick_params(axis="x", labelsize=7, labelrotation=60)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def ratios(res: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    def r(a: str, b: str) -> float | None:
        return res[a]["tasks_per_s"] / res[b]["tasks_per_s"] if a in res and b in res else None

    return {"store_vs_bare": r("store", "bare_sql"), "store_select_vs_store": r("store_select", "store"),
            "http_in_run_vs_serve": r("http_in_run", "http"),
            "http_in_run_vs_serve_beside_run": r("http_in_run", "http_beside_run"),
            "http_in_run_vs_run_paused": r("http_in_run", "http_run_paused")}


def median_sample(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The sample with the median throughput, plus every round's throughput (the machine is shared)."""
    ranked = sorted(samples, key=lambda r: r["tasks_per_s"])
    return {**ranked[(len(ranked) - 1) // 2], "rounds_tasks_per_s": [round(r["tasks_per_s"], 1) for r in samples]}


def run_rounds(url: str, arms: list[str], args: argparse.Namespace, apis: dict[str, str],
               samples: dict[str, list[dict[str, Any]]], offset: int,
               freeze: dict[str, subprocess.Popen[bytes]] | None = None) -> int:
    """``args.rounds`` interleaved rounds of ``arms``, each arm leading one round in turn (the seeding vacuums
    the queue table before every arm); returns the next free seed offset.
    ``freeze``: per arm, a process stopped while that arm drains."""
    for rnd in range(args.rounds):
        for arm in arms[rnd % len(arms):] + arms[:rnd % len(arms)]:  # each arm leads a round in turn
            if arm in apis:
                r = http_round(url, apis[arm], arm, args.tasks, args.consumers, args.batch, offset,
                               (freeze or {}).get(arm))
            else:
                r = run_arm(arm, url, args.tasks, args.consumers, args.batch, offset)
            offset += args.tasks
            samples.setdefault(arm, []).append(r)
            print(f"round {rnd} {arm:15s} {r['tasks_per_s']:8.0f} tasks/s  p50 {r['lease_p50_ms']:.1f} ms  "
                  f"p99 {r['lease_p99_ms']:.1f} ms  lost {r['lost']}  dup {r['duplicates']}", flush=True)
    return offset


def result_name(work_nice: int, yield_to_api: bool) -> str:
    """``queue_throughput`` at the config defaults; a suffix per setting that differs from them."""
    from daemon.config import PropelConfig

    default = PropelConfig().api
    return "queue_throughput" + (f"_work_nice{work_nice}" if work_nice != default.work_nice else "") + (
        ("_yield" if yield_to_api else "_no_yield") if yield_to_api != default.yield_to_api else "")


def yielded_seconds(api: str) -> float | None:
    """The daemon's ``propel_work_yielded_seconds_total`` (None when it cannot be read)."""
    import httpx

    try:
        text = httpx.get(f"{api}/metrics", timeout=30).text
    except httpx.HTTPError:
        return None
    return next((float(line.split()[-1]) for line in text.splitlines()
                 if line.startswith("propel_work_yielded_seconds_total ")), None)


def in_run_phase2(url: str, args: argparse.Namespace, work: Path, serve_api: str,
                  samples: dict[str, list[dict[str, Any]]], offset: int, api: dict[str, Any]) -> dict[str, Any]:
    """Phase 2: a training ``propel run`` (API on) next to the same ``propel serve``; returns what the
    daemons report (thread niceness, seconds the training yielded)."""
    from curriculum.rl.bootstrap import bootstrap

    gen = bootstrap("arith", data_dir=RESULTS.parent / ".cache", steps=300, show_progress=False).path
    daemon, run_api = start_http_arm(url, "http_in_run", work, gen, api)
    idle: subprocess.Popen[bytes] | None = None
    try:
        idle, idle_api = start_http_arm(url, "http_run_paused", work, gen, api)
        before = yielded_seconds(run_api)
        run_rounds(url, ["http_beside_run", "http_in_run", "http_run_paused"], args,
                   {"http_beside_run": serve_api, "http_in_run": run_api, "http_run_paused": idle_api},
                   samples, offset, freeze={"http_run_paused": daemon})
        after = yielded_seconds(run_api)
        return {"daemon_threads_by_nice": {"http_in_run": thread_nices(daemon.pid),
                                           "http_run_paused": thread_nices(idle.pid)},
                "training_yielded_s_during_rounds": None if before is None or after is None else after - before}
    finally:
        stop(daemon)
        if idle is not None:
            stop(idle)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=20_000)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every arm; the median is kept")
    ap.add_argument("--no-in-run", action="store_true", help="skip the (slow) propel run arms")
    ap.add_argument("--work-nice", type=int, default=None,
                    help="the daemons' api.work_nice (default: the config default); another value writes "
                         "queue_throughput_work_nice<N>.json")
    ap.add_argument("--yield", dest="yield_to_api", action=argparse.BooleanOptionalAction, default=None,
                    help="the daemons' api.yield_to_api (default: the config default); the other value writes "
                         "queue_throughput[_work_nice<N>]_yield.json or _no_yield.json")
    args = ap.parse_args()
    from daemon.config import PropelConfig

    default = PropelConfig().api
    work_nice = default.work_nice if args.work_nice is None else args.work_nice
    yield_to_api = default.yield_to_api if args.yield_to_api is None else args.yield_to_api
    name = result_name(work_nice, yield_to_api)
    samples: dict[str, list[dict[str, Any]]] = {}
    load = {"start": os.getloadavg()}
    daemons: dict[str, Any] = {}
    with scratch_postgres() as url, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        serve, serve_api = start_http_arm(url, "http", work, None)
        try:  # phase 1: nothing else runs
            offset = run_rounds(url, ["bare_sql", "store", "store_select", "http"], args, {"http": serve_api},
                                samples, 1)
            if not args.no_in_run:
                daemons = in_run_phase2(url, args, work, serve_api, samples, offset,
                                        {"work_nice": work_nice, "yield_to_api": yield_to_api})
        finally:
            stop(serve)
    load["end"] = os.getloadavg()
    res = {a: median_sample(s) for a, s in samples.items()}
    rat = ratios(res)
    write_result(name, {"tasks": args.tasks, "consumers": args.consumers, "batch": args.batch,
                        "rounds": args.rounds, "work_nice": work_nice, "yield_to_api": yield_to_api,
                        "yield_settings": {"idle_ms": default.yield_idle_ms, "max_s": default.yield_max_s,
                                           "floor": default.yield_floor},
                        "benchmark_nice": os.nice(0), **daemons, "load_average_1_5_15": load, "arms": res,
                        "ratios": rat,
                        "goals": {"store_vs_bare": 0.7, "http_tasks_per_s": 2000, "http_in_run_vs_serve": 0.8}})
    plot(res, RESULTS / f"{name}.png",
         f"frontier queue on PostgreSQL, {args.consumers} consumers, batch {args.batch}, {os.cpu_count()} CPUs "
         f"(median of {args.rounds} rounds, api.work_nice {work_nice}, yield_to_api {yield_to_api})")
    print({k: None if v is None else round(v, 3) for k, v in rat.items()})


if __name__ == "__main__":
    main()

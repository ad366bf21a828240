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
                       Both skipped with ``--no-in-run``.

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
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, scratch_postgres, write_result
from testkit.queue_load import RUN, consume_http, drain, run_arm, run_id_of, seed


def config(path: Path, url: str, port: int, data_dir: Path, generator: Path | None) -> Path:
    """``propel serve``: the store and port only; ``propel run``: the e2e tests' small CPU daemon."""
    from testkit.configs import write_config

    if generator is None:
        path.write_text(f'data_dir = "{data_dir}"\nrun_name = "{RUN}"\n[store]\nurl = "{url}"\n[api]\nport = {port}\n')
        return path
    return write_config(path, generator, data_dir, url, RUN, port=port)


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


def in_run_phase(url: str) -> str | None:
    from sqlalchemy import select

    from curriculum.store.db import Store
    from curriculum.store.models import DaemonState, Run

    store = Store(url)
    try:
        with store.session() as s:
            return s.scalars(select(DaemonState.phase).join(Run, Run.id == DaemonState.run_id)
                             .where(Run.name == RUN, DaemonState.heartbeat_at.is_not(None))).first()
    finally:
        store.dispose()


def start_http_arm(url: str, arm: str, work: Path, generator: Path | None) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``propel serve`` or ``propel run`` (API on) for the run; returns the process and API URL."""
    from testkit.servers import free_port

    port = free_port()
    cfg = config(work / f"{arm}.toml", url, port, work / "data", generator)
    proc = start_cli(["run"] if arm == "http_in_run" else ["serve"], cfg, work / f"{arm}.log", port, 900)
    if arm == "http_in_run":  # wait until the daemon is past its start-up (first probe) and cycling
        deadline = time.monotonic() + 1800
        while in_run_phase(url) is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1)
        if in_run_phase(url) is None:
            stop(proc)
            raise RuntimeError(f"propel run did not start cycling: {(work / f'{arm}.log').read_text()[-3000:]}")
    return proc, f"http://127.0.0.1:{port}"


def http_round(url: str, api: str, arm: str, n: int, consumers: int, batch: int, offset: int) -> dict[str, Any]:
    run_id = run_id_of(url)
    seeded = seed(url, n, run_id, offset)
    res: dict[str, Any] = drain(consume_http, api, run_id, consumers, batch, seeded)
    if arm == "http_in_run":
        res["daemon_phase_after"] = in_run_phase(url)
    return res


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
            "http_in_run_vs_serve_beside_run": r("http_in_run", "http_beside_run")}


def median_sample(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The sample with the median throughput, plus every round's throughput (the machine is shared)."""
    ranked = sorted(samples, key=lambda r: r["tasks_per_s"])
    return {**ranked[(len(ranked) - 1) // 2], "rounds_tasks_per_s": [round(r["tasks_per_s"], 1) for r in samples]}


def run_rounds(url: str, arms: list[str], args: argparse.Namespace, apis: dict[str, str],
               samples: dict[str, list[dict[str, Any]]], offset: int) -> int:
    """``args.rounds`` interleaved rounds of ``arms``; returns the next free seed offset."""
    for rnd in range(args.rounds):
        for arm in arms:
            if arm in apis:
                r = http_round(url, apis[arm], arm, args.tasks, args.consumers, args.batch, offset)
            else:
                r = run_arm(arm, url, args.tasks, args.consumers, args.batch, offset)
            offset += args.tasks
            samples.setdefault(arm, []).append(r)
            print(f"round {rnd} {arm:15s} {r['tasks_per_s']:8.0f} tasks/s  p50 {r['lease_p50_ms']:.1f} ms  "
                  f"p99 {r['lease_p99_ms']:.1f} ms  lost {r['lost']}  dup {r['duplicates']}", flush=True)
    return offset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=20_000)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every arm; the median is kept")
    ap.add_argument("--no-in-run", action="store_true", help="skip the (slow) propel run arms")
    args = ap.parse_args()
    samples: dict[str, list[dict[str, Any]]] = {}
    with scratch_postgres() as url, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        serve, serve_api = start_http_arm(url, "http", work, None)
        try:  # phase 1: nothing else runs
            offset = run_rounds(url, ["bare_sql", "store", "store_select", "http"], args, {"http": serve_api},
                                samples, 1)
            if not args.no_in_run:  # phase 2: a training `propel run` (API on) next to the same `propel serve`
                from curriculum.bootstrap import bootstrap

                gen = bootstrap("arith", data_dir=RESULTS.parent / ".cache", steps=300, show_progress=False).path
                daemon, run_api = start_http_arm(url, "http_in_run", work, gen)
                try:
                    run_rounds(url, ["http_beside_run", "http_in_run"], args,
                               {"http_beside_run": serve_api, "http_in_run": run_api}, samples, offset)
                finally:
                    stop(daemon)
        finally:
            stop(serve)
    res = {a: median_sample(s) for a, s in samples.items()}
    rat = ratios(res)
    write_result("queue_throughput", {"tasks": args.tasks, "consumers": args.consumers, "batch": args.batch,
                                      "rounds": args.rounds, "arms": res, "ratios": rat,
                                      "goals": {"store_vs_bare": 0.7, "http_tasks_per_s": 2000,
                                                "http_in_run_vs_serve": 0.8}})
    plot(res, RESULTS / "queue_throughput.png",
         f"frontier queue on PostgreSQL, {args.consumers} consumers, batch {args.batch}, {os.cpu_count()} CPUs "
         f"(median of {args.rounds} rounds)")
    print({k: None if v is None else round(v, 3) for k, v in rat.items()})


if __name__ == "__main__":
    main()

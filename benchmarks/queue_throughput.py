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
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, scratch_postgres, write_result

RUN = "bench"


def run_id_of(url: str, name: str = RUN) -> int:
    from curriculum.store import repo
    from curriculum.store.db import Store

    store = Store(url)
    try:
        with store.session() as s:
            return repo.get_or_create_run(s, name, "bench", {})
    finally:
        store.dispose()


def seed(url: str, n: int, run_id: int, offset: int) -> list[int]:
    """``n`` ready tasks with realistic messages in the run's queue; returns their task ids."""
    from sqlalchemy import text

    from curriculum.store.db import Store

    store = Store(url)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE queue SET state = 'acked' WHERE state <> 'acked'"))  # earlier arms' leftovers
        ids = conn.execute(text(
            "INSERT INTO tasks (run_id, domain, content_hash, text, payload, valid, topic, created_at) "
            "SELECT :run, CASE WHEN g % 10 < 7 THEN 'arith' ELSE 'math' END, md5(g::text), g::text, '{}', true, "
            "'mul:' || (g % 5), now() FROM generate_series(CAST(:lo AS int), CAST(:hi AS int)) g RETURNING id"),
            {"run": run_id, "lo": offset, "hi": offset + n - 1}).scalars().all()
        conn.execute(text(
            "INSERT INTO queue (task_id, run_id, state, message, topic, domain, predicted_in_band, solver, attempts, "
            "enqueued_at) SELECT t.id, t.run_id, 'ready', json_build_object('schema_version', 1, 'id', t.id, "
            "'domain', t.domain, 'solver_prompt', 'Compute: 37*(12+' || t.id || ')\nAnswer with a single integer.', "
            "'grading', json_build_object('expr', '37*(12+5)', 'answer', 629, 'op_counts', "
            "json_build_object('+', 1, '-', 0, '*', 1)), 'predicted_in_band', (t.id % 100) / 100.0, "
            "'spot_check', NULL, 'topic', t.topic, 'band', json_build_array(1, 3), 'k', 8, "
            "'solver', 'synthetic:bench', "
            "'provenance', json_build_object('generator_step', 120, 'adapter_hash', md5(t.id::text), "
            "'probe_ensemble_id', 'ens-1', 'reference_model', 'bootstrap:arith', 'reference_fingerprint', "
            "'sha256:' || md5(t.text), 'run', 'bench'), 'created_at', now()), t.topic, t.domain, "
            "(t.id % 100) / 100.0, 'synthetic:bench', 0, now() FROM tasks t WHERE t.id = ANY(:ids)"), {"ids": ids})
        conn.execute(text("ANALYZE queue"))
    store.dispose()
    return [int(i) for i in ids]


def consume_bare(url: str, run_id: int, batch: int, out: Any, start: Any) -> None:
    import secrets

    import psycopg
    from sqlalchemy import make_url

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    got, lat = [], []
    with psycopg.connect(conninfo, autocommit=True) as conn:
        start.wait()
        while True:
            t0 = time.perf_counter()
            rows = conn.execute(
                "UPDATE queue SET state='leased', lease_until=now()+interval '600 s', attempts=attempts+1, "
                "consumer='bench', lease_token=%s || id WHERE id IN (SELECT id FROM queue WHERE run_id=%s AND "
                "(state='ready' OR (state='leased' AND lease_until < now())) ORDER BY enqueued_at, id LIMIT %s "
                "FOR UPDATE SKIP LOCKED) RETURNING task_id, lease_token, message",
                (secrets.token_hex(12) + "-", run_id, batch)).fetchall()
            lat.append(time.perf_counter() - t0)
            if not rows:
                break
            conn.execute(
                "UPDATE queue q SET state='acked', acked_at=now(), lease_token=NULL, outcome_solved=v.s, "
                "outcome_n=8, outcome_solver='bench' FROM unnest(%s::int[], %s::text[], %s::int[]) AS v(t, tok, s) "
                "WHERE q.run_id=%s AND q.task_id=v.t AND q.lease_token=v.tok AND q.state='leased'",
                ([r[0] for r in rows], [r[1] for r in rows], [1] * len(rows), run_id))
            got += [r[0] for r in rows]
    out.put((got, lat))


def consume_store(url: str, run_id: int, batch: int, out: Any, start: Any, select: bool = False) -> None:
    import random

    from sqlalchemy import text

    from curriculum.store import queue
    from curriculum.store.db import Store
    from curriculum.store.selection import Selection, lease_selected

    store = Store(url)
    with store.autocommit() as s:  # connect before timing, as the bare arm does
        s.execute(text("SELECT 1"))
    sel = Selection("domain", {"arith": 0.7, "math": 0.3}, min_predicted=0.0, max_predicted=1.0)
    rng = random.Random(os.getpid())
    got, lat = [], []
    start.wait()
    while True:
        t0 = time.perf_counter()
        with store.autocommit() as s:  # as the API leases: one statement, no BEGIN/COMMIT
            if select:
                leased = lease_selected(s, batch, 600, "bench", 5, run_id=run_id, sel=sel, rng=rng)
            else:
                leased = queue.lease(s, batch, 600, "bench", 5, run_id=run_id)
        lat.append(time.perf_counter() - t0)
        if not leased:
            break
        with store.autocommit() as s:
            queue.ack_many(s, [queue.Outcome(x.task_id, x.lease_token, 1, 8, "bench") for x in leased], run_id=run_id)
        got += [x.task_id for x in leased]
    store.dispose()
    out.put((got, lat))


def consume_http(base: str, run_id: int, batch: int, out: Any, start: Any) -> None:
    from propel_sdk.client import Ack, PropelClient

    got, lat = [], []
    with PropelClient(base) as client:
        client.status()  # connect before timing
        start.wait()
        while True:
            t0 = time.perf_counter()
            leased = client.lease(batch, 600, "bench")
            lat.append(time.perf_counter() - t0)
            if not leased:
                break
            client.ack_many([Ack(x, 1, 8, "bench") for x in leased])
            got += [x.id for x in leased]
    out.put((got, lat))


def drain(target: Callable[..., None], arg: str, run_id: int, consumers: int, batch: int,
          seeded: list[int]) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start = ctx.Barrier(consumers + 1)  # timing starts once every consumer has imported and connected
    procs = [ctx.Process(target=target, args=(arg, run_id, batch, out, start)) for _ in range(consumers)]
    for p in procs:
        p.start()
    start.wait(timeout=300)
    t0 = time.perf_counter()
    results = [out.get(timeout=900) for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    ids = [t for got, _ in results for t in got]
    lat = sorted(x for _, ls in results for x in ls)
    mine = set(seeded)
    return {"tasks_per_s": len(ids) / wall, "seconds": wall, "delivered": len(ids), "distinct": len(set(ids)),
            "lost": len(mine - set(ids)), "duplicates": len(ids) - len(set(ids)),
            "lease_p50_ms": 1000 * statistics.median(lat), "lease_p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))]}


def run_arm(arm: str, url: str, n: int, consumers: int, batch: int, offset: int = 1) -> dict[str, float]:
    """One database arm (``bare_sql``, ``store``, ``store_select``) on ``n`` freshly seeded tasks."""
    run_id = run_id_of(url)
    seeded = seed(url, n, run_id, offset)
    target = {"bare_sql": consume_bare, "store": consume_store, "store_select": _select_store}[arm]
    return drain(target, url, run_id, consumers, batch, seeded)


def _select_store(url: str, run_id: int, batch: int, out: Any, start: Any) -> None:
    consume_store(url, run_id, batch, out, start, select=True)


def config(path: Path, url: str, port: int, data_dir: Path, generator: Path | None) -> Path:
    """``propel serve``: the store and port only; ``propel run``: the e2e tests' small CPU daemon."""
    from tests.e2e.conftest import write_config

    if generator is None:
        path.write_text(f'data_dir = "{data_dir}"\nrun_name = "{RUN}"\n[store]\nurl = "{url}"\n[api]\nport = {port}\n')
        return path
    return write_config(path, generator, data_dir, url, RUN, port=port)


def start_cli(args: list[str], cfg: Path, log: Path, port: int, timeout_s: float) -> subprocess.Popen[bytes]:
    from tests.integration.servers import wait_http

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
    from tests.integration.servers import free_port

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

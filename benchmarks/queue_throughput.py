"""Frontier-queue throughput on PostgreSQL: 10,000 tasks leased and acked by 4 concurrent consumers.

Three arms in one run, on the same machine and database:
  * ``bare_sql``  — a bare ``FOR UPDATE SKIP LOCKED`` lease loop in raw psycopg (the floor);
  * ``store``     — our ``curriculum.store.queue.lease/ack`` (tokens, attempts, dead-lettering);
  * ``http``      — the same through the HTTP API and the Python client (informational).
Reports tasks/s, p50/p99 lease latency, and checks that no task was delivered twice within a
live lease and none was lost.

    python -m benchmarks.queue_throughput [--tasks 10000] [--consumers 4] [--batch 10]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, scratch_postgres, write_result

ARMS = ("bare_sql", "store", "http")


def seed(url: str, n: int) -> None:
    from sqlalchemy import text

    from curriculum.store.db import Store

    store = Store(url)
    with store.engine.begin() as conn:
        conn.execute(text("TRUNCATE queue, tasks RESTART IDENTITY CASCADE"))
        conn.execute(text("INSERT INTO tasks (domain, content_hash, text, payload, valid, created_at) "
                          "SELECT 'arith', md5(g::text), g::text, '{}', true, now() FROM generate_series(1, :n) g"),
                     {"n": n})
        conn.execute(text("INSERT INTO queue (task_id, state, message, attempts, enqueued_at) "
                          "SELECT id, 'ready', json_build_object('id', id), 0, now() FROM tasks"))
    store.dispose()


def consume_bare(url: str, batch: int, out: Any) -> None:
    import psycopg
    from sqlalchemy import make_url

    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    got, lat = [], []
    with psycopg.connect(conninfo, autocommit=True) as conn:
        while True:
            t0 = time.perf_counter()
            rows = conn.execute(
                "UPDATE queue SET state='leased', lease_until=now()+interval '600 s', attempts=attempts+1 "
                "WHERE id IN (SELECT id FROM queue WHERE state='ready' ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) "
                "RETURNING task_id", (batch,)).fetchall()
            lat.append(time.perf_counter() - t0)
            if not rows:
                break
            ids = [r[0] for r in rows]
            for tid in ids:
                conn.execute("UPDATE queue SET state='acked', acked_at=now() WHERE task_id=%s AND state='leased'",
                             (tid,))
            got += ids
    out.put((got, lat))


def consume_store(url: str, batch: int, out: Any) -> None:
    from curriculum.store import queue
    from curriculum.store.db import Store

    store = Store(url)
    got, lat = [], []
    while True:
        t0 = time.perf_counter()
        with store.session() as s:
            leased = queue.lease(s, batch, 600, "bench", max_attempts=5)
        lat.append(time.perf_counter() - t0)
        if not leased:
            break
        for x in leased:
            with store.session() as s:
                queue.ack(s, x.task_id, solved=1, n=8, solver="bench", lease_token=x.lease_token)
        got += [x.task_id for x in leased]
    store.dispose()
    out.put((got, lat))


def consume_http(base: str, batch: int, out: Any) -> None:
    from propel_sdk.client import PropelClient

    got, lat = [], []
    with PropelClient(base) as client:
        while True:
            t0 = time.perf_counter()
            leased = client.lease(batch, 600, "bench")
            lat.append(time.perf_counter() - t0)
            if not leased:
                break
            for x in leased:
                client.ack(x, solved=1, n=8, solver="bench")
            got += [x.id for x in leased]
    out.put((got, lat))


def run_arm(arm: str, url: str, n: int, consumers: int, batch: int) -> dict[str, float]:
    seed(url, n)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    target, arg = {"bare_sql": (consume_bare, url), "store": (consume_store, url)}.get(arm, (consume_http, url))
    server = None
    if arm == "http":
        server, arg = start_api(url)
    procs = [ctx.Process(target=target, args=(arg, batch, out)) for _ in range(consumers)]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    results = [out.get(timeout=900) for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    if server is not None:
        server.terminate()
        server.wait(timeout=10)
    ids = [t for got, _ in results for t in got]
    lat = sorted(x for _, ls in results for x in ls)
    return {"tasks_per_s": len(ids) / wall, "seconds": wall, "delivered": len(ids), "distinct": len(set(ids)),
            "lost": n - len(set(ids)), "duplicates_within_lease": len(ids) - len(set(ids)),
            "lease_p50_ms": 1000 * statistics.median(lat), "lease_p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))]}


def start_api(url: str) -> tuple[Any, str]:
    import subprocess
    import sys

    from tests.integration.servers import free_port, wait_http

    port = free_port()
    code = ("import uvicorn; from curriculum.store.db import Store; "
            "from daemon.http.api import ApiContext, create_app; "
            f"uvicorn.run(create_app(ApiContext(store=Store({url!r}, pool_size=8), run_name='bench')), "
            f"host='127.0.0.1', port={port}, log_level='warning')")
    proc = subprocess.Popen([sys.executable, "-c", code])
    wait_http(f"http://127.0.0.1:{port}/openapi.json", 60, proc)
    return proc, f"http://127.0.0.1:{port}"


def plot(res: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    arms = list(res)
    a.bar(arms, [res[x]["tasks_per_s"] for x in arms], color=["#999", "#4c72b0", "#dd8452"][: len(arms)])
    a.set_ylabel("tasks / s (lease + ack)")
    b.bar([f"{x}\np50" for x in arms], [res[x]["lease_p50_ms"] for x in arms], color="#4c72b0")
    b.bar([f"{x}\np99" for x in arms], [res[x]["lease_p99_ms"] for x in arms], color="#c44e52")
    b.set_ylabel("lease latency (ms)")
    fig.suptitle("frontier queue on PostgreSQL, 4 consumers")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--arms", default=",".join(ARMS))
    args = ap.parse_args()
    res: dict[str, dict[str, float]] = {}
    with scratch_postgres() as url:
        for arm in args.arms.split(","):
            res[arm] = run_arm(arm, url, args.tasks, args.consumers, args.batch)
            r = res[arm]
            print(f"{arm:9s} {r['tasks_per_s']:8.0f} tasks/s  p50 {r['lease_p50_ms']:.1f} ms  "
                  f"p99 {r['lease_p99_ms']:.1f} ms  lost {r['lost']}  dup {r['duplicates_within_lease']}")
    ratio = res["store"]["tasks_per_s"] / res["bare_sql"]["tasks_per_s"] if {"store", "bare_sql"} <= set(res) else None
    write_result("queue_throughput", {"tasks": args.tasks, "consumers": args.consumers, "batch": args.batch,
                                      "arms": res, "store_vs_bare_ratio": ratio})
    plot(res, RESULTS / "queue_throughput.png")
    if ratio is not None:
        print(f"store / bare SKIP LOCKED = {ratio:.2f}× (goal ≥ 0.7×)")


if __name__ == "__main__":
    main()

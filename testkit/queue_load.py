"""The queue-throughput measurement (``benchmarks/queue_throughput.py`` and the queue load test):
seed a run's queue with realistic messages, drain it with concurrent spawned consumers (bare SQL,
the store's queue functions, or the HTTP client), and report tasks/s, lease latency, duplicates and
losses."""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

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
    # every arm drains from the same table state: earlier arms' acks leave dead rows and index entries that
    # would slow whichever arm comes later in a round (VACUUM cannot run inside a transaction)
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM (ANALYZE) queue"))
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

"""Trainer-side selection (mixtures over domains or topics, predicted in-band range, solver) on
both databases, through the store and through the real HTTP API."""

from __future__ import annotations

import random
from collections import Counter

import httpx
import pytest

from curriculum.store import queue, repo
from curriculum.store.db import Store
from curriculum.store.selection import Selection, lease_selected, quotas, unknown_names
from daemon.http.api import ApiContext, create_app
from propel_sdk.client import PropelClient
from testkit.servers import serve_app

pytestmark = pytest.mark.integration


def seed(store: Store, run: str = "sel") -> tuple[int, dict[int, dict[str, object]]]:
    """24 tasks: domains arith (16) / math (8); topics t0..t3; predicted 0.05 … 0.95; two solvers."""
    with store.session() as s:
        run_id = repo.get_or_create_run(s, run, "h", {})
        specs = [("arith" if i % 3 else "math", f"t{i % 4}", round(0.05 + 0.9 * i / 23, 3),
                  "solver-a" if i % 2 else "solver-b") for i in range(24)]
        ids = repo.add_tasks(s, run_id, [repo.NewTask(d, f"{run}{i}", f"{i}", True, {}, topic=t)
                                         for i, (d, t, _, _) in enumerate(specs)])
        msgs = {t: {"id": t, "domain": d, "topic": tp, "predicted_in_band": p, "solver": sv}
                for t, (d, tp, p, sv) in zip(ids, specs, strict=True)}
        queue.enqueue(s, [(t, run_id, m["topic"], m) for t, m in msgs.items()])  # type: ignore[misc]
    return run_id, msgs


def test_quotas_follow_the_weights() -> None:
    rng = random.Random(0)
    total: Counter[str] = Counter()
    for _ in range(200):
        q = quotas(10, {"a": 3, "b": 1}, rng)
        assert sum(q.values()) == 10
        total.update(q)
    assert 0.7 < total["a"] / 2000 < 0.8


def test_mixture_range_and_solver(store: Store) -> None:
    run_id, msgs = seed(store)
    with store.session() as s:
        got = lease_selected(s, 8, 60, "c", 3, run_id=run_id, sel=Selection("domain", {"math": 1.0}))
    assert len(got) == 8 and {msgs[x.task_id]["domain"] for x in got} == {"math"}
    taken = {x.task_id for x in got}
    with store.session() as s:  # math is exhausted: its share is filled from arith, the other named key
        got = lease_selected(s, 6, 60, "c", 3, run_id=run_id, sel=Selection("domain", {"math": 5, "arith": 1}),
                             rng=random.Random(1))
    assert len(got) == 6 and {msgs[x.task_id]["domain"] for x in got} == {"arith"}
    taken |= {x.task_id for x in got}
    with store.session() as s:
        sel = Selection("topic", {"t1": 1, "t3": 1}, min_predicted=0.3, max_predicted=0.8, solver="solver-a")
        got = lease_selected(s, 50, 60, "c", 3, run_id=run_id, sel=sel)
    assert got, "some tasks match"
    for x in got:
        m = msgs[x.task_id]
        assert m["topic"] in ("t1", "t3") and 0.3 <= m["predicted_in_band"] <= 0.8  # type: ignore[operator]
        assert m["solver"] == "solver-a"
    expected = {t for t, m in msgs.items() if m["topic"] in ("t1", "t3") and m["solver"] == "solver-a"
                and 0.3 <= m["predicted_in_band"] <= 0.8} - taken  # type: ignore[operator]
    assert {x.task_id for x in got} == expected
    with store.session() as s:
        assert unknown_names(s, run_id, Selection("domain", {"arith": 1, "nope": 1}, solver="ghost")) == [
            ("domain", "nope"), ("solver", "ghost")]


def test_other_runs_names_are_unknown(store: Store) -> None:
    run_a, _ = seed(store, "a")
    with store.session() as s:
        run_b = repo.get_or_create_run(s, "b", "h", {})
        assert unknown_names(s, run_b, Selection("topic", {"t0": 1})) == [("topic", "t0")]
        assert unknown_names(s, run_a, Selection("topic", {"t0": 1})) == []


def test_selection_over_http(store: Store) -> None:
    _, msgs = seed(store)
    with serve_app(create_app(ApiContext(store=store, run_name="sel"))) as url, PropelClient(url) as client:
        got = client.lease(12, 60, "mix", domains={"arith": 3, "math": 1}, predicted_in_band=(0.0, 1.0))
        assert len(got) == 12 and {t.message["domain"] for t in got} <= {"arith", "math"}
        only = client.lease(5, 60, "solver", solver="solver-b", topics={"t0": 1, "t2": 1})
        assert only and all(t.message["solver"] == "solver-b" and t.message["topic"] in ("t0", "t2") for t in only)
        for body, field in [({"domains": {"arith": 1, "mathh": 1}}, ["body", "domains", "mathh"]),
                            ({"topics": {"t9": 1}}, ["body", "topics", "t9"]),
                            ({"solver": "ghost"}, ["body", "solver"])]:
            resp = httpx.post(f"{url}/v1/tasks/lease", json={"consumer": "x", **body})
            assert resp.status_code == 422 and resp.json()["detail"][0]["loc"] == field, resp.text
            assert "unknown" in resp.json()["detail"][0]["msg"]
        for bad in ['"domains": {"arith": 1}, "topics": {"t0": 1}', '"domains": {"arith": 0}', '"domains": {}',
                    '"predicted_in_band": {"min": 0.9, "max": 0.1}', '"predicted_in_band": {"min": -1}',
                    '"domains": {"arith": 1e999}', '"domains": {"arith": NaN}', '"solver": ""']:
            resp = httpx.post(f"{url}/v1/tasks/lease", content='{"consumer": "x", ' + bad + "}",
                              headers={"content-type": "application/json"})
            assert resp.status_code == 422, (bad, resp.text)
    assert len(msgs) == 24

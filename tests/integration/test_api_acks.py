"""Acks over HTTP under the trainer path's faults (#37, #36.4), against a real server on SQLite and
PostgreSQL: every refusal in a batch is per item, both stores answer alike, an untried nack costs no
attempt, and concurrent batches registering new versions in opposite order do not deadlock."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from curriculum.store import solver_versions
from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem
from daemon.http.api import ApiContext, create_app
from propel_sdk.client import PropelClient
from testkit.seeding import seed
from testkit.servers import serve_app

pytestmark = pytest.mark.integration
TOKEN = "acks-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def api(store: Store) -> Iterator[tuple[str, Store]]:
    with serve_app(create_app(ApiContext(store=store, run_name="api", token=TOKEN, max_attempts=2))) as url:
        yield url, store


def lease(url: str, n: int) -> list[dict[str, Any]]:
    with PropelClient(url, token=TOKEN) as client:
        return [{"id": t.id, "lease_token": t.lease_token} for t in client.lease(n=n, lease_s=60, consumer="t")]


def outcome(t: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"id": t["id"], "lease_token": t["lease_token"], "solved": 2, "n": 8, "solver": "pol",
            "version": "step-1", **fields}


def test_one_bad_item_is_refused_alone(api: tuple[str, Store]) -> None:
    """A too-long solver id, impossible counts, an unorderable version, a repeated task and a
    non-object each get ``invalid`` with a reason; the good items are stored (both stores alike)."""
    url, store = api
    seed(store, 6)
    held = lease(url, 6)
    body = {"outcomes": [
        outcome(held[0]),
        outcome(held[1], solver="n" * 200, version="v" * 100),
        outcome(held[2], solved=8, errors=1),
        outcome(held[3], version="v1.2.10"),
        outcome(held[4]),
        outcome(held[4]),
        "not an object",
        outcome(held[5], errors=3),
    ]}
    resp = httpx.post(f"{url}/v1/tasks/ack", json=body, headers=AUTH)
    assert resp.status_code == 200, resp.text
    results = resp.json()["results"]
    assert [r["status"] for r in results] == ["acked", "invalid", "invalid", "invalid", "acked", "invalid",
                                              "invalid", "acked"]
    assert [r["id"] for r in results] == [*(h["id"] for h in held[:5]), held[4]["id"], None, held[5]["id"]]
    limit = results[1]["detail"]
    assert f"at most {solver_versions.SOLVER_ID_MAX}" in limit and "shorten" in limit and "301 characters" in limit
    assert "cannot exceed n" in results[2]["detail"]
    assert "version" in results[3]["detail"] and "order" in results[3]["detail"]
    assert "appears again" in results[5]["detail"] and "outcomes[6]" in results[6]["detail"]
    assert resp.json()["counts"] == {"acked": 3, "invalid": 5}
    with store.session() as s:
        states = dict(s.execute(select(QueueItem.task_id, QueueItem.state)).all())
        labels = {lb.task_id: lb.errors for lb in s.scalars(select(Label).where(Label.source == "consumer"))}
    assert [states[h["id"]] for h in held] == ["acked", "leased", "leased", "leased", "acked", "acked"]
    assert labels == {held[0]["id"]: 0, held[4]["id"]: 0, held[5]["id"]: 3}


def test_single_ack_with_a_too_long_solver_id_is_a_422_naming_the_limit(api: tuple[str, Store]) -> None:
    url, store = api
    seed(store, 1)
    [held] = lease(url, 1)
    resp = httpx.post(f"{url}/v1/tasks/{held['id']}/ack", headers=AUTH,
                      json={k: v for k, v in outcome(held, solver="n" * 256, version="1").items() if k != "id"})
    assert resp.status_code == 422
    assert "258 characters" in resp.text and f"at most {solver_versions.SOLVER_ID_MAX}" in resp.text


def test_announcing_a_version_whose_id_is_too_long_is_a_422(api: tuple[str, Store]) -> None:
    """Its acks could never be stored: refused where the trainer first names it (#37.3)."""
    url, store = api
    resp = httpx.post(f"{url}/v1/solvers/{'n' * 200}/versions", json={"version": "v" * 100}, headers=AUTH)
    assert resp.status_code == 422 and "301 characters" in resp.text and "shorten" in resp.text
    with store.session() as s:
        assert solver_versions.versions(s, "n" * 200) == []


def test_old_token_is_told_lease_lost_over_http(api: tuple[str, Store]) -> None:
    """(#37.8) After the new holder acked, the old holder's ack is a 409, not ``200 already_acked``."""
    url, store = api
    seed(store, 1)
    with PropelClient(url, token=TOKEN) as client:
        [old] = client.lease(n=1, lease_s=0.5, consumer="old")
        time.sleep(0.6)
        [new] = client.lease(n=1, lease_s=60, consumer="new")
        assert client.ack(new, solved=1, n=8, solver="pol@1") == "acked"
    late = httpx.post(f"{url}/v1/tasks/{old.id}/ack", headers=AUTH, json={
        "solved": 5, "n": 8, "solver": "pol@1", "lease_token": old.lease_token})
    assert late.status_code == 409 and "lease_lost" in late.text
    batch = httpx.post(f"{url}/v1/tasks/ack", headers=AUTH, json={"outcomes": [
        {"id": old.id, "solved": 5, "n": 8, "solver": "pol@1", "lease_token": old.lease_token},
    ]}).json()
    assert batch["results"] == [{"id": old.id, "status": "lease_lost"}]


def test_refused_acks_register_no_version(api: tuple[str, Store]) -> None:
    """(#37) The queue decides an ack before its version is registered: acks refused for a wrong lease
    token (409), an unknown task (404) or a repeat of an acked task, one at a time or in a batch, leave
    their versions unregistered, so none of them becomes current (what spot-checks and drift target)."""
    url, store = api
    seed(store, 2)
    held = lease(url, 2)
    first = httpx.post(f"{url}/v1/tasks/ack", headers=AUTH, json={"outcomes": [outcome(held[0], version="step-1")]})
    assert [r["status"] for r in first.json()["results"]] == ["acked"]
    single = {k: v for k, v in outcome(held[1], version="step-999", lease_token="not-my-token").items() if k != "id"}
    assert httpx.post(f"{url}/v1/tasks/{held[1]['id']}/ack", headers=AUTH, json=single).status_code == 409
    assert httpx.post(f"{url}/v1/tasks/999999/ack", headers=AUTH,
                      json={**single, "version": "step-998"}).status_code == 404
    batch = httpx.post(f"{url}/v1/tasks/ack", headers=AUTH, json={"outcomes": [
        outcome(held[1], version="step-997", lease_token="not-my-token"),
        {**outcome(held[1], version="step-996"), "id": 999999},
        outcome(held[0], version="step-995"),
    ]})
    assert [r["status"] for r in batch.json()["results"]] == ["lease_lost", "not_found", "already_acked"]
    with store.session() as s:
        assert [v.version for v in solver_versions.versions(s, "pol")] == ["step-1"]
        current = solver_versions.current(s, "pol")
    assert current is not None and current.version == "step-1"


def test_a_version_given_two_orders_in_one_batch_is_refused_for_the_later_order_alone(
        api: tuple[str, Store]) -> None:
    """The read-only check before the ack counts the batch's own earlier registrations: a new version
    sent with orders 5 and 7 is registered with 5 (sorted order) and the order-7 item is ``invalid``."""
    url, store = api
    seed(store, 2)
    held = lease(url, 2)
    resp = httpx.post(f"{url}/v1/tasks/ack", headers=AUTH, json={"outcomes": [
        outcome(held[0], version="ckpt-a", version_order=7), outcome(held[1], version="ckpt-a", version_order=5)]})
    results = resp.json()["results"]
    assert [r["status"] for r in results] == ["invalid", "acked"], results
    assert "registered with order 5; order 7 contradicts it" in results[0]["detail"]
    with store.session() as s:
        assert [(v.version, v.order) for v in solver_versions.versions(s, "pol")] == [("ckpt-a", 5)]
        assert s.scalar(select(QueueItem.state).where(QueueItem.task_id == held[0]["id"])) == "leased"


def test_a_version_registered_with_another_order_after_the_check_rolls_the_batch_back_and_retries(
        api: tuple[str, Store], monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the read-only check cannot see: another transaction registers the version with another
    order between the check and the registration after the ack. The batch's acks are rolled back with
    it and the batch runs again: the check now refuses that item alone, the other one is acked once."""
    url, store = api
    seed(store, 2)
    held = lease(url, 2)
    with store.session() as s:
        solver_versions.ensure_registered(s, "pol", "ckpt-b", 3, source="announce")
    real, calls = solver_versions.check_registrations, []

    def blind_first(sess: Any, keys: Any) -> Any:  # the first check ran before the other registration
        calls.append(keys)
        return {} if len(calls) == 1 else real(sess, keys)

    monkeypatch.setattr(solver_versions, "check_registrations", blind_first)
    resp = httpx.post(f"{url}/v1/tasks/ack", headers=AUTH, json={"outcomes": [
        outcome(held[0], version="ckpt-b", version_order=9), outcome(held[1], version="step-4")]})
    results = resp.json()["results"]
    assert [r["status"] for r in results] == ["invalid", "acked"] and len(calls) == 2, results
    assert "registered with order 3; order 9 contradicts it" in results[0]["detail"]
    with store.session() as s:
        states = dict(s.execute(select(QueueItem.task_id, QueueItem.state)).all())
        labelled = list(s.scalars(select(Label.task_id).where(Label.source == "consumer")))
        assert {v.version: v.order for v in solver_versions.versions(s, "pol")} == {"ckpt-b": 3, "step-4": 4}
    assert [states[h["id"]] for h in held] == ["leased", "acked"] and labelled == [held[1]["id"]]


def test_untried_nack_over_http(api: tuple[str, Store]) -> None:
    """(#36.4) ``"tried": false`` gives the attempt back: with max_attempts=2, three untried nacks
    in a row leave the task leasable; the default (tried) nack still counts."""
    url, store = api
    [tid] = seed(store, 1)
    for _ in range(3):
        [held] = lease(url, 1)
        resp = httpx.post(f"{url}/v1/tasks/{tid}/nack", headers=AUTH,
                          json={"lease_token": held["lease_token"], "tried": False})
        assert resp.json() == {"id": tid, "status": "returned", "late": False}
    with store.session() as s:
        assert s.execute(select(QueueItem.state, QueueItem.attempts)).one() == ("ready", 0)
    for _ in range(2):
        [held] = lease(url, 1)
        assert httpx.post(f"{url}/v1/tasks/{tid}/nack", headers=AUTH,
                          json={"lease_token": held["lease_token"]}).json()["status"] == "returned"
    with store.session() as s:
        assert s.execute(select(QueueItem.state, QueueItem.attempts)).one() == ("dead", 2)


def test_opposite_order_version_registrations_do_not_deadlock(pg_store: Store,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Two batches, each registering two new versions in opposite item order, held together after
    each one's first registration (a barrier around the real registration): registered in sorted
    order, the second waits for the first instead of PostgreSQL aborting one as a deadlock."""
    store = pg_store
    seed(store, 4)
    register = solver_versions.ensure_registered
    barrier = threading.Barrier(2)
    local = threading.local()

    def held_together(*args: Any, **kwargs: Any) -> Any:
        got = register(*args, **kwargs)
        if not getattr(local, "waited", False):
            local.waited = True
            # BrokenBarrierError: the other batch waits on this one's registration, nothing to meet
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=3)
        return got

    monkeypatch.setattr(solver_versions, "ensure_registered", held_together)
    with serve_app(create_app(ApiContext(store=store, run_name="api", token=TOKEN))) as url:
        held = lease(url, 4)
        first = [outcome(held[0], version="step-1"), outcome(held[1], version="step-2")]
        second = [outcome(held[2], version="step-2"), outcome(held[3], version="step-1")]

        def post(items: list[dict[str, Any]]) -> httpx.Response:
            return httpx.post(f"{url}/v1/tasks/ack", json={"outcomes": items}, headers=AUTH, timeout=60)

        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(post, [first, second]))
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    assert [r["status"] for a in answers for r in a.json()["results"]] == ["acked"] * 4

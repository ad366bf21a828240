"""The HTTP API and the Python client against a real uvicorn server and the real store."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import select, update

from curriculum.store import queue, repo
from curriculum.store.db import Store
from curriculum.store.models import DaemonState, Label, utcnow
from daemon.http.api import ApiContext, create_app
from propel_sdk.client import Ack, PropelClient, PropelClientError
from testkit.seeding import seed
from testkit.servers import serve_app

pytestmark = pytest.mark.integration
TOKEN = "t0k3n-for-tests"


@pytest.fixture
def api(store: Store) -> Iterator[tuple[str, Store]]:
    ctx = ApiContext(store=store, run_name="api", token=TOKEN, max_attempts=2, max_body_bytes=4096)
    with serve_app(create_app(ctx)) as url:
        yield url, store


def test_auth_required_on_queue_endpoints(api: tuple[str, Store]) -> None:
    url, _ = api
    assert httpx.post(f"{url}/v1/tasks/lease", json={"consumer": "x"}).status_code == 401
    bad = httpx.post(f"{url}/v1/tasks/lease", json={"consumer": "x"}, headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401 and bad.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{url}/v1/status").status_code == 200


def test_lease_ack_nack_renew_through_client(api: tuple[str, Store]) -> None:
    url, store = api
    ids = seed(store, 3)
    with PropelClient(url, token=TOKEN) as client:
        got = client.lease(n=2, lease_s=60, consumer="trainer-a")
        assert [t.id for t in got] == ids[:2] and got[0].message["schema_version"] == 1
        assert client.ack(got[0], solved=2, n=8, solver="pol@1") == "acked"
        assert client.ack(got[0], solved=2, n=8, solver="pol@1") == "already_acked"
        client.renew(got[1], lease_s=120)
        assert client.nack(got[1]) == "returned"
        again = client.lease(n=5, lease_s=60, consumer="trainer-b")
        assert sorted(t.id for t in again) == ids[1:]
        with pytest.raises(PropelClientError) as err:
            client.ack(again[0].id, solved=1, n=8, solver="pol@1", lease_token="f" * 32)
        assert err.value.status == 409
        with pytest.raises(PropelClientError) as err:
            client.ack(999_999, solved=1, n=8, solver="s", lease_token="t")
        assert err.value.status == 404
        with pytest.raises(ValueError, match="no lease token"):
            client.ack(again[0].id + 1000, solved=1, n=8, solver="s")
    with store.session() as s:
        label = s.scalars(select(Label).where(Label.task_id == ids[0])).one()
    assert (label.source, label.solved, label.k, label.in_band) == ("consumer", 2, 8, True)


def test_iterate_drains_the_queue(api: tuple[str, Store]) -> None:
    url, store = api
    ids = seed(store, 7)
    with PropelClient(url, token=TOKEN) as client:
        seen = []
        for task in client.iterate(batch=3, lease_s=30, consumer="it"):
            seen.append(task.id)
            client.ack(task, solved=0, n=4, solver="s")
    assert sorted(seen) == ids
    with store.session() as s:
        assert repo.queue_depths(s) == {"acked": 7}


def test_body_limits_and_validation(api: tuple[str, Store]) -> None:
    url, _ = api
    auth = {"Authorization": f"Bearer {TOKEN}"}
    big = httpx.post(f"{url}/v1/tasks/lease", content=b"{" + b" " * 10_000 + b"}", headers={
        **auth, "content-type": "application/json"})
    assert big.status_code == 413

    def chunks() -> Iterator[bytes]:  # no content-length: the size is counted while streaming
        yield b'{"consumer": "x", "pad": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    streamed = httpx.post(f"{url}/v1/tasks/lease", content=chunks(), headers={
        **auth, "content-type": "application/json"})
    assert streamed.status_code == 413 and "request body above" in streamed.text
    bad_json = httpx.post(f"{url}/v1/tasks/lease", content=b"{not json", headers={
        **auth, "content-type": "application/json"})
    assert bad_json.status_code == 422
    too_many = httpx.post(f"{url}/v1/tasks/1/ack", json={"solved": 9, "n": 8, "solver": "s", "lease_token": "t"},
                          headers=auth)
    assert too_many.status_code == 422
    unknown = httpx.post(f"{url}/v1/tasks/lease", json={"consumer": "x", "bogus": 1}, headers=auth)
    assert unknown.status_code == 422


def test_health_metrics_openapi(api: tuple[str, Store]) -> None:
    url, store = api
    assert httpx.get(f"{url}/healthz").status_code == 503
    with store.session() as s:
        run_id = repo.get_or_create_run(s, "api", "h", {})
        repo.load_state(s, run_id)
        s.execute(update(DaemonState).values(heartbeat_at=utcnow()))
    no_leader = httpx.get(f"{url}/healthz")  # beating but nobody holds the lease: not live
    assert no_leader.status_code == 503 and any("no leader" in p for p in no_leader.json()["problems"])
    with store.session() as s:
        s.execute(update(DaemonState).values(leader_id="host:1:abc"))
    live = httpx.get(f"{url}/healthz")
    assert live.status_code == 200, live.json()
    assert live.json()["problems"] == [] and live.json()["leader"] == "host:1:abc"
    assert live.json()["degraded"] == []
    assert httpx.get(f"{url}/metrics").status_code == 200
    spec = httpx.get(f"{url}/openapi.json").json()
    assert "/v1/tasks/lease" in spec["paths"] and "/v1/tasks/{task_id}/ack" in spec["paths"]


@pytest.mark.parametrize("path,body", [
    ("/v1/tasks/{id}/ack", {"solved": 1, "n": 8, "solver": "s"}),
    ("/v1/tasks/{id}/nack", {}),
    ("/v1/tasks/{id}/renew", {"lease_s": 60}),
    ("/v1/tasks/ack", {"outcomes": [{"id": "{id}", "solved": 1, "n": 8, "solver": "s"}]}),
])
def test_lease_token_required(api: tuple[str, Store], path: str, body: dict[str, object]) -> None:
    """Without a token nothing changes, even on a task another consumer holds: 422 naming the field."""
    url, store = api
    ids = seed(store, 1)
    with PropelClient(url, token=TOKEN) as client:
        [held] = client.lease(n=1, lease_s=60, consumer="holder")
        if "outcomes" in body:
            body = {"outcomes": [{**body["outcomes"][0], "id": held.id}]}  # type: ignore[index]
        resp = httpx.post(url + path.format(id=held.id), json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        if "outcomes" in body:  # a batch refuses the item, not the request (#37)
            [result] = resp.json()["results"]
            assert resp.status_code == 200 and result["status"] == "invalid"
            assert "lease_token" in result["detail"] and "required" in result["detail"].lower()
        else:
            assert resp.status_code == 422
            assert any(d["loc"][-1] == "lease_token" and "required" in d["msg"].lower()
                       for d in resp.json()["detail"])
        assert client.ack(held, solved=1, n=8, solver="s") == "acked"  # the holder's lease was untouched
    assert ids == [held.id]


def test_batched_ack_statuses_and_one_label(api: tuple[str, Store]) -> None:
    url, store = api
    ids = seed(store, 4)
    with PropelClient(url, token=TOKEN) as client:
        got = client.lease(n=3, lease_s=60, consumer="batch")
        outcomes = [Ack(t, solved=2, n=8, solver="pol@2") for t in got]
        outcomes.append(Ack(ids[3], solved=1, n=8, solver="pol@2", lease_token="f" * 30))
        first = client.ack_many(outcomes)
        assert first == {**{t.id: "acked" for t in got}, ids[3]: "not_leased"}
        again = client.ack_many([Ack(t.id, solved=0, n=8, solver="other", lease_token=t.lease_token) for t in got])
        assert set(again.values()) == {"already_acked"}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    dup = httpx.post(f"{url}/v1/tasks/ack", headers=auth, json={"outcomes": [
        {"id": ids[3], "solved": 1, "n": 8, "solver": "s", "lease_token": "x"}] * 2})
    assert dup.status_code == 200 and [r["status"] for r in dup.json()["results"]] == ["not_leased", "invalid"]
    assert "once per batch" in dup.json()["results"][1]["detail"]
    empty = httpx.post(f"{url}/v1/tasks/ack", headers=auth, json={"outcomes": []})
    assert empty.status_code == 422
    with store.session() as s:
        labels = s.scalars(select(Label).where(Label.source == "consumer")).all()
    assert sorted((lb.task_id, lb.solver_id, lb.solved) for lb in labels) == [(t.id, "pol@2", 2) for t in got]


def test_api_serves_only_its_own_run(store: Store) -> None:
    """Two runs in one store: each run's API leases, acks and counts only that run's tasks."""
    mine = seed(store, 2)
    with store.session() as s:
        other_run = repo.get_or_create_run(s, "other", "h", {})
        theirs = repo.add_tasks(s, other_run, [repo.NewTask("arith", f"o{i}", f"{i}", True, {}) for i in range(3)])
        queue.enqueue(s, [(t, other_run, "add:1", {"id": t, "schema_version": 1}) for t in theirs])
    with serve_app(create_app(ApiContext(store=store, run_name="api"))) as url_a, \
            serve_app(create_app(ApiContext(store=store, run_name="other"))) as url_b, \
            PropelClient(url_a) as a, PropelClient(url_b) as b:
        assert httpx.get(f"{url_a}/v1/status").json()["queue"] == {"ready": 2}
        got_b = b.lease(n=10, lease_s=60, consumer="b")
        assert sorted(t.id for t in got_b) == theirs
        with pytest.raises(PropelClientError) as err:  # run a's API does not know run b's task
            a.ack(got_b[0].id, solved=1, n=8, solver="s", lease_token=got_b[0].lease_token)
        assert err.value.status == 404
        assert sorted(t.id for t in a.lease(n=10, lease_s=60, consumer="a")) == mine
        assert httpx.get(f"{url_b}/v1/status").json()["queue"] == {"leased": 3}

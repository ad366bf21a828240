"""Solver versions over the real HTTP API and store: announce, versioned acks, trainer labels, bad input."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import select

from curriculum.store import solver_versions
from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem
from daemon.http.api import ApiContext, create_app
from propel_sdk.client import PropelClient, PropelClientError
from testkit.seeding import seed
from testkit.servers import serve_app

pytestmark = pytest.mark.integration
TOKEN = "t0k3n-versions"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def api(store: Store) -> Iterator[tuple[str, Store]]:
    ctx = ApiContext(store=store, run_name="api", token=TOKEN, k=8, band=(1, 3), min_valid_trials=6)
    with serve_app(create_app(ctx)) as url:
        yield url, store


def test_announce_is_idempotent_and_a_lower_version_never_becomes_current(api: tuple[str, Store]) -> None:
    url, store = api
    with PropelClient(url, token=TOKEN) as client:
        first = client.announce("policy", "step-100")
        again = client.announce("policy", "step-100")
        newer = client.announce("policy", 200)
        late = client.announce("policy", "step-150")
        named = client.announce("policy", "rc-final", order=300)
        listed = client.solver_versions("policy")
        with pytest.raises(PropelClientError) as err:
            client.announce("policy", "v1.2.10")  # no step number, no order: refused, says how to fix
        assert err.value.status == 422 and "order" in err.value.detail
        with pytest.raises(PropelClientError) as err:
            client.announce("policy", "step-100", order=5)  # contradicts the order it was registered with
        assert err.value.status == 422
        slash = client.announce("openai:Qwen/Qwen2.5-3B", "7")
    assert first["created"] and first["is_current"] and not again["created"] and again["order"] == 100
    assert newer["is_current"] and newer["order"] == 200
    assert late["created"] and not late["is_current"] and late["current"]["version"] == "200"
    assert named["is_current"] and listed["current"] == "rc-final"
    assert [(v["version"], v["age"]) for v in listed["versions"]] == [
        ("step-100", 3), ("step-150", 2), ("200", 1), ("rc-final", 0)]
    assert slash["solver"] == "openai:Qwen/Qwen2.5-3B" and slash["is_current"]
    with store.session() as s:
        cur = solver_versions.current(s, "policy")
    assert cur is not None and cur.version == "rc-final"


def test_versioned_ack_writes_a_trainer_label_with_errors_excluded(api: tuple[str, Store]) -> None:
    url, store = api
    ids = seed(store, 4)
    with PropelClient(url, token=TOKEN) as client:
        client.announce("pol", 10)
        got = client.lease(n=4, lease_s=60, consumer="trainer")
        assert client.ack(got[0], solved=2, n=8, errors=1, solver="pol", version="step-12",
                          sampling={"temperature": 0.7, "top_p": 0.95}) == "acked"
        assert client.ack(got[1], solved=1, n=8, errors=4, solver="pol", version=10) == "acked"  # 4 valid < 6
        assert client.ack(got[2], solved=8, n=8, solver="pol@step-5") == "acked"  # legacy id: a late outcome
        assert client.ack(got[3], solved=3, n=16, solver="newcomer", version=1) == "acked"  # unknown name
        versions = client.solver_versions("pol")
    with store.session() as s:
        labels = {lab.task_id: lab for lab in s.scalars(select(Label))}
        outcome = s.scalars(select(QueueItem.outcome_solver).where(QueueItem.task_id == ids[0])).one()
        newcomer = solver_versions.current(s, "newcomer")
    a, b, c, d = (labels[i] for i in ids)
    assert (a.source, a.solver_name, a.solver_version, a.solved, a.valid_trials, a.errors, a.in_band) == (
        "consumer", "pol", "step-12", 2, 7, 1, True)
    assert a.sampling == {"temperature": 0.7, "top_p": 0.95} and outcome == "pol@step-12"
    assert (b.valid_trials, b.in_band) == (4, None)  # min_valid_trials applies to trainer outcomes
    assert (c.solver_version, c.in_band) == ("step-5", False)
    assert (d.solver_name, d.in_band) == ("newcomer", True) and newcomer is not None  # 3/16 in [1/8, 3/8]
    assert versions["current"] == "step-12"  # the ack's higher step became current; step-5 did not


@pytest.mark.parametrize(("body", "field"), [
    ({"solved": 1, "n": 8, "errors": 9, "solver": "p"}, "errors"),
    ({"solved": 5, "n": 8, "errors": 4, "solver": "p"}, "solved + errors"),
    ({"solved": -1, "n": 8, "solver": "p"}, "solved"),
    ({"solved": 1, "n": 8, "errors": -2, "solver": "p"}, "errors"),
    ({"solved": 1, "n": 8, "solver": "p", "versoin": "3"}, "versoin"),
    ({"solved": 1, "n": 8, "solver": "p", "version": "3", "sampling": {"temp": 1}}, "temp"),
    ({"solved": 1, "n": 8, "solver": "p@2", "version": "3"}, "solver"),
    ({"solved": 1, "n": 8, "solver": "p", "version": "a b"}, "version"),
    ({"solved": 1, "n": 8, "solver": "p", "version": "3", "version_order": -1}, "version_order"),
    ({"solved": 1, "n": 8, "solver": "p", "version": True}, "version"),
    ({"solved": 1, "n": 8, "solver": "p", "version": "3", "sampling": {"temperature": -1}}, "temperature"),
    ({"solved": 1, "n": 8, "solver": "p", "version": "x\u0000"}, "version"),
])
def test_bad_acks_are_422_naming_the_field(api: tuple[str, Store], body: dict[str, object], field: str) -> None:
    url, store = api
    ids = seed(store, 1)
    with PropelClient(url, token=TOKEN) as client:
        token = client.lease(n=1, lease_s=60, consumer="t")[0].lease_token
    resp = httpx.post(f"{url}/v1/tasks/{ids[0]}/ack", json={**body, "lease_token": token}, headers=AUTH)
    assert resp.status_code == 422, resp.text
    assert field in resp.text
    with store.session() as s:  # nothing recorded: the task is still leased, no label
        assert s.scalars(select(QueueItem.state).where(QueueItem.task_id == ids[0])).one() == "leased"
        assert s.scalars(select(Label)).first() is None


def test_unorderable_version_on_ack_is_refused_and_rolled_back(api: tuple[str, Store]) -> None:
    url, store = api
    ids = seed(store, 1)
    with PropelClient(url, token=TOKEN) as client:
        task = client.lease(n=1, lease_s=60, consumer="t")[0]
        with pytest.raises(PropelClientError) as err:
            client.ack(task, solved=1, n=8, solver="p", version="v1.2.10")
        assert err.value.status == 422 and "version" in err.value.detail
        assert client.ack(task, solved=1, n=8, solver="p", version="v1.2.10", version_order=3) == "acked"
    with store.session() as s:
        assert s.scalars(select(QueueItem.state).where(QueueItem.task_id == ids[0])).one() == "acked"


def test_a_step_sent_as_a_number_is_the_version(api: tuple[str, Store]) -> None:
    url, store = api
    ids = seed(store, 1)
    with PropelClient(url, token=TOKEN) as client:
        token = client.lease(n=1, lease_s=60, consumer="t")[0].lease_token
    resp = httpx.post(f"{url}/v1/tasks/{ids[0]}/ack", headers=AUTH,
                      json={"solved": 2, "n": 8, "solver": "p", "version": 1200, "lease_token": token})
    assert resp.status_code == 200
    assert httpx.post(f"{url}/v1/solvers/p/versions", json={"version": 1300}, headers=AUTH).json()["is_current"]
    with store.session() as s:
        assert s.scalars(select(Label.solver_version)).one() == "1200"


@pytest.mark.parametrize("path", ["/v1/solvers/a@b/versions", "/v1/solvers/%20x/versions",
                                  "/v1/solvers/x%00y/versions"])
def test_bad_solver_names_are_422(api: tuple[str, Store], path: str) -> None:
    url, _ = api
    resp = httpx.post(f"{url}{path}", json={"version": "1"}, headers=AUTH)
    assert resp.status_code == 422
    assert httpx.post(f"{url}/v1/solvers/p/versions", json={"version": "1"}).status_code == 401
    assert httpx.post(f"{url}/v1/solvers/p/versions", json={"version": "1", "x": 1}, headers=AUTH).status_code == 422


def test_a_batched_ack_stores_versioned_trainer_labels(api: tuple[str, Store]) -> None:
    """``POST /v1/tasks/ack`` carries the same outcome fields as a single ack: each accepted item is a
    consumer label of its solver version (errors excluded); an item whose version cannot be ordered
    is refused alone (``invalid``, #37), acking nothing of it."""
    from propel_sdk.client import Ack

    url, store = api
    seed(store, 4)
    with PropelClient(url, token=TOKEN) as client:
        leased = client.lease(4, lease_s=600, consumer="batch")
        refused = client.ack_many([Ack(leased[0], solved=2, n=8, solver="policy", version="v1.2.10")])
        assert refused == {leased[0].id: "invalid"}
        statuses = client.ack_many([Ack(t, solved=2, n=8, solver="policy", version="step-7", errors=1,
                                        sampling={"temperature": 0.7}) for t in leased])
        current = client.solver_versions("policy")["current"]
    with store.session() as s:
        labels = s.execute(select(Label.solver_name, Label.solver_version, Label.valid_trials, Label.in_band)
                           .where(Label.source == "consumer")).all()
    assert set(statuses.values()) == {"acked"} and current == "step-7"
    assert len(labels) == 4 and set(labels) == {("policy", "step-7", 7, True)}

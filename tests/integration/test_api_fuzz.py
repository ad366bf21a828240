"""Property-based fuzzing of the real HTTP API from its own OpenAPI spec with schemathesis.

A real uvicorn server (``serve_app``) on the real store (SQLite and PostgreSQL), seeded with queued
tasks, daemon state and a probe. For every operation schemathesis generates schema-conforming
(positive) and schema-violating (negative) requests — with and without the bearer token — and the
test requires that none is answered with a 5xx. The number of cases sent is printed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from sqlalchemy import update

from curriculum.store import queue, repo
from curriculum.store.db import Store
from curriculum.store.models import DaemonState, utcnow
from daemon.http.api import ApiContext, create_app
from testkit.servers import serve_app

schemathesis = pytest.importorskip("schemathesis", reason="pip install schemathesis (dev extra)")

pytestmark = pytest.mark.integration
TOKEN = "fuzz-token"
EXAMPLES = 40
INT32_MAX = 2**31 - 1
def _seed(store: Store) -> None:
    with store.session() as s:
        run_id = repo.get_or_create_run(s, "fuzz", "h", {})
        ids = repo.add_tasks(s, run_id, [repo.NewTask("arith", f"f{i}", f"{i}+1", True, {"answer": i + 1})
                                         for i in range(20)])
        queue.enqueue(s, [(t, run_id, "add:1", {"id": t, "schema_version": 1}) for t in ids])
        repo.load_state(s, run_id)
        repo.save_state(s, run_id, phase="sample", cycle=2, counters={"emitted_total": 3})
        # a live daemon: fresh heartbeat and a leader (else /healthz answers 503, which is its job)
        s.execute(update(DaemonState).where(DaemonState.run_id == run_id).values(heartbeat_at=utcnow(),
                                                                                 leader_id="fuzz-leader"))
        repo.record_metrics(s, run_id, 1, {"validity": 0.9, "self_bleu3": 0.2})
        repo.register_probe(s, "p0", "primary", "file:///p0", "sha256:ref", {}, active=True, run_id=run_id)


@pytest.fixture
def live_api(store: Store) -> Iterator[str]:
    _seed(store)
    ctx = ApiContext(store=store, run_name="fuzz", token=TOKEN, max_attempts=3, max_body_bytes=8192)
    with serve_app(create_app(ctx)) as url:
        yield url


def _fuzz(op: Any, mode: Any, base: str, session: requests.Session, sent: list[tuple[str, int]],
          failures: list[str]) -> None:
    """Send EXAMPLES generated requests for one operation in one generation mode."""
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode), authed=st.booleans())
    def run(case: Any, authed: bool) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"} if authed else {}
        resp = case.call(base_url=base, session=session, headers=headers, timeout=30)
        sent.append((case.operation.label, resp.status_code))
        if resp.status_code >= 500:
            failures.append(f"{case.method} {case.formatted_path} {case.body!r:.300} → {resp.status_code}")

    try:
        run()
    except Unsatisfiable:  # an operation without inputs has no schema-violating request
        assert mode == schemathesis.GenerationMode.NEGATIVE


def test_no_server_errors_under_schemathesis(live_api: str) -> None:
    schema = schemathesis.openapi.from_url(f"{live_api}/openapi.json")
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) >= 7
    session = requests.Session()
    sent: list[tuple[str, int]] = []
    failures: list[str] = []
    for op in operations:
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            _fuzz(op, mode, live_api, session, sent, failures)
    codes = sorted({c for _, c in sent})
    print(f"schemathesis: {len(sent)} requests over {len(operations)} operations, status codes {codes}")
    assert not failures, "\n".join(failures[:20])
    assert len(sent) >= 5 * EXAMPLES
    assert {401, 422} <= set(codes) and 200 in codes


def test_nul_and_surrogate_strings_get_4xx_not_500(live_api: str) -> None:
    """Found by the fuzzer (not generated on every seed), pinned here deterministically; also an id
    beyond the database's integer range (it was a 500)."""
    import httpx

    auth = {"Authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    codes = [httpx.post(f"{live_api}/v1/tasks/lease", content=b'{"consumer": "a\\ud800"}', headers=auth).status_code,
             httpx.post(f"{live_api}/v1/tasks/1/ack", content=b'{"solved": 0, "n": 1, "solver": "a\\u0000"}',
                        headers=auth).status_code]
    codes.append(httpx.post(f"{live_api}/v1/tasks/{2**40}/ack", json={"solved": 0, "n": 1, "solver": "s"},
                            headers=auth).status_code)
    assert all(400 <= c < 500 for c in codes), codes

"""``propel tasks pull|ack`` against a real API server, and one-line errors when nothing answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from curriculum.store import repo
from curriculum.store.db import Store
from daemon.cli.main import cli
from daemon.http.api import ApiContext, create_app
from testkit.servers import free_port, serve_app
from tests.integration.test_api import seed

pytestmark = pytest.mark.integration
TOKEN = "cli-token"


@pytest.fixture
def api(store: Store) -> Iterator[tuple[str, Store]]:
    with serve_app(create_app(ApiContext(store=store, run_name="api", token=TOKEN))) as url:
        yield url, store


def invoke(*args: str) -> tuple[int, str, str]:
    out = CliRunner().invoke(cli, list(args), env={"PROPEL_API_TOKEN": TOKEN})
    return out.exit_code, out.stdout, out.stderr


def test_pull_then_ack_by_file(api: tuple[str, Store], tmp_path: Path) -> None:
    url, store = api
    ids = seed(store, 5)
    pulled = tmp_path / "tasks.jsonl"
    code, out, err = invoke("tasks", "pull", "-n", "4", "--out", str(pulled), "--url", url)
    assert code == 0, err
    rows = [json.loads(line) for line in pulled.read_text().splitlines()]
    assert [r["id"] for r in rows] == ids[:4] and all(r["lease_token"] for r in rows)
    outcomes = tmp_path / "outcomes.jsonl"
    lines = [json.dumps({"id": r["id"], "solved": 2, "n": 8, "solver": "cli", "lease_token": r["lease_token"]})
             for r in rows[:3]]
    lines.append(json.dumps({"id": rows[3]["id"], "solved": 2, "n": 8, "solver": "cli", "lease_token": "stale"}))
    outcomes.write_text("\n".join(lines) + "\n")
    code, out, err = invoke("tasks", "ack", str(outcomes), "--url", url)
    assert code == 1 and "acked 3" in out and f"{outcomes}:4: task {rows[3]['id']}: lease_lost" in err
    code, out, _ = invoke("tasks", "ack", str(outcomes), "--url", url)  # a retry is idempotent
    assert "already_acked 3" in out
    with store.session() as s:
        run_id = repo.get_or_create_run(s, "api", "h", {})
        assert repo.queue_depths(s, run_id) == {"acked": 3, "leased": 1, "ready": 1}


def test_bad_outcome_rows_are_reported_by_line(api: tuple[str, Store], tmp_path: Path) -> None:
    url, _ = api
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "solved": 1, "n": 8, "solver": "s"}\nnot json\n')
    code, _, err = invoke("tasks", "ack", str(bad), "--url", url)
    assert code == 2
    assert f"{bad}:1: bad outcome row (missing lease_token)" in err and f"{bad}:2: bad outcome row" in err


@pytest.mark.parametrize("command", [["tasks", "pull", "--out", "x.jsonl"], ["tasks", "ack", "OUTCOMES"]])
def test_no_api_answering_is_one_line(tmp_path: Path, command: list[str]) -> None:
    outcomes = tmp_path / "o.jsonl"
    outcomes.write_text(json.dumps({"id": 1, "solved": 1, "n": 8, "solver": "s", "lease_token": "t"}) + "\n")
    url = f"http://127.0.0.1:{free_port()}"
    args = [str(outcomes) if a == "OUTCOMES" else str(tmp_path / a) if a.endswith(".jsonl") else a for a in command]
    code, _, err = invoke(*args, "--url", url)
    assert code == 1
    assert err.strip().count("\n") == 0 and f"nothing answers at {url}" in err and "propel serve" in err

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
    code, out, err = invoke("tasks", "ack", str(bad), "--url", url)
    assert code == 1 and "invalid 2" in out and "2 of 2 row(s) refused" in err
    assert f"{bad}:1: bad outcome row (missing lease_token)" in err and f"{bad}:2: bad outcome row" in err


def test_one_bad_row_is_refused_alone_and_later_chunks_are_sent(api: tuple[str, Store], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """(#37.11) Rows the API model refuses (impossible counts, a too-long solver id, a repeated task)
    and a row the API refuses (a version with no order) are reported by the file's line; every other
    row in the same and later chunks is stored; the summary counts the refused rows, exit 1."""
    import daemon.cli.tasks as tasks_cli

    monkeypatch.setattr(tasks_cli, "ACK_BATCH", 2)
    url, store = api
    ids = seed(store, 7)
    pulled = tmp_path / "tasks.jsonl"
    assert invoke("tasks", "pull", "-n", "7", "--out", str(pulled), "--url", url)[0] == 0
    rows = [json.loads(line) for line in pulled.read_text().splitlines()]

    def line(r: dict[str, object], **kw: object) -> str:
        return json.dumps({"id": r["id"], "solved": 2, "n": 8, "solver": "cli", "version": "step-1",
                           "lease_token": r["lease_token"], **kw})

    lines = [line(rows[0]), line(rows[1], solved=8, errors=1), line(rows[2]), line(rows[3], solver="x" * 250),
             line(rows[4], version="v1.2.10"), line(rows[5]), line(rows[5]), line(rows[6], errors=6, solved=0)]
    outcomes = tmp_path / "outcomes.jsonl"
    outcomes.write_text("\n".join(lines) + "\n")
    code, out, err = invoke("tasks", "ack", str(outcomes), "--url", url)
    assert code == 1, err
    assert "acked 4" in out and "invalid 4" in out
    assert f"{outcomes}:2: bad outcome row" in err and "cannot exceed n" in err
    assert f"{outcomes}:4: bad outcome row" in err and "at most 256" in err
    assert f"{outcomes}:5: task {rows[4]['id']}: invalid" in err and "version_order" in err
    assert f"{outcomes}:7: task {rows[5]['id']} was already given on line 6" in err
    assert "4 of 8 row(s) refused" in err
    with store.session() as s:
        run_id = repo.get_or_create_run(s, "api", "h", {})
        assert repo.queue_depths(s, run_id) == {"acked": 4, "leased": 3}
    assert ids == [r["id"] for r in rows]


@pytest.mark.parametrize("command", [["tasks", "pull", "--out", "x.jsonl"], ["tasks", "ack", "OUTCOMES"]])
def test_no_api_answering_is_one_line(tmp_path: Path, command: list[str]) -> None:
    outcomes = tmp_path / "o.jsonl"
    outcomes.write_text(json.dumps({"id": 1, "solved": 1, "n": 8, "solver": "s", "lease_token": "t"}) + "\n")
    url = f"http://127.0.0.1:{free_port()}"
    args = [str(outcomes) if a == "OUTCOMES" else str(tmp_path / a) if a.endswith(".jsonl") else a for a in command]
    code, _, err = invoke(*args, "--url", url)
    assert code == 1
    assert err.strip().count("\n") == 0 and f"nothing answers at {url}" in err and "propel serve" in err

"""``propel tasks import|export`` on both databases and ``GET /v1/tasks/export`` on a real server:
validated all-or-nothing import with errors by line, deduplication, replay into another run,
filters, Parquet, the HTTP export."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from curriculum.store import queue, repo
from curriculum.store.db import Store
from daemon.cli.main import cli
from daemon.http.api import ApiContext, create_app
from propel_sdk.client import PropelClient
from propel_sdk.schema import FrontierTask, Provenance
from testkit.servers import free_port, serve_app

pytestmark = pytest.mark.integration


def message(i: int, topic: str = "add:1") -> dict[str, object]:
    return FrontierTask(id=i, domain="arith", solver_prompt=f"Compute: {i}+{i}", grading={"answer": 2 * i},
                        predicted_in_band=0.5, spot_check=None, topic=topic, band=(1, 3), k=8, solver="syn",
                        provenance=Provenance(generator_step=3, adapter_hash="a", probe_ensemble_id="e",
                                              reference_model="m", run="src"),
                        created_at=datetime(2026, 1, 1, tzinfo=UTC)).model_dump(mode="json")


def seeded(store: Store, n: int, run: str = "src") -> list[int]:
    with store.session() as s:
        run_id = repo.get_or_create_run(s, run, "h", {})
        ids = repo.add_tasks(s, run_id, [repo.NewTask("arith", task_hash(i), f"{i}+{i}", True, {"answer": 2 * i},
                                                      topic=f"add:{i % 2}") for i in range(n)])
        queue.enqueue(s, [(t, run_id, f"add:{i % 2}", {**message(t, f"add:{i % 2}"), "id": t})
                          for i, t in enumerate(ids)])
    return ids


def task_hash(i: int) -> str:  # the content hash the arith domain gives the text "i+i"
    from curriculum.domains.base import Task

    return Task("arith", f"{i}+{i}").content_hash


def invoke(store: Store, *args: str) -> tuple[int, str, str]:
    out = CliRunner().invoke(cli, list(args), env={"PROPEL_DATABASE_URL": store.url, "PROPEL_API_TOKEN": "tok"})
    return out.exit_code, out.stdout, out.stderr


def depths(store: Store, run: str) -> dict[str, int]:
    with store.session() as s:
        return repo.queue_depths(s, repo.get_or_create_run(s, run, "h", {}))


def test_export_then_replay_into_another_run(store: Store, tmp_path: Path) -> None:
    ids = seeded(store, 6)
    with store.session() as s:  # one task acked in the source run, with an outcome
        [x] = queue.lease(s, 1, 60, "c", 3, run_id=repo.get_or_create_run(s, "src", "h", {}))
        queue.ack(s, x.task_id, run_id=repo.get_or_create_run(s, "src", "h", {}), lease_token=x.lease_token,
                  solved=2, n=8, solver="pol", errors=3)
    out = tmp_path / "all.jsonl"
    code, _, err = invoke(store, "tasks", "export", "--run", "src", "--out", str(out))
    assert code == 0, err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ids and rows[0]["text"] == "0+0"
    assert rows[0]["queue"]["state"] == "acked"
    assert rows[0]["queue"]["outcome"] == {"solved": 2, "n": 8, "errors": 3, "solver": "pol"}  # #37.10
    assert rows[1]["queue"]["outcome"] is None
    code, _, err = invoke(store, "tasks", "import", str(out), "--run", "replay")
    assert code == 2 and "run 'replay' does not exist" in err
    code, stdout, err = invoke(store, "tasks", "import", str(out), "--run", "replay", "--create-run")
    assert code == 0 and "queued 6 task(s)" in stdout, err
    code, stdout, _ = invoke(store, "tasks", "import", str(out), "--run", "replay")  # idempotent
    assert "queued 0 task(s)" in stdout and "6 already queued" in stdout
    assert depths(store, "replay") == {"ready": 6} and depths(store, "src") == {"ready": 5, "acked": 1}
    with store.session() as s:  # the replayed run leases the same tasks (same rows, deduplicated by hash)
        got = queue.lease(s, 10, 60, "c", 3, run_id=repo.get_or_create_run(s, "replay", "h", {}))
    assert sorted(x.task_id for x in got) == ids and all(x.message["id"] == x.task_id for x in got)


def test_bad_lines_are_reported_and_nothing_is_imported(store: Store, tmp_path: Path) -> None:
    good = message(1)
    lines = [json.dumps(good), "{not json", json.dumps({**good, "predicted_in_band": 1.5}),
             json.dumps({k: v for k, v in good.items() if k != "solver_prompt"}),
             json.dumps({**good, "domain": "chess"}), json.dumps({**good, "solver_prompt": "other"})]
    f = tmp_path / "bad.jsonl"
    f.write_text("\n".join(lines) + "\n\n")
    code, _, err = invoke(store, "tasks", "import", str(f), "--create-run")
    assert code == 2
    assert f"{f}:2: " in err and f"{f}:3: predicted_in_band:" in err and f"{f}:4: solver_prompt: Field required" in err
    assert f"{f}:5: domain: unknown domain 'chess'" in err and f"{f}:1:" not in err and f"{f}:6:" not in err
    assert "4 bad line(s)" in err and "nothing imported" in err
    with store.session() as s:
        assert repo.table_counts(s)["tasks"] == 0 and repo.table_counts(s)["runs"] == 0


def test_duplicates_in_a_file_are_dropped(store: Store, tmp_path: Path) -> None:
    f = tmp_path / "dup.jsonl"
    f.write_text("\n".join(json.dumps(message(i % 3)) for i in range(7)) + "\n")
    code, stdout, err = invoke(store, "tasks", "import", str(f), "--run", "d", "--create-run")
    assert code == 0 and "queued 3 task(s)" in stdout and "4 duplicate line(s)" in stdout, err
    code, stdout, _ = invoke(store, "tasks", "import", str(f), "--run", "d", "--dry-run")
    assert "3 valid task(s), 4 duplicate line(s)" in stdout


def test_export_filters_parquet_and_http(store: Store, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    ids = seeded(store, 5)
    code, stdout, _ = invoke(store, "tasks", "export", "--run", "src", "--topic", "add:1", "--state", "ready")
    assert code == 0 and [json.loads(x)["id"] for x in stdout.splitlines()] == ids[1::2]
    code, stdout, _ = invoke(store, "tasks", "export", "--run", "src", "--state", "acked")
    assert code == 0 and stdout == ""
    code, stdout, _ = invoke(store, "tasks", "export", "--run", "src", "--since", "2999-01-01")
    assert code == 0 and stdout == ""
    with store.session() as s:  # one acked task with infrastructure errors: Parquet keeps them (#37.10)
        run_id = repo.get_or_create_run(s, "src", "h", {})
        [x] = queue.lease(s, 1, 60, "c", 3, run_id=run_id)
        queue.ack(s, x.task_id, run_id=run_id, lease_token=x.lease_token, solved=0, n=8, solver="pol", errors=8)
    pq_file = tmp_path / "t.parquet"
    assert invoke(store, "tasks", "export", "--run", "src", "--out", str(pq_file))[0] == 0
    table = pq.read_table(pq_file).to_pydict()
    assert table["id"] == ids and json.loads(table["record"][0])["text"] == "0+0"
    assert [table[k][0] for k in ("outcome_solved", "outcome_n", "outcome_errors", "outcome_solver")] == [
        0, 8, 8, "pol"]
    assert table["outcome_errors"][1:] == [None] * 4
    with serve_app(create_app(ApiContext(store=store, run_name="src", token="tok"))) as url:
        code, stdout, err = invoke(store, "tasks", "export", "--api", url, "--topic", "add:0", "--limit", "2")
        assert code == 0, err
        assert [json.loads(x)["id"] for x in stdout.splitlines()] == ids[0:4:2]
        with PropelClient(url, token="tok") as client:
            assert [r["id"] for r in client.export(state=["ready"])] == ids[1:]
        with PropelClient(url) as anonymous, pytest.raises(Exception, match="401"):
            list(anonymous.export())
    url = f"http://127.0.0.1:{free_port()}"
    code, _, err = invoke(store, "tasks", "export", "--api", url)
    assert code == 1 and err.count("\n") == 1 and f"nothing answers at {url}" in err

"""Every command family that talks to the API, the store or the broker fails with ONE line naming
the address and what to do, and exit code 1 (no traceback) when nothing answers there."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from daemon.cli.main import cli


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the socket goes


def _run(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, args, env={"PROPEL_DEBUG": "", **(env or {})}, catch_exceptions=True)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.output


def _one_line(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.strip()]
    assert len(lines) == 1, output
    assert "Traceback" not in output
    return lines[0]


def test_tasks_pull_and_ack_name_the_url(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    code, out = _run(["tasks", "pull", "-n", "2", "--out", str(tmp_path / "t.jsonl"), "--url", url])
    line = _one_line(out)
    assert code == 1 and f"nothing answers at {url}" in line and "propel run" in line and "propel serve" in line
    outcomes = tmp_path / "o.jsonl"
    outcomes.write_text(json.dumps({"id": 1, "solved": 1, "n": 8, "solver": "s", "lease_token": "t"}) + "\n")
    code, out = _run(["tasks", "ack", str(outcomes), "--url", url])
    assert code == 1 and f"nothing answers at {url}" in _one_line(out)


def _file(tmp: Path) -> Path:
    (tmp / "a-file").write_text("")
    return tmp / "a-file"


BAD_DSNS = [
    pytest.param(lambda tmp: f"postgresql+psycopg://propel:hunter2@127.0.0.1:{_closed_port()}/propel", id="pg-closed"),
    pytest.param(lambda tmp: f"sqlite:///{_file(tmp)}/propel.db", id="sqlite-under-a-file"),
]


@pytest.mark.parametrize("dsn", BAD_DSNS)
@pytest.mark.parametrize("args", [["db", "upgrade"], ["db", "current"], ["status"],
                                  ["alerts", "replay", "--rules", "RULES"], ["serve"], ["run", "--cycles", "1"]],
                         ids=["db-upgrade", "db-current", "status", "alerts-replay", "serve", "run"])
def test_store_commands_name_the_dsn(tmp_path: Path, dsn: object, args: list[str]) -> None:
    url = dsn(tmp_path)  # type: ignore[operator]
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rules]]\nname = "r"\nmetric = "validity"\ncomparator = "<"\nthreshold = 0.5\n')
    args = [str(rules) if a == "RULES" else a for a in args]
    code, out = _run(args, env={"PROPEL_DATABASE_URL": url, "PROPEL_DATA_DIR": str(tmp_path / "data")})
    line = _one_line(out)
    assert code == 1, out
    assert line.startswith("error: store ") and "unreachable" in line and "PROPEL_DATABASE_URL" in line
    assert "hunter2" not in out
    shown = url.replace(":hunter2@", ":***@")
    assert shown in line


def test_check_fails_in_one_line_on_a_dead_store(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://propel@127.0.0.1:{_closed_port()}/propel"
    code, out = _run(["check"], env={"PROPEL_DATABASE_URL": url})
    line = _one_line(out)
    assert code == 1 and line.startswith("unhealthy: store ") and url in line


def test_worker_names_the_broker(tmp_path: Path) -> None:
    broker = f"redis://127.0.0.1:{_closed_port()}/0"
    code, out = _run(["worker"], env={"PROPEL_BROKER_URL": broker,
                                      "PROPEL_DATABASE_URL": f"sqlite:///{tmp_path}/p.db"})
    line = _one_line(out)
    assert code == 1 and line.startswith(f"error: broker {broker} unreachable") and "PROPEL_BROKER_URL" in line

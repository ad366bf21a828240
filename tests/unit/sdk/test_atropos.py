"""The Atropos adapter's local parts: the held-out reader, the trainer's token masks, the CLI's one-line
errors (no daemon needed: an unreachable URL, a missing held-out set)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("atroposlib", reason="the atropos extra is not installed (pip install -e '.[atropos]')")

from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from propel_sdk.atropos import PropelEnv, PropelEnvConfig, PropelEnvError, read_held_out
from testkit.servers import free_port

MESSAGE: dict[str, Any] = {"id": 1, "domain": "arith", "solver_prompt": "Compute: 2+3\nAnswer with a single integer.",
           "grading": {"answer": 5}}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from curriculum.common.tinymodels import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant: {% endif %}")
    path = tmp_path_factory.mktemp("tok")
    tok.save_pretrained(path)
    return path


def test_held_out_reads_messages_up_to_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "held.jsonl"
    path.write_text("".join(json.dumps({**MESSAGE, "id": i, "queue": {"state": "acked"}}) + "\n\n" for i in range(5)))
    assert [m["id"] for m in read_held_out(path, 3)] == [0, 1, 2]


def test_held_out_errors_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(PropelEnvError, match="propel tasks export --state acked"):
        read_held_out(tmp_path / "missing.jsonl", 10)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(MESSAGE) + "\n" + json.dumps({"text": "2+3"}) + "\n")
    with pytest.raises(PropelEnvError, match=r"bad.jsonl:2 is not a frontier message"):
        read_held_out(bad, 10)


def test_masks_cover_the_prompt_only(tokenizer_dir: Path) -> None:
    env = PropelEnv(PropelEnvConfig(tokenizer_name=str(tokenizer_dir)),
                    [APIServerConfig(model_name="m", base_url="http://127.0.0.1:1/v1", api_key="x")])
    tokens, masks = env.tokenize([{"role": "user", "content": MESSAGE["solver_prompt"]}], "5")
    completion = env.tokenizer.encode("5", add_special_tokens=False)
    assert len(tokens) == len(masks) and masks[-len(completion) - 1:-1] == completion
    assert all(m == -100 for m in masks[:-len(completion) - 1]) and masks[-1] != -100  # the turn's end trains


@pytest.mark.parametrize(("argv", "starts", "ends"), [
    (["serve"], "error: cannot reach the daemon at {url} ", "pass --env.propel_url"),
    (["process"], "error: cannot reach the daemon at {url} ", "pass --env.propel_url"),
    (["evaluate"], "error: evaluate needs a held-out set: pass --env.eval_path", "--out held_out.jsonl`)"),
    (["evaluate", "--env.eval_path", "/nonexistent.jsonl"], "error: held-out set /nonexistent.jsonl not found",
     "or pass --env.eval_path"),
])
def test_cli_setup_problem_is_one_line(argv: list[str], starts: str, ends: str, tokenizer_dir: Path,
                                       monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    monkeypatch.setattr(sys, "argv", ["atropos_env", *argv, "--env.propel_url", url, "--env.tokenizer_name",
                                      str(tokenizer_dir), "--openai.base_url", "http://127.0.0.1:1/v1"])
    with pytest.raises(SystemExit) as stop:
        PropelEnv.cli()
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(starts.format(url=url)) and err[-1].endswith(ends), err[-1]
    assert not any("Traceback" in e for e in err)

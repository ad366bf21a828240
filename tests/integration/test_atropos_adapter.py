"""The Atropos adapter (``propel_sdk.atropos.PropelEnv``) driven by Atropos's own code against a live
``propel serve`` process on PostgreSQL and a scripted OpenAI-compatible server.

* ``process`` (``BaseEnv.process_manager``) leases, grades, acks each group once as the announced
  version, writes the scored groups; ``evaluate`` grades a held-out export; nothing stays leased.
* ``serve`` (``BaseEnv.env_manager``) in its own process, with Atropos's ``run-api`` and a trainer pulling
  batches: checkpoints announce versions, SIGTERM acks what was reported and nacks the rest.
* A wrong token stops the environment at start-up with one line naming the fix.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

pytest.importorskip("atroposlib", reason="the atropos extra is not installed (pip install -e '.[atropos]')")

from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from curriculum.domains.arith import analyse
from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem, SolverVersionRow
from propel_sdk.atropos import PropelEnv, PropelEnvConfig
from propel_sdk.client import PropelClient
from testkit.seeding import seed_arith
from testkit.servers import ServeProcess, free_port, scripted_server, wait_http

pytestmark = pytest.mark.integration
TOKEN = "atropos-t0k3n"
SOLVER = "atropos-policy"
GROUP = 4
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")
EXPRS = [f"{a}+{b}*{c}" for a, b, c in itertools.product(range(2, 7), range(3, 7), range(2, 4))]  # 40 tasks


def answer(body: dict[str, Any], _: int) -> tuple[int, dict[str, Any]]:
    """An OpenAI chat completion: greedy (temperature 0) answers right; a sampled group of ``n`` answers
    right at even indices (``ceil(n/2)`` solved); the health check's ``hi`` gets ``ok``."""
    prompt = str(body["messages"][0]["content"])
    found = re.match(r"Compute: (.*)\n", prompt)
    gold = analyse(found.group(1)).value if found else None
    n = int(body.get("n") or 1)
    greedy = float(body.get("temperature", 1.0)) == 0.0
    texts = ["ok" if gold is None else str(gold if greedy or j % 2 == 0 else gold + 1) for j in range(n)]
    return 200, {"id": "c", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                 "choices": [{"index": j, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                             for j, t in enumerate(texts)],
                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


@pytest.fixture
def daemon(pg_store: Store, tmp_path: Path) -> Iterator[ServeProcess]:
    proc = ServeProcess("atropos", pg_store.url, tmp_path, lambda: TOKEN)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def inference() -> Iterator[str]:
    with scripted_server(answer, models=["policy"]) as (url, _):
        yield url


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from curriculum.common.tinymodels import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    path = tmp_path_factory.mktemp("tok")
    tok.save_pretrained(path)
    return path


def queue_states(store: Store) -> dict[str, int]:
    with store.session() as s:
        return dict(s.execute(select(QueueItem.state, func.count()).group_by(QueueItem.state)).all())


def consumer_labels(store: Store) -> list[tuple[int, str, int, int]]:
    with store.session() as s:
        rows = s.execute(select(Label.task_id, Label.solver_version, Label.solved, Label.k)
                         .where(Label.source == "consumer")).all()
        return [(r.task_id, r.solver_version, r.solved, r.k) for r in rows]


def export_held_out(url: str, path: Path, n: int) -> Path:
    """The first ``n`` queued tasks as a held-out set, as `propel tasks export` writes it."""
    with PropelClient(url, token=TOKEN) as client:
        path.write_text("".join(json.dumps(r) + "\n" for r in client.export(limit=n)))
    return path


def test_process_and_evaluate(daemon: ServeProcess, pg_store: Store, inference: str, tokenizer_dir: Path,
                              tmp_path: Path) -> None:
    ids = seed_arith(pg_store, EXPRS[:10], run="atropos")
    held_out = export_held_out(daemon.url, tmp_path / "held_out.jsonl", 3)
    cfg = PropelEnvConfig(propel_url=daemon.url, propel_token=TOKEN, solver_name=SOLVER, group_size=GROUP,
                          tokenizer_name=str(tokenizer_dir), lease_batch=4, ack_every=3, idle_timeout_s=0,
                          max_tokens=8, data_path_to_save_groups=str(tmp_path / "groups.jsonl"),
                          eval_path=str(held_out), data_dir_to_save_evals=str(tmp_path / "evals"))
    env = PropelEnv(cfg, [APIServerConfig(model_name="policy", base_url=inference, api_key="x")])
    env.process_mode, env.n_groups_to_process, env.group_size_to_process = True, 6, GROUP

    asyncio.run(env.process_manager())

    labels = consumer_labels(pg_store)
    assert sorted(t for t, *_ in labels) == ids[:6]  # leased in order, each group acked once
    assert {(v, solved, k) for _, v, solved, k in labels} == {("step-0", GROUP // 2, GROUP)}
    assert queue_states(pg_store) == {"acked": 6, "ready": 4}  # the read-ahead went back, untried
    assert env.summary is not None and env.summary.stored == 6 and env.summary.nacked_untried == 2
    groups = [json.loads(line) for line in (tmp_path / "groups.jsonl").read_text().splitlines()]
    assert len(groups) == 6 and all(sorted(g["scores"]) == [0.0, 0.0, 1.0, 1.0] for g in groups)
    assert all(-100 in g["masks"][0] and len(g["tokens"][0]) == len(g["masks"][0]) for g in groups)
    with pg_store.session() as s:
        assert s.scalars(select(SolverVersionRow.version).where(SolverVersionRow.solver == SOLVER)).all() == [
            "step-0"]

    env2 = PropelEnv(cfg, [APIServerConfig(model_name="policy", base_url=inference, api_key="x")])

    async def evaluate() -> dict[str, float]:
        await env2.setup()
        try:
            return await env2.evaluate()
        finally:
            await env2.shutdown()

    metrics = asyncio.run(evaluate())
    assert metrics == {"eval/accuracy": 1.0, "eval/tasks": 3.0, "eval/ungradeable": 0.0}
    saved = json.loads((tmp_path / "evals" / "metrics.json").read_text())
    assert saved["results"]["all"]["eval/accuracy"] == 1.0
    assert queue_states(pg_store) == {"acked": 6, "ready": 4}  # evaluate leases nothing


def env_command(module_args: list[str], daemon_url: str, token: str, tokenizer_dir: Path, inference: str
                ) -> list[str]:
    return [sys.executable, "-m", "examples.atropos_env", *module_args, "--env.propel_url", daemon_url,
            "--env.propel_token", token, "--env.tokenizer_name", str(tokenizer_dir),
            "--openai.base_url", inference, "--openai.model_name", "policy", "--openai.api_key", "x"]


def test_wrong_token_is_one_line(daemon: ServeProcess, tokenizer_dir: Path, inference: str) -> None:
    done = subprocess.run(env_command(["serve"], daemon.url, "wrong", tokenizer_dir, inference),
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: the daemon at {daemon.url} refused the API token (HTTP 401): pass --env.propel_token or set "
        "PROPEL_API_TOKEN")


class Trainer:
    """The trainer side of Atropos's ``run-api``: registers, then pulls batches (each is one step)."""

    def __init__(self, url: str, checkpoint_dir: Path) -> None:
        self.http = httpx.Client(base_url=url, timeout=10)
        self.http.post("/register", json={
            "wandb_group": "g", "wandb_project": "p", "batch_size": 2 * GROUP, "max_token_len": 4096,
            "checkpoint_dir": str(checkpoint_dir), "save_checkpoint_interval": 2, "starting_step": 0,
            "num_steps": 1000}).raise_for_status()
        self.http.get("/batch").raise_for_status()  # "started": environments may register now
        self.groups = 0

    def pull(self, steps: int, timeout_s: float, env: subprocess.Popen[bytes], log_path: Path) -> None:
        deadline = time.monotonic() + timeout_s
        for _ in range(steps):
            while (batch := self.http.get("/batch").json()["batch"]) is None:
                assert env.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, f"{self.groups} groups after {timeout_s} s"
                time.sleep(0.2)
            self.groups += len(batch)

    def pull_until(self, done: Callable[[], bool], timeout_s: float, env: subprocess.Popen[bytes],
                   log_path: Path) -> None:
        """Pull batches as they come until ``done()``: what the environment does between steps (an eval)
        can lag the step that asked for it on a loaded machine."""
        deadline = time.monotonic() + timeout_s
        while not done():
            assert env.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, f"not done after {timeout_s} s ({self.groups} groups)"
            batch = self.http.get("/batch").json()["batch"]
            if batch is None:
                time.sleep(0.2)
            else:
                self.groups += len(batch)


def _json_written(path: Path) -> bool:
    try:
        json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return True


@pytest.mark.slow
def test_serve_with_run_api_then_sigterm(daemon: ServeProcess, pg_store: Store, inference: str,
                                         tokenizer_dir: Path, tmp_path: Path) -> None:
    ids = seed_arith(pg_store, EXPRS, run="atropos")
    held_out = export_held_out(daemon.url, tmp_path / "held_out.jsonl", 3)
    port = free_port()
    api = subprocess.Popen([str(Path(sys.executable).with_name("run-api")), "--host", "127.0.0.1", "--port",
                            str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    log_path = tmp_path / "env.log"
    try:
        wait_http(f"http://127.0.0.1:{port}/status", 60, api)
        trainer = Trainer(f"http://127.0.0.1:{port}", tmp_path / "ckpt")
        with log_path.open("w") as log:
            env = subprocess.Popen(
                [*env_command(["serve"], daemon.url, TOKEN, tokenizer_dir, inference), "--env.group_size", str(GROUP),
                 "--env.rollout_server_url", f"http://127.0.0.1:{port}", "--env.max_num_workers_per_node", "2",
                 "--env.lease_batch", "2", "--env.ack_every", "2", "--env.max_tokens", "8",
                 "--env.steps_per_eval", "3", "--env.eval_path", str(held_out),  # eval stops rollouts (STOP_TRAIN)
                 "--env.data_dir_to_save_evals", str(tmp_path / "evals")],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "HF_HUB_OFFLINE": "1"})
        # a checkpoint (every 2 steps) announces step-N; groups made after that are acked as it
        while {v for _, v, _, _ in consumer_labels(pg_store)} <= {"step-0"}:
            trainer.pull(steps=1, timeout_s=150, env=env, log_path=log_path)
        trainer.pull(steps=1, timeout_s=60, env=env, log_path=log_path)
        metrics = tmp_path / "evals" / "metrics.json"  # written by the eval every 3 steps
        trainer.pull_until(lambda: _json_written(metrics), 180, env, log_path)
        os.kill(env.pid, signal.SIGTERM)
        assert env.wait(timeout=60) == 0, log_path.read_text()[-3000:]
    finally:
        os.killpg(api.pid, signal.SIGTERM)
        api.wait(timeout=30)
    text = log_path.read_text()
    assert "stopped by a signal" in text and "Traceback" not in text, text[-3000:]
    labels = consumer_labels(pg_store)
    acked = [t for t, *_ in labels]
    assert len(acked) == len(set(acked)) >= trainer.groups >= 4  # once each; trained ⊆ acked
    states = queue_states(pg_store)
    assert states == {"acked": len(acked), "ready": len(ids) - len(acked)}  # nothing left leased
    assert {(solved, k) for _, _, solved, k in labels} == {(GROUP // 2, GROUP)}
    with pg_store.session() as s:
        announced = set(s.scalars(select(SolverVersionRow.version).where(SolverVersionRow.solver == SOLVER)))
    # Atropos calls save_checkpoint when its step crosses a multiple of checkpoint_interval between two polls
    assert "step-0" in announced and len(announced) >= 2 and all(int(v[5:]) % 2 == 0 for v in announced)
    assert {v for _, v, _, _ in labels} <= announced  # each ack as the version current when it was reported
    evaluated = json.loads(metrics.read_text())["results"]["all"]
    assert evaluated["eval/accuracy"] == 1.0 and evaluated["eval/tasks"] == 3.0

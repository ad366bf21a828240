"""The verl adapter (propel_sdk.verl) driven by verl's own code against a live ``propel serve`` process.

What runs is verl 0.9.1's: the example config composed by Hydra on verl's ``ppo_trainer`` defaults;
the dataset class resolved from ``data.custom_cls`` and the train and val data loaders built by the
default (v1, sync) trainer's ``_init_dataloader``; batches fetched by its ``_next_train_batch``;
``migrate_legacy_reward_impl`` and ``RewardLoopManager``, which starts ``RewardLoopWorker`` as a real
Ray actor that loads the custom reward function; each completion is scored with
``compute_score.remote(DataProto)`` as verl's agent loop does; the checkpoint hook is the data
loader's ``state_dict`` that verl's ``_save_checkpoint`` saves, and resuming is the loader's
``load_state_dict`` in a new trainer, as ``_load_checkpoint`` does.

The GPU line: the rollout (vLLM/SGLang servers behind ``AgentLoopManager``) and the FSDP actor /
ref workers (``ActorRolloutRefWorker``: old log-probs, the policy update, the weight sync) are not
run; completions are written by the test (a stand-in for the rollout) and tokenized with the
solver's tokenizer, as the agent loop hands them to the reward worker.

Invariant: every leased task handed to the trainer ends with exactly one stored outcome, as the
solver at the version its row was rolled out by; tasks never handed out go back to the queue.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sqlalchemy import select

from curriculum.store.db import Store
from curriculum.store.models import Label, QueueItem, SolverVersionRow
from daemon.http.api import ApiContext, create_app
from testkit.seeding import seed_arith
from testkit.servers import free_port, serve_app, wait_http

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TOKEN = "t0k3n-for-verl-tests"
BATCH, N = 3, 4  # prompts per step, completions per prompt (rollout.n)
EXPRS = [f"{a}+{b}" for a in range(1, 5) for b in range(1, 4)]  # 12 tasks: three steps of 3, 3 left over


@pytest.fixture
def serve(sqlite_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real ``propel serve`` process on the test's store, with an API token."""
    monkeypatch.setenv("PROPEL_API_TOKEN", TOKEN)  # the test process and the Ray workers it starts
    port = free_port()
    cfg = tmp_path / "serve.toml"
    cfg.write_text(f'run_name = "verl"\ndata_dir = "{tmp_path}"\n[store]\nurl = "{sqlite_store.url}"\n'
                   f"[api]\nport = {port}\n")
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([sys.executable, "-m", "daemon.cli.main", "--config", str(cfg), "serve"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PROPEL_API_TOKEN": TOKEN})
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", 60, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def _tokenizer_dir(tmp_path: Path) -> Path:
    from curriculum.common.tinymodels import build_char_tokenizer

    path = tmp_path / "solver"
    build_char_tokenizer().save_pretrained(path)
    return path


def _val_parquet(tmp_path: Path) -> Path:
    """A held-out set in verl's own format (as verl's gsm8k preprocessing writes it)."""
    import pandas as pd

    path = tmp_path / "val.parquet"
    pd.DataFrame([{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "1+1?"}],
                   "ability": "math", "reward_model": {"style": "rule", "ground_truth": "2"},
                   "extra_info": {"index": 0}}]).to_parquet(path)
    return path


def _config(url: str, tmp_path: Path) -> Any:
    """The example config, composed by Hydra on verl's defaults, with the test's sizes."""
    from hydra import compose, initialize_config_dir

    overrides = [f"data.propel.api={url}", "data.propel.solver=tiny", f"data.train_batch_size={BATCH}",
                 f"actor_rollout_ref.rollout.n={N}", f"actor_rollout_ref.model.path={_tokenizer_dir(tmp_path)}",
                 f"data.val_files={_val_parquet(tmp_path)}", "data.propel.max_tasks=9", "+data.propel.poll_s=0.1",
                 "+data.propel.idle_timeout_s=5", "trainer.total_training_steps=3",
                 f"trainer.default_local_dir={tmp_path / 'ckpt'}"]
    with initialize_config_dir(config_dir=str(ROOT / "examples" / "verl"), version_base=None):
        return compose(config_name="propel_grpo", overrides=overrides)


def _trainer(config: Any) -> Any:
    """verl's default trainer, with only what its data methods read (no Ray worker groups, no GPU)."""
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.utils import hf_tokenizer

    cls = get_trainer_cls(config.trainer.v1.trainer_mode)  # sync: the default
    trainer = cls.__new__(cls)
    trainer.__dict__.update(config=config, tokenizer=hf_tokenizer(config.actor_rollout_ref.model.path),
                            processor=None, trainer_mode="sync", parameter_sync_step=1, global_steps=1)
    return trainer


def _sample(rows: dict[str, Any], i: int, completion: str, tokenizer: Any) -> Any:
    """One completion of row ``i`` as verl's agent loop sends it to a reward worker."""
    from tensordict import TensorDict
    from verl import DataProto

    prompt = torch.tensor(tokenizer(str(rows["raw_prompt"][i][0]["content"]))["input_ids"])
    response = torch.tensor(tokenizer(completion)["input_ids"] + [tokenizer.eos_token_id])
    batch = TensorDict({"prompts": prompt[None], "responses": response[None],
                        "attention_mask": torch.ones(1, len(prompt) + len(response), dtype=torch.long),
                        "input_ids": torch.cat([prompt, response])[None]}, batch_size=1)
    keys = ("data_source", "reward_model", "extra_info", "raw_prompt", "index", "tools_kwargs", "interaction_kwargs")
    non_tensor = {k: np.array([rows[k][i]], dtype=object) for k in keys}
    non_tensor["__num_turns__"] = np.array([2])
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


def _answers(rows: dict[str, Any]) -> list[int]:
    return [int(r["propel"]["task"]["message"]["grading"]["answer"]) for r in rows["extra_info"]]


def _rows(batch: Any) -> dict[str, Any]:
    """A fetched TensorDict batch's non-tensor fields as lists (the rows verl rolls out)."""
    return {k: list(batch[k]) for k in ("data_source", "reward_model", "extra_info", "raw_prompt", "index",
                                        "tools_kwargs", "interaction_kwargs")}


@pytest.fixture
def ray_session() -> Iterator[None]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.mark.slow  # ~90 s on the shared 2-core machine: a Ray cluster, verl's imports, a serve process
def test_verl_data_and_reward_paths_store_each_outcome_once(serve: str, sqlite_store: Store, tmp_path: Path,
                                                            ray_session: None) -> None:
    from verl.experimental.reward_loop import RewardLoopManager, migrate_legacy_reward_impl

    from propel_sdk.verl import PropelDataset

    ids = seed_arith(sqlite_store, EXPRS, run="verl")
    config = migrate_legacy_reward_impl(_config(serve, tmp_path))
    trainer = _trainer(config)
    trainer._init_dataloader()  # verl's: PropelDataset for train (the queue), RLHFDataset's parquet for val
    dataset = trainer.train_dataset
    assert isinstance(dataset, PropelDataset) and dataset.from_queue and len(dataset) == 9
    assert not trainer.val_dataset.from_queue and len(trainer.val_dataset) == 1
    workers = RewardLoopManager(config).reward_loop_worker_handles  # one real Ray actor (reward.num_workers=1)
    assert workers is not None and len(workers) == 1
    expected: dict[int, tuple[str, int, int]] = {}
    for step in (1, 2):
        _step(trainer, step, workers[0], expected)
        saved = trainer.train_dataloader.state_dict()  # what _save_checkpoint saves: announces step-N
    summary = dataset.close()  # the last step's leases were the reward worker's; nothing read ahead
    assert dataset.version == "step-2" and summary is not None and summary.nacked == 0
    resumed = _trainer(config)  # a new run resumes from the checkpoint (verl's _load_checkpoint)
    resumed._init_dataloader()
    resumed.train_dataloader.load_state_dict(saved)
    _step(resumed, 3, workers[0], expected, version="step-2")
    resumed.train_dataloader.state_dict()
    assert resumed.train_dataset.version == "step-3"
    resumed.train_dataset.close()
    with sqlite_store.session() as s:
        labels = s.execute(select(Label.task_id, Label.solver_id, Label.solved, Label.k)).all()
        states = dict(s.execute(select(QueueItem.task_id, QueueItem.state).where(QueueItem.task_id.in_(ids))).all())
        versions = s.scalars(select(SolverVersionRow.version).where(SolverVersionRow.solver == "tiny")).all()
    assert sorted((t, sid, solved, k) for t, sid, solved, k in labels) == sorted(
        (t, sid, solved, k) for t, (sid, solved, k) in expected.items())  # each outcome stored exactly once
    assert len(expected) == 3 * BATCH and [states[t] for t in ids[:9]] == ["acked"] * 9
    assert [states[t] for t in ids[9:]] == ["ready"] * 3
    assert set(versions) == {"step-0", "step-1", "step-2", "step-3"}


def _step(trainer: Any, step: int, worker: Any, expected: dict[int, tuple[str, int, int]],
          version: str | None = None) -> None:
    """One step's data and reward: verl's fetch, N completions per row (the rollout stand-in: row i gets
    i + step right answers, capped at N), each scored by the reward worker actor as the agent loop does."""
    import ray

    version = version or f"step-{step - 1}"
    rows = _rows(trainer._next_train_batch())  # verl's fetch: the loader, verl's collate_fn, the uid column
    assert [r["propel"]["version"] for r in rows["extra_info"]] == [version] * BATCH
    samples: list[Any] = []
    right_total = 0
    for i, answer in enumerate(_answers(rows)):
        right = min(i + step, N)
        samples += [_sample(rows, i, str(answer if k < right else answer + 1), trainer.tokenizer) for k in range(N)]
        expected[int(rows["index"][i])] = (f"tiny@{version}", right, N)
        right_total += right
    results: list[dict[str, Any]] = ray.get([worker.compute_score.remote(s) for s in samples])
    assert sum(r["reward_score"] for r in results) == right_total
    trainer.global_steps = step


# ---- the same adapter in one process (no Ray), on the in-process API: its edge cases ----------------
@pytest.fixture
def api(sqlite_store: Store, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("PROPEL_API_TOKEN", TOKEN)
    with serve_app(create_app(ApiContext(store=sqlite_store, run_name="verl", token=TOKEN))) as url:
        yield url


def _data_config(url: str, **propel: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.create({"train_batch_size": BATCH, "dataloader_num_workers": 0, "prompt_key": "prompt",
                             "propel": {"api": url, "solver": "tiny", "group_size": 2, "poll_s": 0.05,
                                        "idle_timeout_s": 1, **propel}})


def test_an_unfinished_step_releases_handed_rows_and_nacks_the_read_ahead(api: str, sqlite_store: Store) -> None:
    from propel_sdk.verl import PropelDataset, close_reporters, compute_score

    ids = seed_arith(sqlite_store, EXPRS[:4], run="verl")
    dataset = PropelDataset("propel://queue", None, _data_config(api))
    rows = [dataset[0], dataset[1]]  # 2 of a batch of 3: the run stops mid-step
    assert rows[0]["data_source"] == "propel/arith" and rows[0]["raw_prompt"][0]["role"] == "user"
    completions = [[str(a), str(a)] for a in _answers({"extra_info": [r["extra_info"] for r in rows]})]
    completions[1][1] = "nope"
    scores = [compute_score(r["data_source"], c, r["reward_model"]["ground_truth"], r["extra_info"])
              for r, group in zip(rows, completions, strict=True) for c in group]
    assert scores == [1.0, 1.0, 1.0, 0.0]  # groups of 2: each reported once it is complete
    assert dataset.handed == 2 and dataset.state_dict() == {"handed": 2, "version": "step-0"}  # step 0: no new
    summary = dataset.close()
    assert summary is not None and (summary.nacked, summary.nacked_untried) == (1, 1)  # ids[2]: never handed
    [reward_side] = close_reporters()
    assert reward_side.stored == 2 and reward_side.nacked == 0
    with sqlite_store.session() as s:
        states = dict(s.execute(select(QueueItem.task_id, QueueItem.state)).all())
        labels = s.execute(select(Label.task_id, Label.solver_id, Label.solved, Label.k)).all()
    assert sorted(tuple(lab) for lab in labels) == [(ids[0], "tiny@step-0", 2, 2), (ids[1], "tiny@step-0", 1, 2)]
    assert [states[t] for t in ids] == ["acked", "acked", "ready", "ready"]


def test_a_group_left_incomplete_is_nacked_by_the_reward_side(api: str, sqlite_store: Store) -> None:
    from propel_sdk.verl import PropelDataset, close_reporters, compute_score

    [tid] = seed_arith(sqlite_store, ["2+2"], run="verl")
    dataset = PropelDataset("propel://queue", None, _data_config(api))
    row = dataset[0]
    assert compute_score(row["data_source"], "4", None, row["extra_info"]) == 1.0  # 1 of its 2 completions
    dataset.close()
    [reward_side] = close_reporters()
    assert (reward_side.stored, reward_side.nacked, reward_side.nacked_untried) == (0, 1, 0)
    with sqlite_store.session() as s:
        assert s.scalar(select(QueueItem.state).where(QueueItem.task_id == tid)) == "ready"
        assert s.scalar(select(Label.task_id)) is None


def test_an_empty_queue_and_the_max_tasks_end_say_what_to_do(api: str, sqlite_store: Store) -> None:
    from propel_sdk.verl import PropelDataset

    dataset = PropelDataset("propel://queue", None, _data_config(api, idle_timeout_s=0.2))
    with pytest.raises(RuntimeError, match=r"gave no task for 0.2 s .*is the daemon running"):
        dataset[0]
    dataset.close()
    seed_arith(sqlite_store, EXPRS[:2], run="verl")
    dataset = PropelDataset("propel://queue", None, _data_config(api, max_tasks=1))
    dataset[0]
    with pytest.raises(RuntimeError, match=r"max_tasks \(1\) tasks leased: raise it"):
        dataset[1]
    dataset.close()


def test_resume_restores_the_step_and_version_named_as_verls_folders(api: str, sqlite_store: Store) -> None:
    from propel_sdk.client import PropelClient
    from propel_sdk.verl import PropelDataset

    seed_arith(sqlite_store, EXPRS[:7], run="verl")
    dataset = PropelDataset("propel://queue", None, _data_config(api, version_format="global_step_{step}"))
    dataset.load_state_dict({"handed": 2 * BATCH, "version": "global_step_2"})  # verl's _load_checkpoint
    assert dataset[0]["extra_info"]["propel"]["version"] == "global_step_2"
    for i in range(1, BATCH + 1):
        dataset[i]
    dataset.state_dict()  # verl saves a checkpoint at global step 3
    assert dataset[0]["extra_info"]["propel"]["version"] == "global_step_3"
    dataset.close()
    with PropelClient(api, token=TOKEN) as client:
        assert client.solver_versions("tiny")["current"] == "global_step_3"


def test_the_example_config_passes_verls_own_validation(tmp_path: Path) -> None:
    """What ``verl.trainer.main_ppo`` checks before starting (batch sizes, rollout, workers)."""
    from hydra import compose, initialize_config_dir
    from verl.trainer.main_ppo import validate_config
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    with initialize_config_dir(config_dir=str(ROOT / "examples" / "verl"), version_base=None):
        cfg = compose(config_name="propel_grpo", overrides=[f"data.val_files={tmp_path / 'v.parquet'}",
                                                            f"actor_rollout_ref.model.path={tmp_path}"])
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert cfg.data.propel.group_size == cfg.actor_rollout_ref.rollout.n == 8
    assert cfg.data.propel.max_tasks >= cfg.data.train_batch_size * cfg.trainer.total_training_steps


def test_validation_rows_are_scored_by_verls_default_reward() -> None:
    from propel_sdk.verl import compute_score

    assert compute_score("openai/gsm8k", "so #### 2", "2", {"index": 0}) == 1.0
    assert compute_score("openai/gsm8k", "so #### 3", "2", None) == 0.0


@pytest.mark.parametrize(("propel", "workers", "says"), [
    (None, 0, "data.propel is missing"),
    ({"api": "http://x", "solver": "s"}, 0, "data.propel.group_size is required"),
    ({"api": "http://x", "solver": "s", "group_size": 2, "nope": 1}, 0, "unknown key(s) nope"),
    ({"api": "http://x", "solver": "s", "group_size": 2}, 2, "dataloader_num_workers must be 0"),
    ({"api": "http://x", "solver": "s", "group_size": 2, "version_format": "v1"}, 0, "must contain {step}"),
])
def test_config_errors_name_the_fix(propel: dict[str, Any] | None, workers: int, says: str) -> None:
    from omegaconf import OmegaConf

    from propel_sdk.verl import PropelDataset

    cfg = OmegaConf.create({"train_batch_size": 2, "dataloader_num_workers": workers, "propel": propel})
    with pytest.raises(ValueError, match=re.escape(says)) as err:
        PropelDataset("propel://queue", None, cfg)
    assert "\n" not in str(err.value)


def test_several_reward_workers_are_refused_at_start() -> None:
    """verl's agent loop sends each completion to a random reward worker: groups would never complete."""
    from omegaconf import OmegaConf

    from propel_sdk.verl import PropelDataset

    cfg = OmegaConf.create({"data": {"train_batch_size": 2, "dataloader_num_workers": 0,
                                     "propel": {"api": "http://x", "solver": "s", "group_size": 2}},
                            "reward": {"num_workers": 8}})
    with pytest.raises(ValueError, match=r"set reward.num_workers=1"):
        PropelDataset("propel://queue", None, cfg.data)

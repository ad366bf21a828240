"""propel_sdk.verl's rows have the shape of verl's own ``RLHFDataset`` rows and survive verl's batch
plumbing (``collate_fn``, ``DataProto``, the GRPO repeat) with each row's lease intact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from propel_sdk.protocol import LeasedTask
from propel_sdk.verl import INFO_KEY, VerlSettings, verl_row


def _task(i: int) -> LeasedTask:
    return LeasedTask(id=i, lease_token=f"tok{i}", lease_until="2026-01-01T00:00:00+00:00", attempts=1,
                      message={"solver_prompt": f"Compute: {i}+1", "domain": "arith", "grading": {"answer": i + 1}})


def _settings() -> VerlSettings:
    return VerlSettings.from_config(OmegaConf.create({"train_batch_size": 2, "gen_batch_size": None, "propel": {
        "api": "http://propel", "solver": "pol", "group_size": 3}}))


def test_settings_read_data_propel_and_the_batch_sizes() -> None:
    s = _settings()
    assert (s.api, s.solver, s.group_size, s.batch, s.step_rows) == ("http://propel", "pol", 3, 2, 2)
    assert s.version(0) == "step-0" and s.lease_s == 600.0


def test_a_row_has_every_key_of_verls_own_rows(tmp_path: Path, char_tokenizer: Any) -> None:
    from verl.utils.dataset.rl_dataset import RLHFDataset

    path = tmp_path / "d.parquet"
    pd.DataFrame([{"data_source": "x", "prompt": [{"role": "user", "content": "1+1?"}], "ability": "math",
                   "reward_model": {"style": "rule", "ground_truth": "2"},
                   "extra_info": {"index": 0}}]).to_parquet(path)
    cfg = OmegaConf.create({"cache_dir": str(tmp_path / "cache"), "filter_overlong_prompts": False})
    theirs = RLHFDataset(str(path), char_tokenizer, cfg)[0]
    ours = verl_row(_task(7), _settings(), "step-4")
    assert set(theirs) <= set(ours)
    assert ours["raw_prompt"] == [{"role": "user", "content": "Compute: 7+1"}] and ours["index"] == 7
    assert ours["extra_info"][INFO_KEY]["task"]["lease_token"] == "tok7"
    assert ours["extra_info"][INFO_KEY]["version"] == "step-4"


def test_rows_survive_collate_dataproto_and_the_grpo_repeat() -> None:
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    batch = DataProto.from_single_dict(collate_fn([verl_row(_task(i), _settings(), "step-0") for i in (1, 2)]))
    group = batch.repeat(repeat_times=3, interleave=True)  # rollout.n completions per prompt
    infos = group.non_tensor_batch["extra_info"]
    assert len(group) == 6 and isinstance(infos, np.ndarray)
    assert [i[INFO_KEY]["task"]["id"] for i in infos] == [1, 1, 1, 2, 2, 2]
    assert {i[INFO_KEY]["group_size"] for i in infos} == {3}


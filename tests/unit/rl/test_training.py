"""Tiny-model GRPO runs: LoRA moves, base and reference do not; chunked resume; cold transfer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from curriculum.reward.novelty import DiversityTerm
from curriculum.reward.rewards import HardGateReward, ProbeOnlyReward
from curriculum.reward.topic_share import TopicShareTerm
from curriculum.rl import GeneratorTrainer, cpu_profile
from curriculum.rl.model import adapter_state, base_state
from probes import ProbeScorer
from tests.unit.rl.conftest import arith_texts, quick_pretrained, train_test_probe

pytestmark = pytest.mark.slow


def _config(**overrides):
    base = dict(max_completion_length=20, per_device_train_batch_size=8, num_generations=4, prompt_pool_size=16)
    return cpu_profile("mem:tiny-gen-64x2", "mem:tiny-ref-32x1", **(base | overrides))


def test_five_steps_move_lora_only(tmp_path: Path, tok, generator, reference, scorer, domain) -> None:
    torch.set_num_threads(1)
    trainer = GeneratorTrainer(_config(), tmp_path, model=generator, tokenizer=tok)
    base_before, lora_before = base_state(trainer.model), adapter_state(trainer.model)
    ref_print = reference.fingerprint
    stats = trainer.train_steps(5, ProbeOnlyReward(domain, scorer, group_size=4))
    assert stats.start_step == 0 and stats.end_step == 5 and trainer.global_step == 5
    lora_after = adapter_state(trainer.model)
    assert any(not torch.equal(lora_before[k], lora_after[k]) for k in lora_before)
    base_after = base_state(trainer.model)
    assert all(torch.equal(base_before[k], base_after[k]) for k in base_before)
    reference.verify_unchanged()
    assert reference.fingerprint == ref_print
    assert stats.adapter_hash == trainer.adapter_hash() and stats.reward_std >= 0
    assert 0.0 <= stats.validity_rate <= 1.0 and stats.kl is not None and stats.wall_s > 0


def test_resume_after_restart_with_hot_swapped_reward(tmp_path: Path, tok, generator, pretrained_state, reference,
                                                      scorer, domain) -> None:
    from curriculum.common.tinymodels import tiny_qwen2

    torch.set_num_threads(1)
    first = GeneratorTrainer(_config(), tmp_path, model=generator, tokenizer=tok)
    off = first.train_steps(3, ProbeOnlyReward(domain, scorer, group_size=4))
    assert off.diversity_penalty is None and off.topic_share_penalty is None  # both terms off
    hash3 = first.adapter_hash()
    del first
    fresh = tiny_qwen2(tok, hidden_size=64, num_layers=2, seed=0)
    fresh.load_state_dict(pretrained_state)
    restarted = GeneratorTrainer(_config(), tmp_path, model=fresh, tokenizer=tok)  # simulated restart
    assert restarted.global_step == 3 and restarted.adapter_hash() == hash3
    swapped = HardGateReward(domain, ProbeScorer(reference, train_test_probe(reference, "linear", seed=4)),
                             floor=-100.0, group_size=4)
    swapped.diversity = DiversityTerm("arith", weight=0.3)  # the chunk reports each term's mean penalty
    swapped.topic_share = TopicShareTerm(weight=1.0)
    stats = restarted.train_steps(2, swapped)
    assert stats.diversity_penalty is not None and 0.0 <= stats.diversity_penalty <= 1.0
    assert stats.topic_share_penalty is not None and 0.0 <= stats.topic_share_penalty <= 1.0
    assert (stats.start_step, stats.end_step, restarted.global_step) == (3, 5, 5)
    assert restarted.adapter_hash() != hash3 and stats.reward_name == "hard_gate"
    assert restarted.store.chunk_meta()["stats"]["end_step"] == 5
    restarted.train_steps(1, swapped)  # the same object keeps going
    assert restarted.global_step == 6
    out = restarted.save_adapter(tmp_path / "adapter")
    assert (out / "adapter_config.json").exists()


def test_cold_transfer_generator_differs_from_reference(tmp_path: Path, tok, reference, scorer, domain) -> None:
    other = quick_pretrained(tok, hidden=48, layers=3, seed=11)
    assert other.config.hidden_size != reference.hidden_size
    assert other.config.num_hidden_layers != reference.num_layers
    reward = HardGateReward.calibrated(domain, scorer, arith_texts(32, 9), group_size=4)
    trainer = GeneratorTrainer(_config(), tmp_path, model=other, tokenizer=tok)
    before = adapter_state(trainer.model)
    stats = trainer.train_steps(2, reward)
    assert stats.end_step == 2 and len(reward.logs) >= 2
    assert any(not torch.equal(before[k], v) for k, v in adapter_state(trainer.model).items())
    reference.verify_unchanged()


def test_sample_is_deterministic_and_leaves_training_rng(tmp_path: Path, tok, generator) -> None:
    trainer = GeneratorTrainer(_config(), tmp_path, model=generator, tokenizer=tok)
    state = torch.random.get_rng_state()
    a, b = trainer.sample(6, seed=3), trainer.sample(6, seed=3)
    assert a == b and len(a) == 6 and all(isinstance(t, str) for t in a)
    assert torch.equal(state, torch.random.get_rng_state())


def test_reference_sample_is_the_untrained_generator_and_leaves_the_adapter_on(tmp_path: Path, tok,
                                                                              generator) -> None:
    trainer = GeneratorTrainer(_config(), tmp_path, model=generator, tokenizer=tok)
    untrained = trainer.sample(8, seed=5)  # a fresh LoRA adapter (B = 0) leaves the base's outputs unchanged
    rng = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5, generator=rng)
    moved = trainer.sample(8, seed=5)
    assert moved != untrained, "the perturbed adapter changes the policy's samples"
    assert trainer.sample(8, seed=5, reference=True) == untrained
    assert trainer.sample(8, seed=5) == moved, "the adapter is back on after a reference sample"

"""Generator-RL configuration: one frozen dataclass per stage, values derived as properties.

Where the PROPEL paper (Appendix 16, Table 12, Math/AZR column) states a setting, the default
follows it: LoRA adapters on **all 7 attention/MLP projections**, GRPO with TRL's default loss and
advantage, a KL anchor **in the loss** (``beta > 0``) and none in the reward, one on-policy
iteration per generation, temperature 1.0 / top-p 1.0, hard-gate reward with an invalid floor, an
8-rollout group per prompt. The numeric cells of that table did not survive in the copy of the
paper this project works from, so rank/alpha/dropout/lr/beta defaults below are conventional
LoRA-GRPO values (rank 16, alpha 32, dropout 0.05, beta 0.04, lr 1e-5 on GPU) — documented as
such in ``docs/RL.md``. The CPU profile (:func:`cpu_profile`) applies the pitfalls measured on
this project's tiny models: ``use_cpu=True``, ``bf16=False``, no gradient checkpointing, a
learning rate around 1e-3 (1e-6 does nothing visible on a 1M-parameter model).

The generator (trainable policy) and the reference (frozen model the probes read) are separate
fields on purpose: the reference may be a different model (cold transfer, PROPEL §6).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

#: The 7 projections of a Llama/Qwen-style block (paper: "all 7 attn./MLP projections").
ALL_PROJECTIONS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSettings:
    """PEFT LoRA adapter settings."""

    rank: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: tuple[str, ...] = ALL_PROJECTIONS

    def __post_init__(self) -> None:
        if self.rank < 1 or self.alpha < 1:
            raise ValueError(f"lora rank and alpha must be ≥ 1 (got rank={self.rank}, alpha={self.alpha})")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"lora dropout must be in [0, 1), got {self.dropout}")
        if not self.target_modules:
            raise ValueError("lora target_modules is empty; use e.g. curriculum.rl.config.ALL_PROJECTIONS")


@dataclass(frozen=True)
class GeneratorRLConfig:
    """Everything the generator trainer needs. ``generator`` and ``reference`` are ids or paths."""

    generator: str
    reference: str
    domain: str = "arith"
    lora: LoraSettings = field(default_factory=LoraSettings)
    learning_rate: float = 1e-5
    beta: float = 0.04
    num_generations: int = 8
    per_device_train_batch_size: int = 8
    steps_per_generation: int = 1
    gradient_accumulation_steps: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_completion_length: int = 48
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    num_iterations: int = 1
    invalid_floor_margin: float = 1.0
    seed: int = 0
    use_cpu: bool = False
    bf16: bool = True
    gradient_checkpointing: bool = False
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    prompt_pool_size: int = 64
    keep_checkpoints: int = 2
    report_to: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.generator or not self.reference:
            raise ValueError("generator and reference must name a model id or a local path")
        if self.num_generations < 2:
            raise ValueError(f"num_generations must be ≥ 2 (GRPO needs a group), got {self.num_generations}")
        if self.rollouts_per_step % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size × steps_per_generation = {self.rollouts_per_step} must be divisible by "
                f"num_generations = {self.num_generations}; raise per_device_train_batch_size to a multiple of it"
            )
        if self.learning_rate <= 0 or self.beta < 0 or self.temperature <= 0:
            raise ValueError("learning_rate and temperature must be > 0 and beta ≥ 0")
        if self.use_cpu and self.bf16:
            raise ValueError("bf16=True with use_cpu=True: set bf16=False for CPU runs (TRL/accelerate pitfall)")
        if self.use_vllm and self.use_cpu:
            raise ValueError("use_vllm needs a GPU: set use_cpu=False or use_vllm=False")
        if self.keep_checkpoints < 1:
            raise ValueError("keep_checkpoints must be ≥ 1 (the latest checkpoint is what resume reads)")
        if self.invalid_floor_margin <= 0:
            raise ValueError("invalid_floor_margin must be > 0 so the floor lies strictly below the probe range")

    @property
    def rollouts_per_step(self) -> int:
        """Generations scored per optimiser step (one GRPO generation batch)."""
        return self.per_device_train_batch_size * self.steps_per_generation

    @property
    def prompts_per_step(self) -> int:
        return self.rollouts_per_step // self.num_generations

    def config_hash(self) -> str:
        """sha256 of every field (provenance stamp for checkpoints)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return "cfg-" + hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_profile(generator: str, reference: str, **overrides: Any) -> GeneratorRLConfig:
    """Settings measured to work on CPU with tiny models (see the module docstring)."""
    base = GeneratorRLConfig(
        generator=generator, reference=reference, learning_rate=1e-3, use_cpu=True, bf16=False,
        gradient_checkpointing=False, lora=LoraSettings(rank=8, alpha=16, dropout=0.0),
    )
    return replace(base, **overrides)


def gpu_profile(generator: str, reference: str, **overrides: Any) -> GeneratorRLConfig:
    """GPU settings: bf16, vLLM colocated rollouts, gradient checkpointing for 4B-class models."""
    base = GeneratorRLConfig(
        generator=generator, reference=reference, use_cpu=False, bf16=True, use_vllm=True,
        gradient_checkpointing=True,
    )
    return replace(base, **overrides)


def grpo_arguments(config: GeneratorRLConfig, output_dir: str, max_steps: int) -> Any:
    """The TRL ``GRPOConfig`` for one chunk that ends at global step ``max_steps``.

    Saving happens once, at the end of the chunk (``save_steps`` larger than any run); the
    scheduler is constant so that extending ``max_steps`` chunk by chunk does not change the
    learning rate of steps already planned.
    """
    from trl import GRPOConfig

    kwargs: dict[str, Any] = {
        "output_dir": output_dir, "max_steps": max_steps, "learning_rate": config.learning_rate,
        "lr_scheduler_type": "constant", "beta": config.beta, "num_generations": config.num_generations,
        "per_device_train_batch_size": config.per_device_train_batch_size,
        "steps_per_generation": config.steps_per_generation,
        "gradient_accumulation_steps": config.gradient_accumulation_steps, "temperature": config.temperature,
        "top_p": config.top_p, "top_k": config.top_k, "max_completion_length": config.max_completion_length,
        "max_grad_norm": config.max_grad_norm, "weight_decay": config.weight_decay,
        "num_iterations": config.num_iterations, "seed": config.seed, "use_cpu": config.use_cpu,
        "bf16": config.bf16, "activation_checkpointing": config.gradient_checkpointing,
        "use_vllm": config.use_vllm, "save_strategy": "steps", "save_steps": 10**9,
        "save_only_model": False, "logging_steps": 1, "report_to": list(config.report_to) or "none",
        "disable_tqdm": True, "dataloader_num_workers": 0, "shuffle_dataset": False,
    }
    if config.use_vllm:
        kwargs["vllm_mode"] = config.vllm_mode
    return GRPOConfig(**kwargs)

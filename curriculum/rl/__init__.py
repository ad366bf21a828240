"""Generator RL: GRPO + LoRA against probe rewards, in resumable chunks (see ``docs/RL.md``)."""

from curriculum.rl.checkpoints import CheckpointError, CheckpointStore
from curriculum.rl.chunk import ChunkStats, run_chunk
from curriculum.rl.config import ALL_PROJECTIONS, GeneratorRLConfig, LoraSettings, cpu_profile, gpu_profile
from curriculum.rl.generator import GeneratorTrainer
from curriculum.rl.model import adapter_hash, attach_lora, load_adapter, load_base, save_adapter
from curriculum.rl.sampling import sample_completions

__all__ = [
    "ALL_PROJECTIONS",
    "CheckpointError",
    "CheckpointStore",
    "ChunkStats",
    "GeneratorRLConfig",
    "GeneratorTrainer",
    "LoraSettings",
    "adapter_hash",
    "attach_lora",
    "cpu_profile",
    "gpu_profile",
    "load_adapter",
    "load_base",
    "run_chunk",
    "sample_completions",
    "save_adapter",
]

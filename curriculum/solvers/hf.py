"""In-process ``transformers`` solver: batched sampling of ``n`` completions per prompt (CPU-capable).

Use it for small solvers and tests; production solvers run behind vLLM (``openai`` backend). In a
Celery worker, construct it inside the worker process (after fork), never in the parent: CUDA
must not be initialised before a fork.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from curriculum.common.solver_api import Completion, Sampling

log = logging.getLogger("propel.solver.hf")


class HFSolver:
    """Sample from a causal LM loaded with ``AutoModelForCausalLM`` (a hub id or a local directory)."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str = "local", batch_size: int = 16,
                 device: str = "cpu") -> None:
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.batch_size = batch_size
        self.device = device
        self.solver_id = f"hf:{name}"

    @classmethod
    def from_pretrained(cls, name_or_path: str, revision: str | None = None, **kw: Any) -> HFSolver:
        from transformers import AutoModelForCausalLM

        from probes.reference import load_tokenizer

        tok = load_tokenizer(name_or_path, revision=revision)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, revision=revision)
        return cls(model, tok, name=name_or_path, **kw)

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        out: list[list[Completion]] = []
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        per_batch = max(1, self.batch_size // n)
        for i in range(0, len(prompts), per_batch):
            out += self._batch(prompts[i:i + per_batch], n, sampling)
        return out

    def _batch(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True).to(self.device)
        start = time.perf_counter()
        gen = self.model.generate(
            **enc, do_sample=sampling.temperature > 0, temperature=max(sampling.temperature, 1e-5),
            top_p=sampling.top_p, max_new_tokens=sampling.max_tokens, num_return_sequences=n,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        latency = (time.perf_counter() - start) / max(1, len(prompts) * n)
        texts = self.tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        for stop in sampling.stop:
            texts = [t.split(stop, 1)[0] for t in texts]
        return [[Completion(t, latency_s=latency) for t in texts[j * n:(j + 1) * n]] for j in range(len(prompts))]


#: The placeholder of a versioned model path (``solver.model = "/ckpt/{version}"``).
VERSION_FIELD = "{version}"


class CheckpointMissing(FileNotFoundError):
    """The checkpoint folder of the version to serve does not exist (the message names the fix)."""


class VersionedHFSolver:
    """An ``hf`` solver that serves the checkpoint of the version a spot-check is for: the model path
    is a template, ``/ckpt/{version}`` → ``/ckpt/step-1200`` for ``name@step-1200``.

    A trainer saves ``<dir>/step-N`` and then announces ``step-N``; spot-checks dispatched for that
    version load that folder. The last ``cache`` checkpoints stay loaded (a spot-check of an older
    version still pending after an announce does not reload). A folder that does not exist is
    waited for up to ``wait_s`` seconds (a trainer starting beside the daemon), then
    :class:`CheckpointMissing` is raised.
    """

    def __init__(self, template: str, *, version: str = "", wait_s: float = 0.0, cache: int = 2,
                 poll_s: float = 1.0, **kw: Any) -> None:
        if VERSION_FIELD not in template:
            raise ValueError(f"a versioned model path needs {VERSION_FIELD} in it, got {template!r}")
        self.template, self.version, self.wait_s, self.poll_s = template, version, wait_s, poll_s
        self.cache_size, self.kw = max(1, cache), kw
        self._loaded: OrderedDict[str, HFSolver] = OrderedDict()
        self.solver_id = f"hf:{template}"

    def serve_version(self, version: str) -> None:
        """Serve ``version`` from now on (spot-checks call this with the version they record)."""
        self.version = version

    def path_for(self, version: str) -> Path:
        if not version:
            raise CheckpointMissing(f"solver.model {self.template!r} names {VERSION_FIELD}, but the solver has no "
                                    "version yet: set solver.version (e.g. \"step-0\") or announce one")
        return Path(self.template.replace(VERSION_FIELD, version))

    def solver(self) -> HFSolver:
        """The loaded checkpoint of the current version (loaded on first use, then cached)."""
        version = self.version
        if version in self._loaded:
            self._loaded.move_to_end(version)
            return self._loaded[version]
        path = self._wait_for(self.path_for(version), version)
        solver = HFSolver.from_pretrained(str(path), **self.kw)
        log.info("solver checkpoint %s loaded for version %s", path, version)
        self._loaded[version] = solver
        while len(self._loaded) > self.cache_size:
            self._loaded.popitem(last=False)
        return solver

    def _wait_for(self, path: Path, version: str) -> Path:
        deadline = time.monotonic() + self.wait_s
        said = False
        while not (path / "config.json").is_file():
            if time.monotonic() >= deadline:
                raise CheckpointMissing(
                    f"solver checkpoint {path} (version {version!r}, from solver.model {self.template!r}) does not "
                    "exist: the trainer saves it before announcing the version; check the folder and solver.model")
            if not said:
                log.warning("waiting up to %.0f s for solver checkpoint %s (version %s)", self.wait_s, path, version)
                said = True
            time.sleep(self.poll_s)
        return path

    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        return self.solver().generate(prompts, n, sampling)

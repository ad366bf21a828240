"""The hf solver with a versioned model path (``/ckpt/{version}``): each spot-check's version loads its
own checkpoint folder, loaded checkpoints are cached, a missing folder is a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from curriculum.common.solver_api import Sampling
from curriculum.common.tinymodels import save_tiny
from curriculum.solvers import build_solver
from curriculum.solvers.hf import CheckpointMissing, VersionedHFSolver


def test_each_version_loads_its_checkpoint_and_stays_cached(tmp_path: Path, tiny_model, char_tokenizer) -> None:
    for version in ("step-0", "step-5"):
        save_tiny(tiny_model, char_tokenizer, tmp_path / version)
    solver = build_solver("hf", model=str(tmp_path / "{version}"), options={"version": "step-0"})
    assert isinstance(solver, VersionedHFSolver) and solver.solver_id == f"hf:{tmp_path}/{{version}}"
    out = solver.generate(["Compute: 1+2\n"], 2, Sampling(max_tokens=3, seed=0))
    assert len(out) == 1 and len(out[0]) == 2 and all(c.text is not None for c in out[0])
    first = solver.solver()
    solver.serve_version("step-5")
    second = solver.solver()
    assert second is not first
    solver.serve_version("step-0")
    assert solver.solver() is first  # cached: no reload when a pending check of the older version runs


def test_missing_checkpoint_and_unversioned_are_clear_errors(tmp_path: Path) -> None:
    solver = VersionedHFSolver(str(tmp_path / "{version}"), version="step-9", wait_s=0.0)
    with pytest.raises(CheckpointMissing, match=r"step-9.*does not exist: the trainer saves it before announcing"):
        solver.generate(["x"], 1, Sampling())
    solver.serve_version("")
    with pytest.raises(CheckpointMissing, match=r"set solver\.version"):
        solver.generate(["x"], 1, Sampling())
    with pytest.raises(ValueError, match="needs \\{version\\}"):
        VersionedHFSolver(str(tmp_path))

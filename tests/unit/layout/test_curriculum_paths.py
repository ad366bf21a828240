"""`scripts/curriculum_paths.py`: what a branch cut before issue #33 runs after merging the move."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("curriculum_paths", ROOT / "scripts" / "curriculum_paths.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_move_names_a_module_that_exists_where_it_went_and_not_where_it_was() -> None:
    script = _script()
    for old in [*script.MOVES, *script.RENAMED]:
        new = script._new_path(old)
        assert (ROOT / "curriculum" / f"{new.replace('.', '/')}.py").is_file(), new
        assert not (ROOT / "curriculum" / f"{old.replace('.', '/')}.py").exists(), old


def test_rewrite_moves_dotted_slashed_and_from_imports() -> None:
    rewrite = _script().rewrite
    before = (
        "from curriculum import drift, solver_versions\n"
        "    from curriculum.spotcheck import Band\n"
        "from curriculum.solvers.base import Sampling\n"
        "from curriculum.solvers import build_solver\n"
        "see `curriculum/refresh.py` and :func:`curriculum.first_probe.label_corpus`\n"
        'mock.patch("curriculum.retrain.run_retrain")\n'
        "from curriculum.domains.swe.bootstrap_corpus import spec_line_corpus\n"
    )
    assert rewrite(before) == (
        "from curriculum.frontier import drift\nfrom curriculum.store import solver_versions\n"
        "    from curriculum.labelling.spotcheck import Band\n"
        "from curriculum.common.solver_api import Sampling\n"
        "from curriculum.solvers import build_solver\n"
        "see `curriculum/frontier/refresh.py` and :func:`curriculum.probing.first_probe.label_corpus`\n"
        'mock.patch("curriculum.probing.retrain.run_retrain")\n'
        "from curriculum.domains.swe.bootstrap_corpus import spec_line_corpus\n"
    )
    assert rewrite(rewrite(before)) == rewrite(before), "running it twice changes nothing more"


def test_check_finds_nothing_old_in_this_tree() -> None:
    script = _script()
    files = [p for pkg in ("curriculum", "daemon", "workers", "propel_sdk", "testkit", "benchmarks", "docs")
             for p in (ROOT / pkg).rglob("*") if p.suffix in {".py", ".md"}]
    assert script.main(["--check", *map(str, files)]) == 0

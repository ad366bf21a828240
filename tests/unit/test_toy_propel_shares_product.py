"""The toy table runs the product (issue #17 item 4): ``benchmarks/toy_propel.py`` drives the very
functions the daemon runs — engine, configured reward, first-probe labelling and registration, the
driver with its spot-checks and retraining — and re-implements none of them.

The benchmark is read as source (tests do not import benchmarks): it must import each shared
function from the module production takes it from, and use none of the loop's internals. Production
is checked by an AST scan of its calls: ``propel run`` builds its driver with ``assemble_driver`` and
its engine with ``build_engine``; the engine labels its first corpus with ``label_corpus`` (or, with
``probes.corpus_labelling = "active"``, ``label_corpus_actively`` with ``active_settings``), registers
probes with ``register_primaries`` and builds its reward with ``build_reward``. A later change that
forks either side breaks this test.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import daemon.service.engine as engine
import daemon.service.runtime as runtime

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "toy_propel.py"
#: (module, name) the benchmark must import: the daemon's own definitions
SHARED = {("daemon.service.engine", "build_engine"), ("daemon.service.runtime", "assemble_driver"),
          ("daemon.service.runtime", "ServiceHooks"), ("daemon.service.lifecycle", "open_run"),
          ("curriculum.probing.first_probe", "label_corpus"),
          ("curriculum.probing.first_probe", "distinct_valid_tasks"),
          ("curriculum.probing.first_probe", "register_primaries"), ("probes.fit", "fit_probe"),
          ("curriculum.probing.first_probe", "label_corpus_actively"), ("daemon.service.settings", "active_settings"),
          ("daemon.service.settings", "active_pool_samples")}
# names the loop's own machinery goes by: a benchmark that uses one of them copies the loop
LOOP_INTERNALS = ("GeneratorTrainer", "HardGateReward", "SoftGateReward", "train_aux_probe", "select_candidates",
                  "run_spotcheck", "label_tasks", "false_positives", "ProbeScorer", "ProbeEnsemble", "Driver",
                  "cpu_profile", "run_retrain")


def _imports(tree: ast.AST) -> set[tuple[str, str]]:
    return {(n.module or "", a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


def _calls(fn: Callable[..., Any]) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(fn)))):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return names


def test_benchmark_imports_the_daemons_functions() -> None:
    tree = ast.parse(BENCHMARK.read_text())
    assert _imports(tree) >= SHARED, sorted(SHARED - _imports(tree))
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert not defined & {name for _, name in SHARED}, "the benchmark redefines a shared function"


def test_production_takes_them_from_the_same_modules() -> None:
    engine_imports = _imports(ast.parse(inspect.getsource(engine)))
    assert {("curriculum.probing.first_probe", n)
            for n in ("label_corpus", "distinct_valid_tasks", "register_primaries",
                      "label_corpus_actively")} <= engine_imports
    assert {("daemon.service.settings", n) for n in ("active_settings", "active_pool_samples")} <= engine_imports
    assert ("probes.fit", "fit_probe") in engine_imports
    assert ("daemon.service.lifecycle", "open_run") in _imports(ast.parse(inspect.getsource(runtime)))


def test_production_calls_the_shared_functions() -> None:
    assert {"build_engine", "assemble_driver", "open_run"} <= _calls(runtime.run)
    assert {"build_spot", "build_retrainer", "Driver", "driver_settings"} <= _calls(runtime.assemble_driver)
    methods = {name: _calls(fn) for name, fn in inspect.getmembers(engine.PropelEngine, inspect.isfunction)}
    assert "register_primaries" in methods["_ensure_primary_probes"]
    assert {"distinct_valid_tasks", "label_corpus"} <= methods["_offline_labels"]
    assert {"distinct_valid_tasks", "label_corpus_actively", "active_settings", "active_pool_samples"} \
        <= methods["_active_labels"]
    assert "build_reward" in methods["load_probes"]
    assert "fit_probe" in methods["_fit"]


def test_benchmark_reimplements_no_loop_internals() -> None:
    tree = ast.parse(BENCHMARK.read_text())
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {name for _, name in _imports(tree)}
    assert not used & set(LOOP_INTERNALS), sorted(used & set(LOOP_INTERNALS))

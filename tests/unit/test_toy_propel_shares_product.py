"""The toy table runs the product (issue #17 item 4): ``benchmarks/toy_propel.py`` drives the very
functions the daemon runs — engine, configured reward, first-probe labelling and registration, the
driver with its spot-checks and retraining — and re-implements none of them.

Identity checks (the benchmark's names are the daemon's objects) plus an AST check of production:
``propel run`` builds its driver with ``assemble_driver`` and its engine with ``build_engine``; the
engine labels its first corpus with ``label_corpus``, registers probes with ``register_primaries`` and
builds its reward with ``build_reward``. A later change that forks either side breaks this test.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import benchmarks.toy_propel as toy
import daemon.service.engine as engine
import daemon.service.runtime as runtime

# names the loop's own machinery goes by: a benchmark that uses one of them copies the loop
LOOP_INTERNALS = ("GeneratorTrainer", "HardGateReward", "SoftGateReward", "train_aux_probe", "select_candidates",
                  "run_spotcheck", "label_tasks", "false_positives", "ProbeScorer", "ProbeEnsemble", "Driver",
                  "cpu_profile", "run_retrain")


def _calls(fn: Callable[..., Any]) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return names


def test_benchmark_uses_the_daemons_objects() -> None:
    assert toy.build_engine is engine.build_engine
    assert toy.assemble_driver is runtime.assemble_driver
    assert toy.open_run is runtime.open_run
    assert toy.ServiceHooks is runtime.ServiceHooks
    assert toy.label_corpus is engine.label_corpus and toy.distinct_valid_tasks is engine.distinct_valid_tasks
    assert toy.register_primaries is engine.register_primaries
    assert toy.fit_probe is engine.fit_probe


def test_production_calls_the_shared_functions() -> None:
    assert {"build_engine", "assemble_driver"} <= _calls(runtime.run)
    assert {"build_spot", "build_retrainer", "Driver", "driver_settings"} <= _calls(runtime.assemble_driver)
    methods = {name: _calls(fn) for name, fn in inspect.getmembers(engine.PropelEngine, inspect.isfunction)}
    assert "register_primaries" in methods["_ensure_primary_probes"]
    assert {"distinct_valid_tasks", "label_corpus"} <= methods["_offline_labels"]
    assert "build_reward" in methods["load_probes"]
    assert "fit_probe" in methods["_fit"]


def test_benchmark_reimplements_no_loop_internals() -> None:
    source = ast.parse(inspect.getsource(toy))
    used = {n.id for n in ast.walk(source) if isinstance(n, ast.Name)}
    used |= {a.asname or a.name for n in ast.walk(source) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not used & set(LOOP_INTERNALS), sorted(used & set(LOOP_INTERNALS))

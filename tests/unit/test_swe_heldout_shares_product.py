"""``benchmarks/swe_heldout.py`` runs the product (issue #21): the daemon's engine and run store, the
first-probe code, the solver-only evaluation and the domain's ``tiny-repo`` prompts with their
``generation_text`` join, and re-implements none of the loop. Read as source (tests do not import
benchmarks), like ``test_toy_propel_shares_product.py``."""

from __future__ import annotations

from testkit.benchmark_source import BENCHMARKS, assert_drives_product

BENCHMARK = BENCHMARKS / "swe_heldout.py"
SHARED = {("daemon.service.engine", "build_engine"), ("daemon.service.lifecycle", "open_run"),
          ("curriculum.probing.first_probe", "label_corpus"),
          ("curriculum.probing.first_probe", "distinct_valid_tasks"),
          ("curriculum.probing.first_probe", "register_primaries"), ("curriculum.probing.first_probe", "task_groups"),
          ("probes.fit", "fit_probe"), ("curriculum.probing.evaluation", "evaluate_texts"),
          ("curriculum.domains.base", "generation_text"), ("curriculum.rl.bootstrap", "bootstrap"),
          ("curriculum.domains.swe.synthetic", "SyntheticSweSolver")}
LOOP_INTERNALS = ("GeneratorTrainer", "HardGateReward", "SoftGateReward", "ProbeScorer", "run_chunk", "label_tasks",
                  "cpu_profile", "Verifier", "parse_spec", "mutation_patch")


def test_benchmark_imports_the_products_functions_and_copies_none() -> None:
    assert_drives_product("swe_heldout", SHARED, LOOP_INTERNALS)


def test_each_stage_prompts_its_own_split() -> None:
    """Probe corpus on probe-train, RL (the engine's config) on rl-train, evaluation on held-out; the
    generator's pretraining corpus on every repository; prompts are the repository-conditioned style."""
    source = BENCHMARK.read_text()
    for needle in ('split_domain(cache, "probe-train", settings.prompt_style)', '"split": "rl-train"',
                   '"held-out": split_domain(cache, "held-out", style)',
                   'domain_options={"cache_dir": str(cache), "split": None}',
                   'prompt_style=prompt_style', '"prompt_style": settings.prompt_style'):
        assert needle in source, needle

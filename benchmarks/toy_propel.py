"""Toy-scale PROPEL on the product: probe-reward generator RL vs base and solver-in-the-loop RL, on arith.

Every RL row runs the daemon's own code (issue #17 item 4): a run store and data directory per row
(:func:`daemon.service.lifecycle.open_run`), the daemon's engine (:func:`daemon.service.engine.build_engine`:
GRPO chunks, the configured probe reward :func:`curriculum.reward.rewards.build_reward`, sampling) and, for the
co-evolution rows, the daemon's driver (:func:`daemon.service.runtime.assemble_driver`: sample phase,
in-process spot-checks, false-positive mining, aux-probe retraining, alerts, emission). The probes are
built once with the daemon's first-probe code (:func:`curriculum.probing.first_probe.label_corpus`,
:func:`probes.fit.fit_probe`) and registered into each row's store as its primary probes
(:func:`curriculum.probing.first_probe.register_primaries`). Evaluation (k = 8 solver attempts on a fresh
sample) is the only code of its own. ``tests/unit/test_toy_propel_shares_product.py`` guards this.

Rows (each trained from the bootstrapped tiny generator, evaluated **only** with the solver):

* ``Base`` — the bootstrapped generator, no RL.
* ``PROPEL`` — hard-gate reward on one MLP probe (0 online solver trials).
* ``PROPEL-WCO`` — minimum over two MLP probes (different feature layer/pooling and seed).
* ``PROPEL-linear`` — a single **linear** probe trained ``linear_steps`` (3× longer): the
  configuration expected to get reward-hacked (ARCHITECTURE §6 measured 31% → 1%).
* ``PROPEL + co-evolution`` / ``PROPEL-linear + co-evolution`` — the daemon's driver: its first
  cycle trains half the steps; the run (store + data directory) is then copied; the original
  finishes the single-probe row with the other half, the copy goes on as the daemon does (sample,
  spot-check the probe-high tasks, mine false positives, retrain the aux probe, emit) and trains the
  second half under ``min(primary, aux)``. Same total step count as the single-probe run.
* ``SIL`` — the engine's GRPO with reward = in-band indicator from ``k`` live solver attempts
  (online solver trials) instead of the probe reward.
* ``PROPEL (active corpus)`` (on request, ``--rows``; issue #22 item 5) — PROPEL whose probe is trained on
  an actively labelled corpus: the row's config sets ``probes.corpus_labelling = "active"`` with
  ``probes.train_samples`` = ``--active-share`` (default 0.4) of the uniform corpus's solver trials (÷ k),
  and the corpus is labelled by the daemon's own code for that setting
  (:func:`daemon.service.settings.active_settings`, :func:`curriculum.probing.first_probe.label_corpus_actively`)
  on a pool of ``probes.active_pool_factor × train_samples`` base-policy samples; the probe is fitted like
  PROPEL's ``mlp``. Its offline solver trials are the active corpus's.

The solver is :class:`~curriculum.solvers.synthetic.SyntheticArithSolver` — a benchmark instrument
(logistic success in task complexity), labelled as synthetic in the output. The frozen reference
the probes read is the bootstrapped generator itself (PROPEL's setup).

    .venv/bin/python -m benchmarks.toy_propel            # full run (~15-30 min on 2 shared CPU cores)
    .venv/bin/python -m benchmarks.toy_propel --quick    # tiny settings, a few minutes
    .venv/bin/python -m benchmarks.toy_propel --rows "Base,PROPEL,SIL,PROPEL (active corpus)" \
        --name toy_propel_active                          # the active-corpus row next to PROPEL and SIL
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import torch
from sqlalchemy import func, select

from benchmarks._common import COMMIT_AT_START, RESULTS, write_result
from benchmarks.toy_report import aggregate, goals, markdown, plot, write_readme_section
from curriculum.common.solver_api import Sampling
from curriculum.domains.arith import ArithDomain
from curriculum.probing import retrain
from curriculum.probing.evaluation import EvaluationResult, evaluate_texts
from curriculum.probing.first_probe import distinct_valid_tasks, label_corpus, label_corpus_actively, register_primaries
from curriculum.reward.rewards import SolverInTheLoopReward
from curriculum.rl.bootstrap import BootstrapSettings, bootstrap, load_bootstrapped
from curriculum.rl.sampling import sample_completions
from curriculum.solvers.synthetic import SyntheticArithSolver
from curriculum.store import repo
from curriculum.store.db import Store
from curriculum.store.models import SolverTrial
from daemon.config import PropelConfig
from daemon.loop.progress import Progress
from daemon.ops.metrics import build_metrics
from daemon.service.engine import PropelEngine, build_engine
from daemon.service.lifecycle import open_run
from daemon.service.runtime import ServiceHooks, assemble_driver
from daemon.service.settings import active_pool_samples, active_settings, build_artifacts
from probes import FeatureExtractor, FrozenReference, TrainConfig
from probes.fit import fit_probe
from testkit.toy_rows import (
    ACTIVE_ROW,
    BAND,
    COLUMNS,
    EXTRA_ROWS,
    ROWS,
    SPEC_A,
    SPEC_B,
    ActiveCorpus,
    PairSpec,
    Settings,
    Shared,
    active_probes_section,
    pair_specs,
    row_config,
    run_name,
)

log = logging.getLogger("benchmarks.toy_propel")


def benchmark_solver() -> SyntheticArithSolver:
    return SyntheticArithSolver(slope=1.0, offset=6.0, seed=0)


def never_stop() -> bool:
    return False


def build_shared(settings: Settings, data_dir: Path, bootstrap_seed: int = 0, active_root: Path | None = None
                 ) -> Shared:
    """Bootstrap, the labelled corpus (offline solver trials) and three probes on it, by the daemon's code;
    with ``active_root`` also the active row's probe (:func:`build_active`)."""
    boot = bootstrap("arith", data_dir, steps=settings.bootstrap_steps, show_progress=False,
                     settings=BootstrapSettings(seed=bootstrap_seed))
    model, tok = load_bootstrapped(boot.path)
    domain = ArithDomain()
    texts = sample_completions(model, tok, domain.generator_prompts(settings.corpus, 0), seed=0)
    corpus = label_corpus(domain, benchmark_solver(), distinct_valid_tasks(domain, texts), BAND, Sampling(seed=1))
    reference = FrozenReference.load(str(boot.path))
    feats = FeatureExtractor(reference).extract(corpus.texts, [SPEC_A, SPEC_B])
    y = corpus.y
    training = {"rows": int(y.size), "positives": int(y.sum()), "offline_solver_trials": corpus.solver_trials}
    probes = {name: fit_probe(feats[spec], y, reference=reference, spec=spec, band=BAND, arch=arch,
                              config=TrainConfig(seed=seed, hidden_dim=64), name=name, training=training)
              for name, spec, arch, seed in (("mlp", SPEC_A, "mlp", 0), ("mlp_b", SPEC_B, "mlp", 1),
                                             ("linear", SPEC_A, "linear", 0))}
    metrics = {name: {**p.metrics, "positives": int(y.sum()), "rows": int(y.size)} for name, p in probes.items()}
    shared = Shared(boot.path, reference.fingerprint, probes, metrics, corpus.solver_trials, boot.validity)
    if active_root is not None:
        shared.active = build_active(shared, settings, active_root, model, tok, reference)
    return shared


def build_active(shared: Shared, settings: Settings, root: Path, model: Any, tok: Any,
                 reference: FrozenReference) -> ActiveCorpus:
    """The active row's probe: the daemon's active labelling for the row's config (pool of
    ``active_pool_factor × train_samples`` base-policy samples, :func:`active_settings`' rounds) with the
    uniform corpus's solver and sampling, fitted like the ``mlp`` probe; registered as ``mlp_active``."""
    cfg = row_config(shared, settings, root, "active-corpus", 0, settings.steps,
                     probes=active_probes_section(shared, settings))
    domain = ArithDomain()
    texts = sample_completions(model, tok, domain.generator_prompts(active_pool_samples(cfg), 0), seed=0)
    pool = distinct_valid_tasks(domain, texts)
    x_pool = FeatureExtractor(reference).extract([domain.reference_text(t) for t in pool], [SPEC_A])[SPEC_A]
    corpus, x = label_corpus_actively(domain, benchmark_solver(), pool, x_pool, BAND, Sampling(seed=1),
                                      active_settings(cfg), say=log.info)
    y = corpus.y
    training = {"rows": int(y.size), "positives": int(y.sum()), "offline_solver_trials": corpus.solver_trials,
                "corpus_labelling": "active"}
    probe = fit_probe(x, y, reference=reference, spec=SPEC_A, band=BAND, arch="mlp",
                      config=TrainConfig(seed=0, hidden_dim=64), name="mlp_active", training=training)
    shared.probes[probe.name] = probe
    shared.probe_metrics[probe.name] = {**probe.metrics, "positives": int(y.sum()), "rows": int(y.size)}
    info = {"share": settings.active_share, "budget_tasks": cfg.probes.train_samples, "pool_tasks": len(pool),
            "rows": int(y.size), "positives": int(y.sum()), "solver_trials": corpus.solver_trials,
            "uniform_solver_trials": shared.corpus_trials, "settings": active_settings(cfg).__dict__}
    return ActiveCorpus(corpus.solver_trials, info)


def open_row(cfg: PropelConfig, shared: Shared, members: list[str]) -> tuple[Store, int, PropelEngine]:
    """Open the row's run (``propel run``'s own store setup), give it ``members`` as its primary probes
    unless it has some (a copied run keeps its own), and build the daemon's engine on it."""
    store, run_id = open_run(cfg)
    with store.session() as s:
        has_probes = bool(repo.active_probes(s, run_id))
    if not has_probes:
        register_primaries(store, run_id, build_artifacts(cfg, store), [shared.probes[m] for m in members],
                           Path(cfg.data_dir) / "probes", shared.fingerprint)
    return store, run_id, build_engine(cfg, store, run_id, say=log.debug)


def sil_reward(group: int) -> SolverInTheLoopReward:
    """The solver-in-the-loop baseline's reward: k live attempts of the benchmark solver per completion."""
    return SolverInTheLoopReward(ArithDomain(), benchmark_solver(), BAND, group, Sampling(seed=3))


def train_on(engine: PropelEngine, reward: SolverInTheLoopReward) -> None:
    """Make the engine's GRPO chunks train on ``reward`` (a baseline's reward, not a product reward)."""
    engine.reward = reward  # type: ignore[assignment]


def evaluate(sample: list[str], seed: int) -> EvaluationResult:
    return evaluate_texts(sample, ArithDomain(), benchmark_solver(), BAND, Sampling(seed=1000 + seed))


def _record(result: EvaluationResult, online: int, offline: int, wall_s: float,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**result.to_dict(), "online_solver_trials": online, "offline_solver_trials": offline,
            "wall_s": wall_s, **(extra or {})}


def coevolve(cfg: PropelConfig, shared: Shared, members: list[str], steps: int, eval_n: int,
             seed: int) -> tuple[EvaluationResult, dict[str, Any]]:
    """Go on with a copied run as the daemon does, until its next RL chunk (``steps``) has trained."""
    store, run_id, engine = open_row(cfg, shared, members)
    metrics = build_metrics()
    hooks = ServiceHooks(cfg, store, run_id, metrics, Progress())
    driver = assemble_driver(cfg, store, run_id, engine, hooks, never_stop, metrics)
    driver.s = replace(driver.s, steps_per_chunk=steps)
    info: dict[str, Any] = {}
    try:
        while True:
            report = driver.tick()
            info |= {f"{report.phase}_{k}": v for k, v in report.values.items()}
            if report.phase == "rl":
                break
        job = retrain.job_outcome(store, f"{cfg.run_name}-aux-c0")
        with store.session() as s:
            trials = int(s.scalar(select(func.count()).select_from(SolverTrial)) or 0)
        info |= {"spotcheck_trials": trials, "aux_probe": bool(job and job.state == "done"),
                 "retrain_state": job.state if job else "not started", "retrain_reason": job.reason if job else None,
                 **({k: job.result.get(k) for k in ("positives", "negatives", "false_positives")} if job else {})}
        return evaluate(engine.sample(eval_n, 100 + seed), seed), info
    finally:
        hooks.close()
        store.dispose()


def run_probe_pair(shared: Shared, settings: Settings, root: Path, seed: int, spec: PairSpec,
                   fork: bool = True) -> dict[str, dict[str, Any]]:
    """A single-probe run and (``fork``) its co-evolution fork after the first half (same total steps),
    as rows ``spec.names`` = (single, co-evolution)."""
    names, members, steps = spec.names, spec.members, spec.steps
    half = max(1, steps // 2)
    started = time.perf_counter()
    cfg = row_config(shared, settings, root, run_name(names[0], seed), seed, half, spec.rl, spec.probes)
    store, run_id, engine = open_row(cfg, shared, members)
    metrics = build_metrics()
    hooks = ServiceHooks(cfg, store, run_id, metrics, Progress())
    report = assemble_driver(cfg, store, run_id, engine, hooks, never_stop, metrics).tick()  # cycle 0: RL, first half
    assert report.phase == "rl", report
    hooks.close()
    store.dispose()
    forked = cfg.model_copy(update={"data_dir": Path(f"{cfg.data_dir}-coevo")})
    if fork:
        shutil.copytree(cfg.data_dir, forked.data_dir)  # the run's whole state: store, checkpoint, artifacts
    shared_s = time.perf_counter() - started
    engine.rl_chunk(steps - half, never_stop, 1.0)
    single = _record(evaluate(engine.sample(settings.eval_n, 100 + seed), seed), 0, spec.offline,
                     time.perf_counter() - started, {"adapter_hash": engine.trainer.adapter_hash()})
    store.dispose()
    if not fork:
        return {names[0]: single}
    started = time.perf_counter()
    result, info = coevolve(forked, shared, members, steps - half, settings.eval_n, seed)
    coevo = _record(result, 0, spec.offline + int(info["spotcheck_trials"]),
                    shared_s + time.perf_counter() - started, {"coevolution": info})
    return {names[0]: single, names[1]: coevo}


def run_plain(shared: Shared, settings: Settings, root: Path, seed: int, row: str) -> dict[str, Any]:
    """PROPEL-WCO (two probes, min) or SIL (the engine's GRPO on live solver attempts)."""
    started = time.perf_counter()
    cfg = row_config(shared, settings, root, f"{row.lower()}-{seed}", seed, settings.steps)
    store, _, engine = open_row(cfg, shared, ["mlp"] if row == "SIL" else ["mlp", "mlp_b"])
    sil = sil_reward(settings.group)
    if row == "SIL":
        train_on(engine, sil)
    engine.rl_chunk(settings.steps, never_stop, 1.0)
    store.dispose()
    online = sil.solver_trials if row == "SIL" else 0
    offline = 0 if row == "SIL" else shared.corpus_trials
    return _record(evaluate(engine.sample(settings.eval_n, 100 + seed), seed), online, offline,
                   time.perf_counter() - started)


def run_base(shared: Shared, settings: Settings, seed: int) -> dict[str, Any]:
    started = time.perf_counter()
    model, tok = load_bootstrapped(shared.gen_path)
    texts = sample_completions(model, tok, ArithDomain().generator_prompts(settings.eval_n, seed), seed=100 + seed)
    return _record(evaluate(texts, seed), 0, 0, time.perf_counter() - started)


def run_seed(shared: Shared, settings: Settings, root: Path, seed: int, rows: tuple[str, ...]
             ) -> dict[str, dict[str, Any]]:
    """Every requested row for one seed (a pair's single-probe run runs when either of its rows is
    requested, its co-evolution fork when that row is)."""
    out: dict[str, dict[str, Any]] = {}
    if "Base" in rows:
        out["Base"] = run_base(shared, settings, seed)
    for spec in pair_specs(shared, settings):
        if set(spec.names) & set(rows):  # the fork only when its co-evolution row is asked for
            out |= run_probe_pair(shared, settings, root, seed, spec, fork=spec.names[1] in rows)
    out |= {row: run_plain(shared, settings, root, seed, row) for row in ("PROPEL-WCO", "SIL") if row in rows}
    return {row: value | {"seed": seed} for row, value in out.items() if row in rows}


def run(settings: Settings, data_dir: Path, name: str, rows: tuple[str, ...] = ROWS) -> dict[str, Any]:
    """Everything; one torch thread (on a shared 2-core box, 2 threads made GRPO steps 10× slower)."""
    torch.set_num_threads(1)
    started = time.perf_counter()
    per_seed: dict[str, list[dict[str, Any]]] = {row: [] for row in rows}
    probe_metrics, corpus_trials, validity, active = {}, {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="toy_propel_") as tmp:
        for b in range(settings.bootstraps):
            shared = build_shared(settings, data_dir, bootstrap_seed=b,
                                  active_root=Path(tmp) / f"b{b}" if ACTIVE_ROW in rows else None)
            probe_metrics[b], corpus_trials[b], validity[b] = (shared.probe_metrics, shared.corpus_trials,
                                                                shared.bootstrap_validity)
            if shared.active is not None:
                active[b] = shared.active.info
            for seed in range(settings.seeds):
                for row, value in run_seed(shared, settings, Path(tmp) / f"b{b}", seed, rows).items():
                    per_seed[row].append(value | {"bootstrap": b})
                click.echo(f"bootstrap {b} seed {seed} done at {time.perf_counter() - started:.0f}s: " + ", ".join(
                    f"{r} {per_seed[r][-1]['utility']:.3f}" for r in rows))
    table = aggregate(per_seed)
    meta = {"settings": settings.__dict__, "solver": benchmark_solver().solver_id, "band": BAND.__dict__,
            "bootstrap_validity": validity, "probes": probe_metrics, "corpus_solver_trials": corpus_trials,
            "goals": goals(table), "total_wall_s": time.perf_counter() - started, "commit": COMMIT_AT_START,
            **({"active_corpus": active} if active else {})}
    data = {**meta, "rows": list(rows), "columns": list(COLUMNS), "table": table, "per_seed": per_seed}
    write_result(name, data)
    plot(table, RESULTS / f"{name}.png", BAND)
    write_readme_section(markdown(table, data, name), name)
    return data


@click.command()
@click.option("--quick", is_flag=True, help="tiny settings (a few minutes): checks the pipeline, not the goals")
@click.option("--seeds", type=int, default=None, help="number of seeds (default 3)")
@click.option("--steps", type=int, default=None, help="GRPO steps per RL run")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".propel"), show_default=True)
@click.option("--name", default="toy_propel", show_default=True, help="result file name under benchmarks/results")
@click.option("--rows", default=",".join(ROWS), show_default=True,
              help=f"comma-separated rows to run; also {', '.join(EXTRA_ROWS)}")
@click.option("--bootstraps", type=int, default=None, help="generator bootstraps (seeds 0..N-1; default 1): the "
              "spread across them is reported next to the spread across seeds")
@click.option("--diversity-weight", type=float, default=None, help="rl.diversity_weight of the diversity rows "
              "(default 1.0)")
@click.option("--diversity-measure", type=click.Choice(["self_bleu", "jaccard"]), default=None,
              help="rl.diversity_measure of the diversity rows (default self_bleu; toy_propel.json at de3a244 ran "
              "jaccard)")
@click.option("--active-share", type=click.FloatRange(0, 1, min_open=True), default=None,
              help=f"{ACTIVE_ROW}: its corpus's solver trials as a share of the uniform corpus's (default 0.4)")
def main(quick: bool, seeds: int | None, steps: int | None, data_dir: Path, name: str, rows: str,
         bootstraps: int | None, diversity_weight: float | None, diversity_measure: str | None,
         active_share: float | None) -> None:
    """Run the toy PROPEL benchmark on the daemon's code and write JSON, PNG and the README table."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # every row's store is migrated: say it once
    chosen = tuple(r.strip() for r in rows.split(",") if r.strip())
    unknown = [r for r in chosen if r not in ROWS + EXTRA_ROWS]
    if unknown or not chosen:
        raise click.BadParameter(f"unknown rows {unknown}: choose from {', '.join(ROWS + EXTRA_ROWS)}",
                                 param_hint="--rows")
    settings = Settings.quick() if quick else Settings()
    overrides: dict[str, Any] = {k: v for k, v in (("seeds", seeds), ("steps", steps), ("bootstraps", bootstraps),
                                                   ("diversity_weight", diversity_weight),
                                                   ("diversity_measure", diversity_measure),
                                                   ("active_share", active_share)) if v is not None}
    data = run(replace(settings, **overrides), data_dir, name, chosen)
    click.echo(markdown(data["table"], data, name))


if __name__ == "__main__":
    main()

"""Config → the plain settings objects the rest of the service takes (one translation per concept).

The solver is described once, by :func:`solver_kwargs`: the in-process spot-checker, the Celery
workers and the first probe's offline labelling all build their solver from it, so a field such as
``solver.endpoint`` or ``solver.max_retries`` reaches every one of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from curriculum.common.solver_api import Sampling, SolverBackend
from curriculum.frontier.staleness import StalenessPolicy
from curriculum.probing.first_probe import ActiveSettings
from curriculum.reward.novelty import DiversityTerm
from curriculum.reward.topic_share import TopicShareTerm
from curriculum.solvers import build_solver
from curriculum.store import repo
from curriculum.store.artifacts import ArtifactError, ArtifactStore, open_artifacts
from curriculum.store.db import Store
from daemon.config import ConfigError, PropelConfig
from daemon.loop.driver import DriverSettings
from daemon.loop.frontier import FrontierSettings
from daemon.loop.hacking import SuspectLimits
from daemon.loop.rollback import RollbackRule
from probes.band import Band
from workers.runtime import WorkerSettings


def solver_kwargs(cfg: PropelConfig) -> dict[str, Any]:
    """Keyword arguments of :func:`curriculum.solvers.build_solver` for the configured solver."""
    s = cfg.solver
    kw: dict[str, Any] = {"backend": s.backend, "model": s.model, "base_url": s.base_url, "timeout_s": s.timeout_s,
                          "max_concurrency": s.max_concurrency, "max_retries": s.max_retries,
                          "artificial_latency_s": s.artificial_latency_s, "seed": cfg.seed}
    if s.backend == "openai":
        kw["options"] = {"endpoint": s.endpoint}
    if s.backend == "hf" and s.model and "{version}" in s.model:  # a checkpoint folder per version
        kw["options"] = {"version": s.version, "wait_s": s.timeout_s}
    if s.backend == "synthetic" and s.synthetic_skill_by_version:
        kw["options"] = {"skill_by_version": dict(s.synthetic_skill_by_version)}
    if s.backend == "synthetic" and s.synthetic_skill_file:
        kw["options"] = {**kw.get("options", {}), "skill_file": str(s.synthetic_skill_file)}
    if s.backend == "synthetic-swe":  # reads the verified tasks from the domain's repository cache
        kw["options"] = {"cache_dir": cfg.domain.options.get("cache_dir")}
        if s.synthetic_swe_offset is not None:
            kw["options"]["offset"] = s.synthetic_swe_offset
    if s.backend == "swe-agent":  # episodes on the domain's repositories; sampling settings per model turn
        kw["options"] = {"domain_options": dict(cfg.domain.options), "limits": s.agent.as_options(),
                         "temperature": s.temperature, "max_tokens": s.max_tokens}
    return kw


def check_endpoints(cfg: PropelConfig, generator: bool = True) -> None:
    """Fail at start, in one line, when an agent endpoint (``solver.backend = "swe-agent"``,
    ``[generator.agent]`` unless ``generator`` is False: a worker) does not answer or does not serve its
    model; raises :class:`ConfigError`."""
    from curriculum.domains.swe.agent_backends import check_endpoint

    checks = []
    if cfg.solver.backend == "swe-agent" and cfg.solver.base_url and cfg.solver.model:
        checks.append(("solver.base_url", cfg.solver.base_url, cfg.solver.model))
    agent = cfg.generator.agent
    if generator and agent.enabled and agent.base_url and agent.model:
        checks.append(("generator.agent.base_url", agent.base_url, agent.model))
    problems = [(key, f"{why}: start the server or fix {key} / {key.rsplit('.', 1)[0]}.model")
                for key, url, model in checks if (why := check_endpoint(url, model, timeout_s=10.0)) is not None]
    if problems:
        raise ConfigError("endpoints", problems)


def check_domain(cfg: PropelConfig) -> None:
    """Fail before any model loads when the configured domain cannot produce tasks: its options are
    wrong, or (swe) no repository of its split is fetched and preflighted; raises :class:`ConfigError`."""
    from curriculum.domains.base import get_domain

    try:
        domain = get_domain(cfg.domain.name, **cfg.domain.options)
    except (TypeError, ValueError) as err:
        raise ConfigError("domain", [("domain.options", str(err))]) from None
    usable = getattr(domain, "usable_repos", None)
    if usable is not None and not usable():
        raise ConfigError("domain", [("domain.options", f"no fetched, preflighted SWE repository among "
                                      f"{', '.join(domain.repo_names) or 'none'} (split {domain.split!r}): run "  # type: ignore[attr-defined]
                                      "`propel swe fetch` (docs/SWE.md), or set domain.options.repos")])


def build_configured_solver(cfg: PropelConfig) -> SolverBackend:
    """The configured solver backend (see :func:`solver_kwargs`)."""
    return build_solver(**solver_kwargs(cfg))


def followed_solver_name(cfg: PropelConfig) -> str:
    """The solver name this daemon follows: ``solver.name``, else the configured backend's id (an
    ``hf`` model is named from its path without loading it; the others are cheap to construct)."""
    if cfg.solver.name:
        return cfg.solver.name
    if cfg.solver.backend == "hf" and cfg.solver.model:
        return f"hf:{cfg.solver.model}"  # HFSolver and VersionedHFSolver: "hf:" + the configured model
    return build_configured_solver(cfg).solver_id


def followed_names(cfg: PropelConfig) -> tuple[str, ...]:
    """:func:`followed_solver_name` for the API and ``propel status``: empty (say nothing about
    following) when the configured solver cannot be built here, e.g. its model is not installed."""
    try:
        return (followed_solver_name(cfg),)
    except (ValueError, OSError, ImportError):
        return ()


def sampling(cfg: PropelConfig) -> Sampling:
    """The solver's sampling settings for spot-checks."""
    return Sampling(temperature=cfg.solver.temperature, max_tokens=cfg.solver.max_tokens)


def diversity_term(cfg: PropelConfig) -> DiversityTerm | None:
    """The reward's repetition penalty (``rl.diversity_*``); ``None`` when ``rl.diversity_weight`` is 0 (off)."""
    rl = cfg.rl
    if rl.diversity_weight == 0:
        return None
    return DiversityTerm(cfg.domain.name, rl.diversity_weight, archive_size=rl.diversity_archive_size,
                         topic_quota=rl.diversity_topic_quota, measure=rl.diversity_measure,
                         rollout_window=rl.diversity_rollout_window)


def topic_share_term(cfg: PropelConfig) -> TopicShareTerm | None:
    """The reward's topic-share penalty (``rl.topic_share_*``); ``None`` when ``rl.topic_share_weight`` is 0 (off)."""
    rl = cfg.rl
    if rl.topic_share_weight == 0:
        return None
    return TopicShareTerm(rl.topic_share_weight, target=rl.topic_share_target, window=rl.topic_share_window)


def restored_diversity_term(cfg: PropelConfig, store: Store, run_id: int) -> DiversityTerm | None:
    """:func:`diversity_term` with its archive refilled from the run's most recently emitted tasks (a
    restarted daemon goes on comparing against what it emitted before)."""
    term = diversity_term(cfg)
    if term is not None:
        with store.session() as s:
            term.observe(*repo.recently_emitted(s, run_id, term.archive_size))
    return term


def band(cfg: PropelConfig) -> Band:
    """The utility band of the run (k attempts, in band when lo ≤ solved ≤ hi over enough valid trials)."""
    sc = cfg.spotcheck
    return Band(sc.k, sc.band_lo, sc.band_hi, sc.min_valid_trials)


def settle_band(cfg: PropelConfig) -> Band | None:
    """``spotcheck.sequential``: the band spot-checks stop at once a task's label is settled; else ``None``."""
    return band(cfg) if cfg.spotcheck.sequential else None


def active_settings(cfg: PropelConfig) -> ActiveSettings:
    """``probes.corpus_labelling = "active"``: the first probe's active rounds, ``probes.train_samples`` tasks."""
    p = cfg.probes
    return ActiveSettings(budget=p.train_samples, seed_share=p.active_seed_share, rounds=p.active_rounds,
                          members=p.active_members, arch=p.architecture, seed=cfg.seed,
                          sequential=cfg.spotcheck.sequential)


def active_pool_samples(cfg: PropelConfig) -> int:
    """Base-policy samples drawn for the active-labelling pool (``active_pool_factor × train_samples``)."""
    return int(cfg.probes.active_pool_factor * cfg.probes.train_samples)


def worker_settings(cfg: PropelConfig) -> WorkerSettings:
    """Plain worker settings from the validated config (workers never import the daemon)."""
    if cfg.broker.url is None:
        raise ConfigError("broker", [("broker.url", "not set (or PROPEL_BROKER_URL): workers need a broker; "
                                                    "without one, `propel run` does spot-checks in-process")])
    return WorkerSettings(
        database_url=cfg.database_url, broker_url=cfg.broker.url, run_name=cfg.run_name, domain=cfg.domain.name,
        domain_options=dict(cfg.domain.options), solver=solver_kwargs(cfg),
        sampling={"temperature": cfg.solver.temperature, "max_tokens": cfg.solver.max_tokens},
        visibility_timeout_s=cfg.broker.visibility_timeout_s, task_time_limit_s=cfg.broker.task_time_limit_s,
        artifacts_url=cfg.artifacts_url, artifacts_cache=str(artifact_cache_dir(cfg)),
    )


def artifact_cache_dir(cfg: PropelConfig) -> Path:
    """Where fetched artifacts are materialised on this machine (a cache: safe to delete)."""
    return Path(cfg.data_dir).absolute() / "cache" / "artifacts"


def build_artifacts(cfg: PropelConfig, store: Store) -> ArtifactStore:
    """The configured content-addressed artifact store (``artifacts.url``, default resolved)."""
    try:
        return open_artifacts(cfg.artifacts_url, store, artifact_cache_dir(cfg))
    except ArtifactError as err:
        raise ConfigError("artifacts", [("artifacts.url", str(err))]) from None


#: ``daemon.sample_size_max`` by default: a starving queue gets up to 4 × sample_size per cycle
DEMAND_FACTOR = 4


def driver_settings(cfg: PropelConfig) -> DriverSettings:
    """The driver's settings: budgets, band, thresholds, where workers write probe artifacts."""
    sc = cfg.spotcheck
    return DriverSettings(
        run_name=cfg.run_name, seed=cfg.seed, steps_per_chunk=cfg.rl.steps_per_chunk,
        sample_size=cfg.daemon.sample_size, band=band(cfg),
        sample_size_max=cfg.daemon.sample_size_max or DEMAND_FACTOR * cfg.daemon.sample_size,
        emit_rollouts=cfg.daemon.emit_rollouts, reference_share=cfg.daemon.reference_share,
        budget_per_cycle=sc.budget_per_cycle, budget_per_hour=sc.budget_per_hour, probe_high_share=sc.probe_high_share,
        spot_burst=sc.burst if sc.pace else None,
        frontier_threshold=cfg.probes.frontier_threshold,
        retrain_min_false_positives=cfg.daemon.retrain_min_false_positives,
        min_probability=cfg.emission.min_probability, max_topic_share=cfg.emission.max_topic_share,
        top_share=cfg.emission.top_share,
        high_water_mark=cfg.emission.high_water_mark, emit_lookback_cycles=cfg.daemon.emit_lookback_cycles,
        diversity_sample_size=cfg.alerts.sample_size, reference_model=cfg.reference_model,
        probe_arch=cfg.probes.architecture,
        retrain_timeout_s=float(cfg.broker.task_time_limit_s + cfg.broker.visibility_timeout_s),
        spotcheck_deadline_s=sc.deadline_s, spotcheck_redispatches=sc.redispatches,
        worker_silence_s=cfg.daemon.worker_silence_s, unverified_grace_s=cfg.emission.unverified_grace_s,
        emission_stall_cycles=cfg.emission.stall_cycles, suspect=suspect_limits(cfg),
        rollback=RollbackRule(validity=cfg.health.rollback_validity, cycles=cfg.health.rollback_cycles,
                              healthy_validity=cfg.health.healthy_validity,
                              top_topic_share=cfg.health.rollback_top_topic_share,
                              healthy_top_topic_share=cfg.health.healthy_top_topic_share,
                              novelty=cfg.health.rollback_novelty, healthy_novelty=cfg.health.healthy_novelty),
        escalate_after_cycles=cfg.health.escalate_after_cycles, max_paused_cycles=cfg.health.max_paused_cycles,
        verified_window_cycles=cfg.emission.verified_window_cycles,
        frontier=frontier_settings(cfg), follow=cfg.solver.follow_mode, explore_share=cfg.emission.explore_share,
        replay_max=cfg.emission.replay_max)


def suspect_limits(cfg: PropelConfig) -> SuspectLimits:
    """When the probes are suspect of being reward-hacked (``[health]``)."""
    h = cfg.health
    return SuspectLimits(max_topic_js=h.suspect_topic_js, max_top_topic_share=h.suspect_top_topic_share,
                         max_gap=h.suspect_gap, min_labels=h.suspect_min_labels, hold_cycles=h.suspect_hold_cycles,
                         baseline_cycles=h.suspect_baseline_cycles, response=h.suspect_response,
                         raise_by=h.suspect_raise)


def staleness_policy(cfg: PropelConfig) -> StalenessPolicy:
    """How labels of older solver versions count (``frontier.staleness`` …)."""
    f = cfg.frontier
    return StalenessPolicy(mode=f.staleness, keep_versions=f.keep_versions, half_life_versions=f.half_life_versions,
                           min_weight=f.min_weight)


def frontier_settings(cfg: PropelConfig) -> FrontierSettings:
    """Staleness, drift re-measurement and primary-refresh settings of the driver."""
    f = cfg.frontier
    return FrontierSettings(
        staleness=staleness_policy(cfg), drift_budget_share=f.drift_budget_share, drift_per_stratum=f.drift_per_stratum,
        refresh_drift_threshold=f.refresh_drift_threshold, refresh_every_labels=f.refresh_every_labels,
        refresh_holdout_share=f.refresh_holdout_share, refresh_min_labels=f.refresh_min_labels,
        refresh_every_trainer_labels=f.refresh_every_trainer_labels,
        refresh_trainer_label_window=f.refresh_trainer_label_window, trainer_band_lead=f.trainer_band_lead)


def build_store(cfg: PropelConfig, pool_size: int | None = None) -> Store:
    """The configured store (``store.url``, ``store.pool_size``, ``store.echo``)."""
    return Store(cfg.database_url, pool_size=pool_size or cfg.store.pool_size, echo=cfg.store.echo)

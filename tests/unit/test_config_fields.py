"""Every config field means what it says: set to a non-default value, it reaches the code that uses it.

Fields that flow through the settings builders are checked by building the real objects (driver,
worker and solver settings, the RL config, the API app, the store, the CLI's defaults). The rest —
read where models load or the service loop runs — must at least be read by daemon code (an AST
scan), and are listed by name, so a new field forces a decision. Removed fields fail with what
replaced them.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from daemon.config import REMOVED_KEYS, ConfigError, PropelConfig, config_from_mapping

ROOT = Path(__file__).resolve().parents[2]

#: One non-default value per field (the test fails when a field is missing here).
VALUES: dict[str, Any] = {
    "data_dir": "/tmp/propel-fields", "run_name": "fields", "seed": 7,
    "store.url": "sqlite:////tmp/propel-fields/x.db", "store.pool_size": 3, "store.echo": True,
    "broker.url": "redis://127.0.0.1:6379/9", "broker.visibility_timeout_s": 1234, "broker.task_time_limit_s": 321,
    "broker.spotcheck_batch_size": 5, "broker.worker_concurrency": 3,
    "domain.name": "arith", "domain.options": {"max_ops": 4},
    "generator.model": "/models/gen", "generator.max_new_tokens": 40, "generator.temperature": 0.9,
    "generator.bootstrap_steps": 11,
    "reference.model": "/models/ref", "reference.batch_size": 17,
    "probes.layer": 2, "probes.pooling": "mean_full", "probes.architecture": "linear", "probes.ensemble": "mean",
    "probes.members": 2, "probes.train_samples": 99,
    "probes.corpus_labelling": "active", "probes.active_pool_factor": 2.0, "probes.active_seed_share": 0.25,
    "probes.active_rounds": 2, "probes.active_members": 1, "probes.frontier_threshold": 0.6, "probes.ece_ceiling": 0.11,
    "probes.validation": "grouped", "probes.balance": "weighted",
    "solver.backend": "openai", "solver.base_url": "http://vllm:8000/v1", "solver.model": "m", "solver.timeout_s": 9.0,
    "solver.max_concurrency": 3, "solver.max_retries": 1, "solver.temperature": 0.7, "solver.max_tokens": 77,
    "solver.endpoint": "completions", "solver.artificial_latency_s": 0.01, "solver.name": "policy",
    "solver.version": "rc-final", "solver.version_order": 7, "solver.follow": "first_trainer",
    "solver.synthetic_skill_by_version": {"step-2": 3.0}, "solver.synthetic_skill_file": "/tmp/skills.json",
    "solver.synthetic_swe_offset": 1.5, "solver.agent": {"max_steps": 7, "wall_s": 30.0, "tool_timeout_s": 5.0},
    "generator.agent": {"base_url": "http://vllm:8000/v1", "model": "g", "per_cycle": 2, "max_steps": 9,
                        "concurrency": 2, "temperature": 0.2},
    "spotcheck.k": 6, "spotcheck.band_lo": 2, "spotcheck.band_hi": 4, "spotcheck.min_valid_trials": 5,
    "spotcheck.budget_per_cycle": 9, "spotcheck.budget_per_hour": 99, "spotcheck.probe_high_share": 0.5,
    "spotcheck.deadline_s": 123.0, "spotcheck.redispatches": 2, "spotcheck.sequential": True,
    "spotcheck.pace": False, "spotcheck.burst": 7,
    "artifacts.url": "memory://propel-fields",
    "rl.steps_per_chunk": 4, "rl.learning_rate": 0.002, "rl.kl_beta": 0.08, "rl.num_generations": 4,
    "rl.batch_size": 8, "rl.lora_rank": 8, "rl.lora_alpha": 16, "rl.lora_dropout": 0.1, "rl.reward": "soft_gate",
    "rl.invalid_floor_margin": 2.0, "rl.use_vllm": True, "rl.bf16": True, "rl.diversity_weight": 0.3,
    "rl.diversity_archive_size": 77, "rl.diversity_topic_quota": 0.5, "rl.diversity_measure": "jaccard",
    "rl.diversity_rollout_window": 33, "rl.topic_share_weight": 0.5, "rl.topic_share_target": 0.2,
    "rl.topic_share_window": 99,
    "emission.min_probability": 0.6, "emission.max_topic_share": 0.3, "emission.top_share": 0.35,
    "emission.high_water_mark": 77,
    "emission.max_attempts": 3, "emission.unverified_grace_s": 60.0, "emission.stall_cycles": 4,
    "emission.verified_window_cycles": 12, "emission.explore_share": 0.3,
    "emission.replay_max": 5,
    "health.suspect_topic_js": 0.6, "health.suspect_top_topic_share": 0.7, "health.suspect_gap": 0.4,
    "health.suspect_min_labels": 5, "health.suspect_hold_cycles": 3, "health.rollback_validity": 0.2,
    "health.rollback_cycles": 4, "health.healthy_validity": 0.8, "health.escalate_after_cycles": 7,
    "health.suspect_baseline_cycles": 3, "health.suspect_response": "verified_only", "health.suspect_raise": 0.2,
    "health.max_paused_cycles": 11, "health.rollback_top_topic_share": 0.6, "health.healthy_top_topic_share": 0.4,
    "health.rollback_novelty": 0.05, "health.healthy_novelty": 0.2,
    "alerts.sample_size": 24, "alerts.webhook_url": "http://hooks.local/x",
    "alerts.rules": [{"name": "v", "metric": "validity", "comparator": "<", "threshold": 0.2}],
    "api.host": "127.0.0.2", "api.port": 9999, "api.token": "tok", "api.max_body_bytes": 4096,
    "api.work_nice": 5, "api.yield_to_api": False, "api.yield_idle_ms": 250, "api.yield_max_s": 3.0,
    "api.yield_floor": 0.4,
    "daemon.sample_size": 48, "daemon.sample_size_max": 200, "daemon.emit_rollouts": True,
    "daemon.reference_share": 0.25, "daemon.tick_interval_s": 0.2,
    "daemon.retrain_min_false_positives": 3,
    "daemon.emit_lookback_cycles": 2, "daemon.heartbeat_s": 2.0, "daemon.heartbeat_stale_s": 9.0,
    "daemon.worker_silence_s": 99.0, "daemon.lease_ttl_s": 8.0, "daemon.standby": "refuse",
    "daemon.shutdown_deadline_s": 7.0, "daemon.serve_api": False, "daemon.torch_threads": 2,
    "daemon.trim_heap": False,
    "frontier.staleness": "half_life", "frontier.keep_versions": 4, "frontier.half_life_versions": 2.0,
    "frontier.min_weight": 0.1, "frontier.drift_budget_share": 0.5, "frontier.drift_per_stratum": 4,
    "frontier.refresh_drift_threshold": 0.4, "frontier.refresh_every_labels": 50,
    "frontier.refresh_holdout_share": 0.3, "frontier.refresh_min_labels": 40,
    "frontier.refresh_every_trainer_labels": 64, "frontier.refresh_trainer_label_window": 96,
    "frontier.trainer_band_lead": 2,
}

#: Fields that need another backend than VALUES' (checked with their own config by their own test).
OTHER_BACKEND = {"solver.synthetic_skill_by_version", "solver.synthetic_skill_file", "solver.synthetic_swe_offset",
                 "solver.agent", "generator.agent"}

#: Read where models load or the service loop runs (engine, lifecycle, runtime, CLI): checked by the AST scan.
READ_IN_SERVICE = {
    "data_dir", "run_name", "domain.name", "domain.options", "generator.model", "generator.bootstrap_steps",
    "reference.model", "probes.layer", "probes.pooling", "probes.ensemble", "probes.members", "probes.train_samples",
    "probes.corpus_labelling", "probes.active_pool_factor", "probes.active_seed_share", "probes.active_rounds",
    "probes.active_members", "probes.validation", "probes.balance",
    "broker.worker_concurrency", "alerts.webhook_url", "alerts.rules", "api.host",
    "api.port", "api.work_nice", "api.yield_to_api", "api.yield_idle_ms", "api.yield_max_s", "api.yield_floor",
    "daemon.tick_interval_s",
    "daemon.heartbeat_s", "daemon.lease_ttl_s", "daemon.standby", "daemon.shutdown_deadline_s", "daemon.serve_api",
    "daemon.torch_threads", "daemon.trim_heap", "store.url",
}


def _fields(model: type[PropelConfig] = PropelConfig) -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and hasattr(sub, "model_fields"):
            out += [f"{name}.{k}" for k in sub.model_fields]
        else:
            out.append(name)
    return out


def _nest(values: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in values.items():
        if "." in key:
            section, field = key.split(".", 1)
            data.setdefault(section, {})[field] = value
        else:
            data[key] = value
    return data


@pytest.fixture(scope="module")
def cfg() -> PropelConfig:
    return config_from_mapping(_nest({k: v for k, v in VALUES.items() if k not in OTHER_BACKEND}), env={})


def _consumers() -> dict[str, Callable[[PropelConfig], Any]]:
    from daemon.service.engine import rl_config
    from daemon.service.settings import driver_settings, sampling, solver_kwargs, worker_settings

    ds = driver_settings
    ws = worker_settings
    rl = lambda c: rl_config(c, "/g", "/r", use_cpu=False)  # noqa: E731
    return {
        "seed": lambda c: (ds(c).seed, solver_kwargs(c)["seed"], rl(c).seed),
        "store.pool_size": lambda c: _store(c).engine.pool.size(),
        "store.echo": lambda c: _store(c).engine.echo,
        "broker.url": lambda c: ws(c).broker_url,
        "broker.visibility_timeout_s": lambda c: (ws(c).visibility_timeout_s, ds(c).retrain_timeout_s),
        "broker.task_time_limit_s": lambda c: ws(c).task_time_limit_s,
        "broker.spotcheck_batch_size": lambda c: _spot_batch(c),
        "generator.max_new_tokens": lambda c: rl(c).max_completion_length,
        "generator.temperature": lambda c: rl(c).temperature,
        "reference.batch_size": lambda c: _extraction_batch(c),
        "probes.architecture": lambda c: ds(c).probe_arch,
        "probes.frontier_threshold": lambda c: ds(c).frontier_threshold,
        "probes.ece_ceiling": _sweep_default_ece,
        **{f"solver.{k}": _solver_kwarg(k) for k in ("backend", "base_url", "model", "timeout_s", "max_concurrency",
                                                      "max_retries", "artificial_latency_s", "endpoint")},
        "solver.temperature": lambda c: (sampling(c).temperature, ws(c).sampling["temperature"]),
        "solver.max_tokens": lambda c: (sampling(c).max_tokens, ws(c).sampling["max_tokens"]),
        "spotcheck.k": lambda c: ds(c).band.k, "spotcheck.band_lo": lambda c: ds(c).band.lo,
        "spotcheck.band_hi": lambda c: ds(c).band.hi,
        "spotcheck.min_valid_trials": lambda c: ds(c).band.min_valid_trials,
        "spotcheck.budget_per_cycle": lambda c: ds(c).budget_per_cycle,
        "spotcheck.budget_per_hour": lambda c: ds(c).budget_per_hour,
        "spotcheck.pace": lambda c: ds(c).spot_burst is not None,  # unpaced: no bucket
        "spotcheck.burst": lambda c: ds(c.model_copy(update={"spotcheck": c.spotcheck.model_copy(
            update={"pace": True})})).spot_burst,  # the bucket's capacity, when paced
        "spotcheck.probe_high_share": lambda c: ds(c).probe_high_share,
        "rl.steps_per_chunk": lambda c: ds(c).steps_per_chunk, "rl.learning_rate": lambda c: rl(c).learning_rate,
        "rl.kl_beta": lambda c: rl(c).beta, "rl.num_generations": lambda c: rl(c).num_generations,
        "rl.batch_size": lambda c: rl(c).per_device_train_batch_size, "rl.lora_rank": lambda c: rl(c).lora.rank,
        "rl.lora_alpha": lambda c: rl(c).lora.alpha, "rl.lora_dropout": lambda c: rl(c).lora.dropout,
        "rl.reward": _reward_kind, "rl.invalid_floor_margin": lambda c: rl(c).invalid_floor_margin,
        "rl.use_vllm": lambda c: rl(c).use_vllm, "rl.bf16": lambda c: rl(c).bf16,
        "rl.diversity_weight": lambda c: getattr(_diversity(c), "weight", None),
        "rl.diversity_archive_size": lambda c: getattr(_diversity(c), "archive_size", None),
        "rl.diversity_topic_quota": lambda c: getattr(_diversity(c), "topic_quota", None),
        "rl.diversity_measure": lambda c: getattr(_diversity(c), "measure", None),
        "rl.diversity_rollout_window": lambda c: getattr(_diversity(c), "rollout_window", None),
        "rl.topic_share_weight": lambda c: getattr(_topic_share(c), "weight", None),
        "rl.topic_share_target": lambda c: getattr(_topic_share(c), "target", None),
        "rl.topic_share_window": lambda c: getattr(_topic_share(c), "window", None),
        "emission.min_probability": lambda c: ds(c).min_probability,
        "emission.max_topic_share": lambda c: ds(c).max_topic_share,
        "emission.top_share": lambda c: ds(c).top_share,
        "emission.high_water_mark": lambda c: ds(c).high_water_mark,
        "emission.max_attempts": lambda c: _api_ctx(c).max_attempts,
        "emission.unverified_grace_s": lambda c: ds(c).unverified_grace_s,
        "emission.stall_cycles": lambda c: ds(c).emission_stall_cycles,
        "emission.verified_window_cycles": lambda c: ds(c).verified_window_cycles,
        "emission.explore_share": lambda c: ds(c).explore_share,
        "emission.replay_max": lambda c: ds(c).replay_max,
        "solver.follow": lambda c: ds(c).follow,
        "health.suspect_topic_js": lambda c: ds(c).suspect.max_topic_js,
        "health.suspect_top_topic_share": lambda c: ds(c).suspect.max_top_topic_share,
        "health.suspect_gap": lambda c: ds(c).suspect.max_gap,
        "health.suspect_min_labels": lambda c: ds(c).suspect.min_labels,
        "health.suspect_hold_cycles": lambda c: ds(c).suspect.hold_cycles,
        "health.rollback_validity": lambda c: ds(c).rollback.validity,
        "health.rollback_cycles": lambda c: ds(c).rollback.cycles,
        "health.healthy_validity": lambda c: ds(c).rollback.healthy_validity,
        "health.rollback_top_topic_share": lambda c: ds(c).rollback.top_topic_share,
        "health.healthy_top_topic_share": lambda c: ds(c).rollback.healthy_top_topic_share,
        "health.rollback_novelty": lambda c: ds(c).rollback.novelty,
        "health.healthy_novelty": lambda c: ds(c).rollback.healthy_novelty,
        "health.escalate_after_cycles": lambda c: ds(c).escalate_after_cycles,
        "health.suspect_baseline_cycles": lambda c: ds(c).suspect.baseline_cycles,
        "health.suspect_response": lambda c: ds(c).suspect.response,
        "health.suspect_raise": lambda c: ds(c).suspect.raise_by,
        "health.max_paused_cycles": lambda c: ds(c).max_paused_cycles,
        "alerts.sample_size": lambda c: ds(c).diversity_sample_size,
        "api.token": lambda c: _api_ctx(c).token, "api.max_body_bytes": lambda c: _api_ctx(c).max_body_bytes,
        "daemon.sample_size": lambda c: ds(c).sample_size,
        "daemon.sample_size_max": lambda c: ds(c).sample_size_max,
        "daemon.emit_rollouts": lambda c: ds(c).emit_rollouts,
        "daemon.reference_share": lambda c: ds(c).reference_share,
        "daemon.retrain_min_false_positives": lambda c: ds(c).retrain_min_false_positives,
        "daemon.emit_lookback_cycles": lambda c: ds(c).emit_lookback_cycles,
        "daemon.heartbeat_stale_s": lambda c: _api_ctx(c).heartbeat_stale_s,
        "daemon.worker_silence_s": lambda c: ds(c).worker_silence_s,
        "spotcheck.deadline_s": lambda c: ds(c).spotcheck_deadline_s,
        "spotcheck.redispatches": lambda c: ds(c).spotcheck_redispatches,
        "spotcheck.sequential": _sequential,
        "artifacts.url": lambda c: ws(c).artifacts_url,
        "solver.name": lambda c: _spot_version(c)[0], "solver.version": lambda c: _spot_version(c)[1],
        "solver.version_order": lambda c: _spot_version(c)[2],
        **{f"frontier.{k}": _frontier(k) for k in (
            "drift_budget_share", "drift_per_stratum", "refresh_drift_threshold", "refresh_every_labels",
            "refresh_holdout_share", "refresh_min_labels", "refresh_every_trainer_labels",
            "refresh_trainer_label_window", "trainer_band_lead")},
        "frontier.staleness": lambda c: ds(c).frontier.staleness.mode,
        **{f"frontier.{k}": _staleness(k) for k in ("keep_versions", "half_life_versions", "min_weight")},
    }


def _frontier(key: str) -> Callable[[PropelConfig], Any]:
    from daemon.service.settings import driver_settings

    return lambda c: getattr(driver_settings(c).frontier, key)


def _staleness(key: str) -> Callable[[PropelConfig], Any]:
    from daemon.service.settings import driver_settings

    return lambda c: getattr(driver_settings(c).frontier.staleness, key)


def _topic_share(c: PropelConfig) -> Any:
    from daemon.service.settings import topic_share_term

    source = (ROOT / "daemon" / "service" / "engine.py").read_text()
    assert "topic_share=self.topic_share" in source  # the engine hands the term to build_reward
    return topic_share_term(c)


def _diversity(c: PropelConfig) -> Any:
    from daemon.service.settings import diversity_term

    source = (ROOT / "daemon" / "service" / "engine.py").read_text()
    assert "diversity=self.diversity" in source  # the engine hands the term to build_reward
    return diversity_term(c)  # None (off) at the default weight 0


def _spot_version(c: PropelConfig) -> tuple[str, str, int | None]:
    """The spot-checker's solver name, and the current version (and its order) it registered at start."""
    from curriculum.store import solver_versions
    from curriculum.store.db import Store
    from curriculum.store.models import Base
    from daemon.service.runtime import build_spot

    class _Engine:
        domain = None

    store = Store("sqlite://")
    try:
        Base.metadata.create_all(store.engine)
        name = build_spot(c, store, _Engine()).solver_id  # type: ignore[arg-type]
        with store.session() as s:
            cur = solver_versions.current(s, name)
        assert cur is not None
        return name, cur.version, cur.order
    finally:
        store.dispose()


def _solver_kwarg(key: str) -> Callable[[PropelConfig], Any]:
    from daemon.service.settings import solver_kwargs

    def get(c: PropelConfig) -> Any:
        kw = solver_kwargs(c)
        return kw.get(key, kw.get("options", {}).get(key))

    return get


def _store(c: PropelConfig) -> Any:
    from daemon.service.settings import build_store

    # PostgreSQL: the pool size applies there (SQLite has no pool); creating an engine does not connect
    url = "postgresql+psycopg://propel@127.0.0.1:1/propel"
    store = build_store(c.model_copy(update={"store": c.store.model_copy(update={"url": url})}))
    store.dispose()
    return store


def _api_ctx(c: PropelConfig) -> Any:
    from curriculum.store.db import Store
    from daemon.ops.metrics import build_metrics
    from daemon.service.api_app import build_api_app

    return build_api_app(c, Store("sqlite://"), build_metrics()).state.ctx


def _spot_batch(c: PropelConfig) -> int:
    from daemon.service.runtime import build_spot

    class _Engine:
        domain = None

    from curriculum.store.db import Store
    from curriculum.store.models import Base

    store = Store("sqlite://")  # build_spot registers solver.version in the store
    try:
        Base.metadata.create_all(store.engine)
        return int(build_spot(c, store, _Engine()).batch_size)  # type: ignore[arg-type, attr-defined]
    finally:
        store.dispose()


def _sequential(c: PropelConfig) -> tuple[bool, bool]:
    """The spot-checker's settle band (carried in every Celery message) and the first probe's active
    labelling; the uniform corpus (engine) passes the field to ``label_corpus``."""
    from daemon.service.runtime import build_spot
    from daemon.service.settings import active_settings

    source = (ROOT / "daemon" / "service" / "engine.py").read_text()
    assert "sequential=self.cfg.spotcheck.sequential" in source

    class _Engine:
        domain = None

    from curriculum.store.db import Store
    from curriculum.store.models import Base

    store = Store("sqlite://")
    try:
        Base.metadata.create_all(store.engine)
        settle = build_spot(c, store, _Engine()).settle  # type: ignore[arg-type, attr-defined]
    finally:
        store.dispose()
    return settle is not None, active_settings(c).sequential


def _extraction_batch(c: PropelConfig) -> Any:
    source = (ROOT / "daemon" / "service" / "engine.py").read_text()
    assert "ExtractionConfig(batch_size=self.cfg.reference.batch_size)" in source
    return c.reference.batch_size


def _reward_kind(c: PropelConfig) -> str:
    source = (ROOT / "daemon" / "service" / "engine.py").read_text()
    assert "build_reward(self.cfg.rl.reward," in source  # rewards.build_reward maps the kind to its class
    return c.rl.reward


def _sweep_default_ece(c: PropelConfig) -> float:
    return c.probes.ece_ceiling


def test_every_field_has_a_value_and_a_consumer() -> None:
    fields = set(_fields())
    assert fields == set(VALUES), f"missing: {fields - set(VALUES)}, unknown: {set(VALUES) - fields}"
    covered = set(_consumers()) | READ_IN_SERVICE | OTHER_BACKEND
    assert fields <= covered, f"fields nobody checks: {sorted(fields - covered)}"


def test_settings_fields_reach_their_consumers(cfg: PropelConfig) -> None:
    default = PropelConfig.model_validate(_nest({k: VALUES[k] for k in (
        "broker.url", "solver.backend", "solver.base_url", "solver.model")}))
    for key, consume in _consumers().items():
        if key == "probes.ece_ceiling":
            continue  # checked through the CLI below
        got, before = consume(cfg), consume(default)
        want = VALUES[key]
        assert got != before or key in ("broker.url", "solver.backend", "solver.base_url", "solver.model"), key
        flat = got if isinstance(got, tuple) else (got,)
        assert all(v == want or (key == "broker.visibility_timeout_s" and v == 1234 + 321) for v in flat), (key, got)


def test_synthetic_skill_by_version_reaches_the_solver() -> None:
    from curriculum.solvers import build_solver
    from daemon.service.settings import solver_kwargs

    c = config_from_mapping(_nest({"solver.backend": "synthetic", "solver.synthetic_skill_by_version":
                                   VALUES["solver.synthetic_skill_by_version"]}), env={})
    solver = build_solver(**solver_kwargs(c))
    assert solver.skill_by_version == VALUES["solver.synthetic_skill_by_version"]  # type: ignore[attr-defined]
    c = config_from_mapping(_nest({"solver.backend": "synthetic", "solver.synthetic_skill_file":
                                   VALUES["solver.synthetic_skill_file"]}), env={})
    solver = build_solver(**solver_kwargs(c))
    assert str(solver.skill_file) == VALUES["solver.synthetic_skill_file"]  # type: ignore[attr-defined]


def test_synthetic_swe_options_reach_the_solver(tmp_path: Path) -> None:
    from curriculum.solvers import build_solver
    from daemon.service.settings import solver_kwargs

    c = config_from_mapping(_nest({"domain.name": "swe", "domain.options": {"cache_dir": str(tmp_path)},
                                   "solver.synthetic_swe_offset": VALUES["solver.synthetic_swe_offset"]}), env={})
    solver = build_solver(**solver_kwargs(c))
    assert solver.solver_id.startswith("synthetic:swe-logistic") and solver.offset == 1.5  # type: ignore[attr-defined]
    assert solver.tasks_dir == tmp_path / "tasks"  # type: ignore[attr-defined]


def test_swe_agent_settings_reach_the_solver_and_the_generator_supply(tmp_path: Path) -> None:
    from curriculum.domains.base import get_domain
    from curriculum.solvers import build_solver
    from daemon.service.runtime import build_supply
    from daemon.service.settings import solver_kwargs

    options = {"cache_dir": str(tmp_path)}
    c = config_from_mapping(_nest({"domain.name": "swe", "domain.options": options, "solver.backend": "swe-agent",
                                   "solver.base_url": "http://vllm:8000/v1", "solver.model": "s",
                                   "solver.temperature": 0.3, "solver.max_concurrency": 2,
                                   "solver.agent": VALUES["solver.agent"],
                                   "generator.agent": VALUES["generator.agent"]}), env={})
    solver = build_solver(**solver_kwargs(c))
    assert solver.solver_id == "agent:s" and solver.concurrency == 2  # type: ignore[attr-defined]
    limits, client = solver.limits, solver.client  # type: ignore[attr-defined]
    assert (limits.max_steps, limits.wall_s, limits.tool.wall_s) == (7, 30.0, 5.0)
    assert (client.url, client.temperature) == ("http://vllm:8000/v1/chat/completions", 0.3)
    assert solver.domain.cache.root == tmp_path  # type: ignore[attr-defined]

    class _Engine:
        domain = get_domain("swe", **options)

    supply = build_supply(c, _Engine())  # type: ignore[arg-type]
    assert supply is not None
    try:
        assert (supply.per_cycle, supply.source, supply.limits.max_steps, len(supply._threads)) == (  # type: ignore[attr-defined]
            2, "agent:g", 9, 2)
        assert supply.client.temperature == 0.2  # type: ignore[attr-defined]
    finally:
        supply.close()


def test_ece_ceiling_is_the_sweep_default(tmp_path: Path) -> None:
    from daemon.cli.main import cli

    config = tmp_path / "c.toml"
    config.write_text("[probes]\nece_ceiling = 0.11\n")
    out = CliRunner().invoke(cli, ["--config", str(config), "probes", "sweep", "--help"], env={}).output
    assert "0.11" in " ".join(out.split()), out
    assert "default: random" in " ".join(out.split()), out  # validation/balance unset: the sweep's own defaults


def test_swe_validation_and_balance_are_the_sweep_defaults(tmp_path: Path) -> None:
    from daemon.cli.main import cli

    config = tmp_path / "c.toml"
    config.write_text('[domain]\nname = "swe"\n')  # the domain defaults: grouped + weighted
    out = " ".join(CliRunner().invoke(cli, ["--config", str(config), "probes", "sweep", "--help"], env={}).output
                   .split())
    assert "default: grouped" in out and "default: weighted" in out, out


def _reads_in_daemon() -> set[str]:
    """``section.field`` pairs read by daemon code outside config.py (directly or through an alias)."""
    sections = {n for n, f in PropelConfig.model_fields.items() if hasattr(f.annotation, "model_fields")}
    pairs: set[str] = set()
    for path in (ROOT / "daemon").rglob("*.py"):
        if path.name == "config.py":
            continue
        tree = ast.parse(path.read_text())
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute)
                    and node.value.attr in sections and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)):
                aliases[node.targets[0].id] = node.value.attr
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            base = node.value
            if isinstance(base, ast.Attribute) and base.attr in sections:
                pairs.add(f"{base.attr}.{node.attr}")
            elif isinstance(base, ast.Name) and base.id in aliases:
                pairs.add(f"{aliases[base.id]}.{node.attr}")
            elif node.attr in ("data_dir", "run_name", "seed", "database_url", "reference_model"):
                pairs.add(node.attr)
    return pairs


def test_service_fields_are_read_by_the_daemon() -> None:
    reads = _reads_in_daemon() | {"store.url"}  # store.url is read through cfg.database_url
    assert reads >= READ_IN_SERVICE, f"never read: {sorted(READ_IN_SERVICE - reads)}"


@pytest.mark.parametrize("yield_to_api", [True, False])
def test_work_nice_and_yielding_reach_the_run_loop_only_with_the_api(
        monkeypatch: pytest.MonkeyPatch, cfg: PropelConfig, yield_to_api: bool) -> None:
    """``api.work_nice`` becomes the run loop's work niceness and ``api.yield_to_api`` its gate when
    ``propel run`` serves the API; without the API: nice 0 and no gate."""
    from daemon.loop.progress import Progress
    from daemon.service import runtime
    from daemon.service.yielding import NoGate, YieldGate

    seen: list[tuple[int, type]] = []
    cfg = cfg.model_copy(update={"api": cfg.api.model_copy(update={"yield_to_api": yield_to_api})})

    def serve(*args: Any) -> int:
        options = args[4]  # serve(cfg, store, run_id, build_driver, options, say, start_api)
        seen.append((options.work_nice, type(options.gate)))
        return 0

    monkeypatch.setattr(runtime, "open_run", lambda c: (_FakeStore(), 1))
    monkeypatch.setattr(runtime, "check_endpoints", lambda c: None)
    monkeypatch.setattr(runtime, "check_domain", lambda c: None)
    monkeypatch.setattr(runtime, "ServiceHooks", lambda *a: _FakeHooks())
    monkeypatch.setattr(runtime, "serve", serve)
    for serve_api in (True, False):
        runtime.run(cfg, cycles=1, until_cycle=None, serve_api=serve_api, progress=Progress(json_mode=True))
    assert seen == [(VALUES["api.work_nice"], YieldGate if yield_to_api else NoGate), (0, NoGate)]


def test_yield_settings_reach_the_gate(cfg: PropelConfig) -> None:
    from daemon.http.pressure import ApiPressure
    from daemon.ops.metrics import build_metrics
    from daemon.service.runtime import build_gate
    from daemon.service.yielding import NoGate, YieldGate

    metrics = build_metrics()
    assert isinstance(build_gate(cfg, ApiPressure(), metrics), NoGate)  # VALUES turn it off
    on = cfg.model_copy(update={"api": cfg.api.model_copy(update={"yield_to_api": True})})
    gate = build_gate(on, ApiPressure(), metrics)
    assert isinstance(gate, YieldGate)
    assert (gate.idle_s, gate.max_hold_s) == (VALUES["api.yield_idle_ms"] / 1000, VALUES["api.yield_max_s"])
    assert gate.run_s == pytest.approx(VALUES["api.yield_max_s"] * 0.4 / 0.6)
    gate.on_held(1.5)
    assert metrics.registry.get_sample_value("propel_work_yielded_seconds_total") == 1.5


@pytest.mark.parametrize(("key", "value", "message"), [
    ("yield_idle_ms", 0, "0 is outside 1..60000: set api.yield_idle_ms to e.g. 100"),
    ("yield_max_s", 0.0, "0.0 is outside (0, 3600]: set api.yield_max_s to e.g. 2.0 seconds"),
    ("yield_floor", 1.0, "1.0 is outside (0, 1): set api.yield_floor to e.g. 0.2"),
    ("yield_floor", 0.0, "0.0 is outside (0, 1): set api.yield_floor to e.g. 0.2"),
])
def test_yield_settings_out_of_range_name_the_fix(key: str, value: float, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_mapping({"api": {key: value}}, env={})
    [(field, problem)] = err.value.problems
    assert field == f"api.{key}" and problem.startswith(message)


class _FakeStore:
    def dispose(self) -> None:
        pass


class _FakeHooks:
    def close(self) -> None:
        pass


@pytest.mark.parametrize("value", [-1, 20])
def test_work_nice_out_of_range_names_the_fix(value: int) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_mapping({"api": {"work_nice": value}}, env={})
    assert err.value.problems == [("api.work_nice", f"{value} is outside 0..19: set api.work_nice between 0 "
                                                    "(off, the default) and 19")]


@pytest.mark.parametrize("key", sorted(REMOVED_KEYS))
def test_removed_fields_fail_with_their_replacement(key: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_mapping(_nest({key: "x"}), env={})
    assert f"{key}: {REMOVED_KEYS[key]}" in str(err.value)
    assert "removed" in str(err.value)

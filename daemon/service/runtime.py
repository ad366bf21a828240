"""Wiring for ``propel run``: config → store, engine, spot-checker, alerts, API → the service loop."""

from __future__ import annotations

from collections.abc import Callable
from threading import Event
from typing import TYPE_CHECKING, Any

from curriculum.store.db import Store
from daemon.config import ConfigError, PropelConfig, mask_url
from daemon.http.pressure import ApiPressure
from daemon.loop import escalation, health
from daemon.loop.driver import Driver, DriverHooks
from daemon.loop.ports import Engine, Retrainer, SpotChecker
from daemon.loop.progress import Progress
from daemon.loop.state import DriverState
from daemon.loop.supply import TaskSupply
from daemon.ops.alerts.manager import AlertManager
from daemon.ops.alerts.rules import MitigationKind
from daemon.ops.alerts.sinks import build_sinks
from daemon.ops.metrics import PropelMetrics, build_metrics, export_degraded
from daemon.service.heap import HeapKeeper, trim_free_heap
from daemon.service.lifecycle import RunOptions, open_run, serve
from daemon.service.settings import (
    build_configured_solver,
    check_domain,
    check_endpoints,
    driver_settings,
    sampling,
    settle_band,
    worker_settings,
)
from daemon.service.yielding import NoGate, WorkGate, YieldGate, gate_models

if TYPE_CHECKING:
    from daemon.service.engine import PropelEngine


def build_spot(cfg: PropelConfig, store: Store, engine: Engine) -> SpotChecker:
    """In-process spot-checks without a broker; Celery with one."""
    from daemon.service.spot import CelerySpotChecker, InProcessSpotChecker

    solver = build_configured_solver(cfg)
    name = cfg.solver.name or solver.solver_id
    register_configured_version(cfg, store, name)
    if cfg.broker.embedded:
        return InProcessSpotChecker(store, engine.domain, solver, sampling(cfg), solver_name=name,
                                    settle=settle_band(cfg))
    from workers import runtime
    from workers.app import configure_app

    settings = worker_settings(cfg)
    runtime.configure(settings)
    configure_app(settings)
    return CelerySpotChecker(name, cfg.run_name, cfg.broker.spotcheck_batch_size, settle=settle_band(cfg))


def register_configured_version(cfg: PropelConfig, store: Store, name: str) -> None:
    """Register ``solver.version`` (what the endpoint serves at start). A version announced since
    stays current when it is newer: a restart with an older config does not move spot-checks back."""
    from curriculum.store import solver_versions

    with store.session() as s:
        try:
            solver_versions.register(s, name, cfg.solver.version, cfg.solver.version_order, source="config")
        except solver_versions.VersionError as err:
            raise ConfigError("solver", [("solver.version", str(err))]) from None


def build_retrainer(cfg: PropelConfig, store: Store, engine: PropelEngine) -> Retrainer:
    """In-process on the leader's reference without a broker; the run's ``retrain`` queue with one."""
    from daemon.service.retrainer import CeleryRetrainer, InProcessRetrainer

    if cfg.broker.embedded:
        return InProcessRetrainer(store, engine.domain, engine.scorer.extractor, engine.artifacts)
    return CeleryRetrainer(cfg.run_name)  # build_spot configured the Celery app


def assemble_driver(cfg: PropelConfig, store: Store, run_id: int, engine: PropelEngine, hooks: DriverHooks,
                    should_stop: Callable[[], bool], metrics: PropelMetrics) -> Driver:
    """The run's driver around ``engine``: the configured spot-checker and retrainer, its settings."""
    spot = build_spot(cfg, store, engine)
    retrainer = build_retrainer(cfg, store, engine)
    return Driver(store, run_id, engine, spot, retrainer, driver_settings(cfg), hooks=hooks,
                  should_stop=should_stop, metrics=metrics, supply=build_supply(cfg, engine))


def build_supply(cfg: PropelConfig, engine: Engine) -> TaskSupply | None:
    """The agent generator (``[generator.agent]`` with ``per_cycle`` > 0) over the engine's SWE domain."""
    agent = cfg.generator.agent
    if not agent.enabled or agent.base_url is None or agent.model is None:
        return None
    from curriculum.domains.swe.agent import ChatClient
    from curriculum.domains.swe.agent_backends import AgentBugSupply, agent_limits
    from curriculum.domains.swe.domain import SweDomain

    if not isinstance(engine.domain, SweDomain):
        raise ConfigError("generator", [("generator.agent", "needs domain.name = 'swe'")])
    client = ChatClient(agent.base_url, agent.model, timeout_s=agent.timeout_s, temperature=agent.temperature,
                        max_tokens=agent.max_tokens)
    limits = agent_limits(max_steps=agent.max_steps, wall_s=agent.wall_s, repeat_limit=agent.repeat_limit,
                          tool_output_chars=agent.tool_output_chars, tool_timeout_s=agent.tool_timeout_s)
    return AgentBugSupply(engine.domain, client, agent.per_cycle, limits, concurrency=agent.concurrency)


def run(cfg: PropelConfig, *, cycles: int | None, until_cycle: int | None, serve_api: bool,
        progress: Progress, on_driver: Callable[[Driver, Event], None] | None = None) -> int:
    """``propel run``. ``on_driver`` (the long-run benchmark's observer) is called with the built driver and
    the stop event before the first phase."""
    from daemon.service.engine import build_engine

    check_endpoints(cfg)
    check_domain(cfg)
    store, run_id = open_run(cfg)
    metrics = build_metrics()
    export_degraded(metrics, [], health.REASONS)
    hooks = ServiceHooks(cfg, store, run_id, metrics, progress)
    progress.say(f"propel · run [bold]{cfg.run_name}[/bold] · store {mask_url(cfg.database_url)} · "
                 f"domain {cfg.domain.name} · solver {cfg.solver.backend}"
                 + (" [yellow](synthetic benchmark solver)[/yellow]" if cfg.solver.backend.startswith("synthetic")
                    else ""))

    pressure = ApiPressure()
    gate = build_gate(cfg, pressure, metrics) if serve_api else NoGate()
    heap = HeapKeeper("propel run", trim=trim_free_heap if cfg.daemon.trim_heap else None)

    def build_driver(stop: Event) -> Driver:
        engine = build_engine(cfg, store, run_id, say=progress.say)
        gate_models(gate, engine.trainer.model, engine.reference.model)
        driver = assemble_driver(cfg, store, run_id, engine, hooks, stop.is_set, metrics)
        if on_driver is not None:
            on_driver(driver, stop)
        heap.freeze()  # the API starts after this; the models are start-up objects too
        return driver

    start_api: Callable[[], Callable[[], None]] | None = None
    if serve_api:
        def start_api() -> Callable[[], None]:
            from daemon.http.server import start_api_thread
            from daemon.service.api_app import build_api_app

            stop = start_api_thread(cfg, build_api_app(cfg, store, metrics, pressure=pressure))
            progress.say(f"API on http://{cfg.api.host}:{cfg.api.port}  (docs: /docs, dashboard: /dashboard)")
            return stop

    options = RunOptions(cycles=cycles, until_cycle=until_cycle, on_report=progress,
                         work_nice=cfg.api.work_nice if serve_api else 0, gate=gate, after_phase=heap.after_phase)
    try:
        return serve(cfg, store, run_id, build_driver, options, progress.say, start_api)
    finally:
        hooks.close()
        store.dispose()


def build_gate(cfg: PropelConfig, pressure: ApiPressure, metrics: PropelMetrics) -> WorkGate:
    """``api.yield_to_api``: the gate the training work calls at its checkpoints (a no-op when off)."""
    api = cfg.api
    if not api.yield_to_api:
        return NoGate()
    return YieldGate(pressure, api.yield_idle_ms / 1000, api.yield_max_s, api.yield_floor,
                     on_held=metrics.work_yielded.inc)


class ServiceHooks(DriverHooks):
    """Alert rules with their mitigations (applied to the typed driver state)."""

    def __init__(self, cfg: PropelConfig, store: Store, run_id: int, metrics: PropelMetrics,
                 progress: Progress) -> None:
        self.progress, self.metrics = progress, metrics
        self.alerts_mgr = AlertManager(store, run_id, cfg.run_name, cfg.alerts.rules,
                                       build_sinks(metrics, cfg.alerts.webhook_url))

    def alerts(self, cycle: int, values: dict[str, float], dominant_topic: str | None, state: DriverState) -> None:
        res = self.alerts_mgr.on_cycle(cycle, values, dominant_topic=dominant_topic,
                                       details=health.alert_details(state.degraded))
        paused = set(state.paused_topics)
        # fires and resolves are printed once, by the alert manager's LogSink (with value and mitigation)
        for event in res.resolved:
            paused -= set(state.paused_by.pop(event.rule, []))
        # a resolved alert (or a rule removed from the config) ends its escalation: a pause it set is lifted
        kept = escalation.drop_resolved(state.mitigations, [e.rule for e in res.resolved])
        state.mitigations = escalation.record(kept, res.fired)  # measured, escalated by the driver
        for m in res.mitigations:
            if m.kind == MitigationKind.RAISE_KL:
                state.kl_factor = float(m.factor or 2.0)
            elif m.kind == MitigationKind.RETRAIN_AUX_TOPIC:
                state.force_retrain = True
            elif m.kind == MitigationKind.PAUSE_TOPIC and m.topic:
                paused.add(m.topic)
                state.paused_by.setdefault(m.rule, []).append(m.topic)
        state.paused_topics = sorted(paused)

    def degraded(self, state: dict[str, dict[str, Any]]) -> None:
        export_degraded(self.metrics, state, health.REASONS)

    def close(self) -> None:
        self.alerts_mgr.close()

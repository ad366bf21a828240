"""Wiring for ``propel run``: config → store, engine, spot-checker, alerts, API → the service loop."""

from __future__ import annotations

from collections.abc import Callable
from threading import Event
from typing import TYPE_CHECKING, Any

from curriculum.store import repo
from curriculum.store.db import Store
from daemon.config import PropelConfig, mask_url
from daemon.loop.driver import Driver, DriverHooks
from daemon.loop.ports import Engine, Retrainer, SpotChecker
from daemon.loop.progress import Progress
from daemon.ops.alerts.manager import AlertManager
from daemon.ops.alerts.rules import MitigationKind
from daemon.ops.alerts.sinks import build_sinks
from daemon.ops.metrics import PropelMetrics, build_metrics, export_cycle, export_queue_depths
from daemon.service.lifecycle import RunOptions, open_run, serve
from daemon.service.settings import build_configured_solver, driver_settings, sampling, worker_settings

if TYPE_CHECKING:
    from daemon.service.engine import PropelEngine


def build_spot(cfg: PropelConfig, store: Store, engine: Engine) -> SpotChecker:
    """In-process spot-checks without a broker; Celery with one."""
    from daemon.service.spot import CelerySpotChecker, InProcessSpotChecker

    if cfg.broker.embedded:
        return InProcessSpotChecker(store, engine.domain, build_configured_solver(cfg), sampling(cfg))
    from workers import runtime
    from workers.app import configure_app

    settings = worker_settings(cfg)
    runtime.configure(settings)
    configure_app(settings)
    solver_id = build_configured_solver(cfg).solver_id
    return CelerySpotChecker(solver_id, cfg.run_name, cfg.broker.spotcheck_batch_size)


def build_retrainer(cfg: PropelConfig, store: Store, engine: PropelEngine) -> Retrainer:
    """In-process on the leader's reference without a broker; the run's ``retrain`` queue with one."""
    from daemon.service.retrainer import CeleryRetrainer, InProcessRetrainer

    if cfg.broker.embedded:
        return InProcessRetrainer(store, engine.domain, engine.scorer.extractor)
    return CeleryRetrainer(cfg.run_name)  # build_spot configured the Celery app


def run(cfg: PropelConfig, *, cycles: int | None, until_cycle: int | None, serve_api: bool,
        progress: Progress) -> int:
    from daemon.service.engine import build_engine

    store, run_id = open_run(cfg)
    metrics = build_metrics()
    hooks = ServiceHooks(cfg, store, run_id, metrics, progress)
    progress.say(f"propel · run [bold]{cfg.run_name}[/bold] · store {mask_url(cfg.database_url)} · "
                 f"domain {cfg.domain.name} · solver {cfg.solver.backend}"
                 + (" [yellow](synthetic benchmark solver)[/yellow]" if cfg.solver.backend == "synthetic" else ""))

    def build_driver(stop: Event) -> Driver:
        engine = build_engine(cfg, store, run_id, say=progress.say)
        spot = build_spot(cfg, store, engine)
        retrainer = build_retrainer(cfg, store, engine)
        return Driver(store, run_id, engine, spot, retrainer, driver_settings(cfg), hooks=hooks,
                      should_stop=stop.is_set)

    start_api: Callable[[], Callable[[], None]] | None = None
    if serve_api:
        def start_api() -> Callable[[], None]:
            from daemon.http.api import ApiContext, create_app
            from daemon.http.server import start_api_thread

            sc = cfg.spotcheck
            ctx = ApiContext(store=store, run_name=cfg.run_name, token=cfg.api.token, registry=metrics.registry,
                             max_attempts=cfg.emission.max_attempts, band=(sc.band_lo, sc.band_hi), k=sc.k,
                             heartbeat_stale_s=cfg.daemon.heartbeat_stale_s, max_body_bytes=cfg.api.max_body_bytes)
            app = create_app(ctx)
            app.state.alert_rules = cfg.alerts.rules
            stop = start_api_thread(cfg, app)
            progress.say(f"API on http://{cfg.api.host}:{cfg.api.port}  (docs: /docs, dashboard: /dashboard)")
            return stop

    options = RunOptions(cycles=cycles, until_cycle=until_cycle, on_report=progress)
    try:
        return serve(cfg, store, run_id, build_driver, options, progress.say, start_api)
    finally:
        hooks.close()
        store.dispose()


class ServiceHooks(DriverHooks):
    """Prometheus export of every recorded metric; alert rules with their mitigations."""

    def __init__(self, cfg: PropelConfig, store: Store, run_id: int, metrics: PropelMetrics,
                 progress: Progress) -> None:
        self.metrics, self.progress, self.store, self.run_id = metrics, progress, store, run_id
        self.alerts_mgr = AlertManager(store, run_id, cfg.run_name, cfg.alerts.rules,
                                       build_sinks(metrics, cfg.alerts.webhook_url))

    def export(self, cycle: int, values: dict[str, float]) -> None:
        export_cycle(self.metrics, values, cycle=cycle)
        with self.store.session() as s:
            export_queue_depths(self.metrics, repo.queue_depths(s, self.run_id))

    def alerts(self, cycle: int, values: dict[str, float], dominant_topic: str | None,
               counters: dict[str, Any]) -> None:
        res = self.alerts_mgr.on_cycle(cycle, values, dominant_topic=dominant_topic)
        paused = set(counters.get("paused_topics", []))
        for event in res.fired:
            self.progress.say(f"[red]alert[/red] {event.rule} fired at cycle {cycle} (value {event.value:.3g})")
        for event in res.resolved:
            self.progress.say(f"[green]resolved[/green] {event.rule} at cycle {cycle}")
            paused -= set(counters.get("paused_by", {}).pop(event.rule, []))
        for m in res.mitigations:
            self.progress.say(f"mitigation {m.kind.value} (rule {m.rule}, topic {m.topic})")
            if m.kind == MitigationKind.RAISE_KL:
                counters["kl_factor"] = float(m.factor or 2.0)
            elif m.kind == MitigationKind.RETRAIN_AUX_TOPIC:
                counters["force_retrain"] = True
            elif m.kind == MitigationKind.PAUSE_TOPIC and m.topic:
                paused.add(m.topic)
                counters.setdefault("paused_by", {}).setdefault(m.rule, []).append(m.topic)
        counters["paused_topics"] = sorted(paused)

    def close(self) -> None:
        self.alerts_mgr.close()

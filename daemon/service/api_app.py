"""The API app of a config, built one way for ``propel run`` (in-process) and ``propel serve``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from curriculum.store.db import Store
from daemon.config import PropelConfig
from daemon.http.api import ApiContext, create_app
from daemon.http.pressure import ApiPressure
from daemon.ops.metrics import PropelMetrics
from daemon.service.settings import followed_names


def build_api_app(cfg: PropelConfig, store: Store, metrics: PropelMetrics,
                  refresh_metrics: Callable[[], None] | None = None, pressure: ApiPressure | None = None) -> Any:
    """The FastAPI app serving the run's queue, status, health, ``/metrics`` (from ``metrics``) and dashboard;
    ``pressure``: marked by every queue request (the training of ``propel run`` yields to it)."""
    sc = cfg.spotcheck
    ctx = ApiContext(store=store, run_name=cfg.run_name, token=cfg.api.token, registry=metrics.registry,
                     max_attempts=cfg.emission.max_attempts, band=(sc.band_lo, sc.band_hi), k=sc.k,
                     min_valid_trials=sc.min_valid_trials, heartbeat_stale_s=cfg.daemon.heartbeat_stale_s,
                     max_body_bytes=cfg.api.max_body_bytes,
                     refresh_metrics=refresh_metrics, pressure=pressure, followed=followed_names(cfg),
                     follow_mode=cfg.solver.follow_mode)
    app = create_app(ctx)
    app.state.alert_rules = cfg.alerts.rules
    app.state.budget_per_hour = sc.budget_per_hour
    return app


def api_url(cfg: PropelConfig) -> str:
    """Where a local client reaches the configured API (a wildcard bind address means this host)."""
    host = "127.0.0.1" if cfg.api.host in ("0.0.0.0", "::", "") else cfg.api.host
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{cfg.api.port}"

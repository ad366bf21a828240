"""Prometheus metrics of the daemon, on a private :class:`CollectorRegistry` (never the global one).

Names are namespaced ``propel_`` and carry base units (``_seconds``, ``_total``, ``_ratio`` for
0–1 values). The daemon writes one row per metric and cycle to the ``metrics`` table under the
*metric-table names* of :data:`METRIC_TABLE_NAMES`; :func:`export_cycle` maps those names onto the
Prometheus series:

=======================  ===============================================  ==========================
metric-table name        Prometheus series                                kind
=======================  ===============================================  ==========================
``self_bleu3``           ``propel_self_bleu3_ratio``                      gauge
``distinct3``            ``propel_distinct3_ratio``                       gauge
``top_topic_share``      ``propel_top_topic_share_ratio``                 gauge
``validity``             ``propel_validity_ratio``                        gauge
``reward_mean``          ``propel_reward_mean``                           gauge
``reward_var``           ``propel_reward_variance`` (RVP)                 gauge
``probe_precision``      ``propel_probe_precision_ratio``                 gauge
``false_positive_rate``  ``propel_false_positive_ratio``                  gauge
``spotcheck_utility``    ``propel_spotcheck_utility_ratio``               gauge
``queue_ready``          ``propel_queue_depth{state="ready"}``            gauge
``solver_budget_used``   ``propel_solver_budget_used_ratio``              gauge
``retrain_pending``      ``propel_retrain_pending`` (1 while a job runs)  gauge
``emitted``              ``propel_tasks_emitted_total``                   counter (+= value)
``solver_trials``        ``propel_solver_trials_total``                   counter (+= value)
``retrained``            ``propel_aux_retrains_total``                    counter (+= value)
=======================  ===============================================  ==========================

Plus ``propel_cycle`` (last exported cycle), ``propel_cycles_total``, ``propel_alerts_fired_total
{rule,severity}``, ``propel_alert_active{rule,severity}`` (1 while open), ``propel_degraded{reason}``
(1 while degraded for that reason, see :mod:`daemon.loop.health`) and the histogram
``propel_phase_duration_seconds{phase}``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

QUEUE_STATES = ("ready", "leased", "acked", "dead")

GAUGES: dict[str, tuple[str, str]] = {
    "self_bleu3": ("propel_self_bleu3_ratio", "Self-BLEU-3 of a fixed-size sample of this cycle's tasks"),
    "distinct3": ("propel_distinct3_ratio", "Distinct-3 (unique/total 3-grams) of the fixed-size sample"),
    "top_topic_share": ("propel_top_topic_share_ratio", "Share of the most common topic among valid tasks"),
    "validity": ("propel_validity_ratio", "Share of sampled generator outputs that are valid tasks"),
    "reward_mean": ("propel_reward_mean", "Mean probe reward of the last RL chunk"),
    "reward_var": ("propel_reward_variance", "Reward variance on current-policy samples (RVP)"),
    "probe_precision": ("propel_probe_precision_ratio", "Spot-checked probe-high tasks that were in band"),
    "false_positive_rate": ("propel_false_positive_ratio", "Spot-checked probe-high tasks outside the band"),
    "spotcheck_utility": ("propel_spotcheck_utility_ratio", "Spot-checked tasks (all) that were in band"),
    "solver_budget_used": ("propel_solver_budget_used_ratio", "Spot-check solver budget used this hour"),
    "retrain_pending": ("propel_retrain_pending", "1 while an aux-probe retrain job has no outcome yet"),
}
COUNTERS: dict[str, tuple[str, str]] = {
    "emitted": ("propel_tasks_emitted", "Tasks emitted to the downstream queue"),
    "solver_trials": ("propel_solver_trials", "Solver attempts made by spot-checks"),
    "retrained": ("propel_aux_retrains", "Aux probes trained and activated"),
}
QUEUE_METRIC = "queue_ready"
METRIC_TABLE_NAMES: tuple[str, ...] = (*GAUGES, QUEUE_METRIC, *COUNTERS)
PHASES = ("rl", "sample", "spotcheck", "retrain", "emit")


@dataclass
class PropelMetrics:
    """The daemon's collectors, all registered on :attr:`registry`."""

    registry: CollectorRegistry
    gauges: dict[str, Gauge]
    counters: dict[str, Counter]
    queue_depth: Gauge
    cycle: Gauge
    cycles: Counter
    alerts_fired: Counter
    alert_active: Gauge
    phase_duration: Histogram
    degraded: Gauge
    last_cycle: int | None = field(default=None)


def build_metrics(registry: CollectorRegistry | None = None) -> PropelMetrics:
    """Create every ``propel_`` collector on ``registry`` (a fresh private registry by default)."""
    reg = registry if registry is not None else CollectorRegistry(auto_describe=True)
    gauges = {key: Gauge(name, doc, registry=reg) for key, (name, doc) in GAUGES.items()}
    counters = {key: Counter(name, doc, registry=reg) for key, (name, doc) in COUNTERS.items()}
    metrics = PropelMetrics(
        registry=reg,
        gauges=gauges,
        counters=counters,
        queue_depth=Gauge("propel_queue_depth", "Downstream queue rows by state", ["state"], registry=reg),
        cycle=Gauge("propel_cycle", "Last cycle whose metrics were exported", registry=reg),
        cycles=Counter("propel_cycles", "Daemon cycles completed", registry=reg),
        alerts_fired=Counter("propel_alerts_fired", "Alerts fired", ["rule", "severity"], registry=reg),
        alert_active=Gauge("propel_alert_active", "1 while an alert is open", ["rule", "severity"], registry=reg),
        phase_duration=Histogram(
            "propel_phase_duration_seconds", "Wall time of one daemon phase", ["phase"], registry=reg,
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)),
        degraded=Gauge("propel_degraded", "1 while the daemon is degraded for this reason (see /v1/status)",
                       ["reason"], registry=reg),
    )
    for phase in PHASES:  # every phase's series exists (at zero) from the first scrape
        metrics.phase_duration.labels(phase=phase)
    for state in QUEUE_STATES:
        metrics.queue_depth.labels(state=state)
    return metrics


def export_cycle(registry_obj: PropelMetrics, metrics: Mapping[str, float], cycle: int | None = None) -> list[str]:
    """Export one cycle's metric-table values; returns the names it did not know (to log).

    Gauges are set; ``emitted`` and ``solver_trials`` (per-cycle counts) are added to their
    counters. With ``cycle``, ``propel_cycle`` is set and ``propel_cycles_total`` incremented, and a
    cycle at or before the last exported one does not add to the counters again (a daemon that
    re-runs a cycle after a crash does not double-count).
    """
    repeat = cycle is not None and registry_obj.last_cycle is not None and cycle <= registry_obj.last_cycle
    unknown: list[str] = []
    for name, value in metrics.items():
        if name in registry_obj.gauges:
            registry_obj.gauges[name].set(float(value))
        elif name == QUEUE_METRIC:
            registry_obj.queue_depth.labels(state="ready").set(float(value))
        elif name in registry_obj.counters:
            if not repeat and value > 0:
                registry_obj.counters[name].inc(float(value))
        else:
            unknown.append(name)
    if cycle is not None and not repeat:
        registry_obj.cycle.set(cycle)
        registry_obj.cycles.inc()
        registry_obj.last_cycle = cycle
    return unknown


def export_queue_depths(registry_obj: PropelMetrics, depths: Mapping[str, int]) -> None:
    """Set ``propel_queue_depth{state}`` for every state (``repo.queue_depths``; absent states → 0)."""
    for state in QUEUE_STATES:
        registry_obj.queue_depth.labels(state=state).set(float(depths.get(state, 0)))


def export_degraded(registry_obj: PropelMetrics, active: Iterable[str], reasons: Iterable[str]) -> None:
    """``propel_degraded{reason}``: 1 for each ``active`` reason, 0 for the other known ``reasons``."""
    on = set(active)
    for reason in {*reasons, *on}:
        registry_obj.degraded.labels(reason=reason).set(1.0 if reason in on else 0.0)


def observe_phase(registry_obj: PropelMetrics, phase: str, seconds: float) -> None:
    registry_obj.phase_duration.labels(phase=phase).observe(seconds)


@contextmanager
def time_phase(registry_obj: PropelMetrics, phase: str) -> Iterator[None]:
    """``with time_phase(m, "rl"): …`` observes the block's wall time (also when it raises)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        observe_phase(registry_obj, phase, time.perf_counter() - start)


def render(registry_obj: PropelMetrics) -> tuple[bytes, str]:
    """The text exposition and its content type, for the API's ``GET /metrics``."""
    return generate_latest(registry_obj.registry), CONTENT_TYPE_LATEST
